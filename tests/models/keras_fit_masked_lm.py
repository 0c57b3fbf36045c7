"""Keras' example "End-to-end Masked Language Modeling with BERT": its model as published (a functional model
calling layers.MultiHeadAttention, a residual of `query + attention_output` between layers) and its masking of the
inputs, on synthetic reviews, sizes small. The example's MaskedLanguageModel (a train_step computing a sparse
cross-entropy weighted by sample_weight) is keras.Model with that loss compiled and the weights in the dataset."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers


class Config:
    MAX_LEN = 16
    BATCH_SIZE = 8
    LR = 0.001
    VOCAB_SIZE = 120
    EMBED_DIM = 16
    NUM_HEAD = 2
    FF_DIM = 32
    NUM_LAYERS = 1


config = Config()


def bert_module(query, key, value, i):
    # Multi headed self-attention
    attention_output = layers.MultiHeadAttention(
        num_heads=config.NUM_HEAD,
        key_dim=config.EMBED_DIM // config.NUM_HEAD,
        name="encoder_{}_multiheadattention".format(i),
    )(query, key, value)
    attention_output = layers.Dropout(0.1, name="encoder_{}_att_dropout".format(i))(attention_output)
    attention_output = layers.LayerNormalization(
        epsilon=1e-6, name="encoder_{}_att_layernormalization".format(i)
    )(query + attention_output)

    # Feed-forward layer
    ffn = keras.Sequential(
        [
            layers.Dense(config.FF_DIM, activation="relu"),
            layers.Dense(config.EMBED_DIM),
        ],
        name="encoder_{}_ffn".format(i),
    )
    ffn_output = ffn(attention_output)
    ffn_output = layers.Dropout(0.1, name="encoder_{}_ffn_dropout".format(i))(ffn_output)
    sequence_output = layers.LayerNormalization(
        epsilon=1e-6, name="encoder_{}_ffn_layernormalization".format(i)
    )(attention_output + ffn_output)
    return sequence_output


def create_masked_language_bert_model():
    inputs = layers.Input((config.MAX_LEN,), dtype="int64")

    word_embeddings = layers.Embedding(config.VOCAB_SIZE, config.EMBED_DIM, name="word_embedding")(inputs)
    encoder_output = word_embeddings

    for i in range(config.NUM_LAYERS):
        encoder_output = bert_module(encoder_output, encoder_output, encoder_output, i)

    mlm_output = layers.Dense(config.VOCAB_SIZE, name="mlm_cls", activation="softmax")(encoder_output)
    mlm_model = keras.Model(inputs, mlm_output, name="masked_bert_model")

    optimizer = keras.optimizers.Adam(learning_rate=config.LR)
    mlm_model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return mlm_model


# The example's masking of encoded reviews: 15% of the tokens chosen, the labels the original ids, weight 1 there.
rng = np.random.default_rng(3)
x_all_review = rng.integers(3, config.VOCAB_SIZE, (96, config.MAX_LEN))
inp_mask = rng.random(x_all_review.shape) < 0.15
labels = -1 * np.ones(x_all_review.shape, dtype=int)
labels[inp_mask] = x_all_review[inp_mask]
x_masked_train = np.copy(x_all_review)
x_masked_train[inp_mask] = 2  # the [mask] token's id
sample_weights = np.ones(labels.shape)
sample_weights[labels == -1] = 0
y_labels = np.copy(x_all_review)

mlm_ds = tf.data.Dataset.from_tensor_slices((x_masked_train, y_labels, sample_weights))
mlm_ds = mlm_ds.shuffle(1000).batch(config.BATCH_SIZE)

bert_masked_model = create_masked_language_bert_model()
bert_masked_model.fit(mlm_ds, epochs=1)
