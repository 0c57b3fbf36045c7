"""Keras' example "End-to-end Masked Language Modeling with BERT": its model as published (a functional model
calling layers.MultiHeadAttention, a residual of `query + attention_output` between layers, a position Embedding
given its sinusoidal table and called on tf.range as the model is built: a constant) and its masking of the
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


def get_pos_encoding_matrix(max_len, d_emb):
    pos_enc = np.array(
        [
            [pos / np.power(10000, 2 * (j // 2) / d_emb) for j in range(d_emb)]
            if pos != 0
            else np.zeros(d_emb)
            for pos in range(max_len)
        ]
    )
    pos_enc[1:, 0::2] = np.sin(pos_enc[1:, 0::2])  # dim 2i
    pos_enc[1:, 1::2] = np.cos(pos_enc[1:, 1::2])  # dim 2i+1
    return pos_enc


def create_masked_language_bert_model():
    inputs = layers.Input((config.MAX_LEN,), dtype="int64")

    word_embeddings = layers.Embedding(config.VOCAB_SIZE, config.EMBED_DIM, name="word_embedding")(inputs)
    position_embeddings = layers.Embedding(
        input_dim=config.MAX_LEN,
        output_dim=config.EMBED_DIM,
        weights=[get_pos_encoding_matrix(config.MAX_LEN, config.EMBED_DIM)],
        name="position_embedding",
    )(tf.range(start=0, limit=config.MAX_LEN, delta=1))
    embeddings = word_embeddings + position_embeddings
    encoder_output = embeddings

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
