"""The code example of the Keras 2.15 API documentation of tf.keras.layers.Attention ("a code example for using
`Attention` in a CNN+Attention network", keras/src/layers/attention/attention.py), as published: query and value
Inputs of variable-length token ids, a shared Embedding, a shared Conv1D with 'same' padding,
tf.keras.layers.Attention()([query_seq_encoding, value_seq_encoding]), GlobalAveragePooling1D on both and
Concatenate. Shrunk: Embedding input_dim 100 (published 1000), output_dim 16 (64), Conv1D filters 16 (100). The
example stops at "# Add DNN layers, and create Model. # ..."; completed minimally here: one Dense sigmoid output,
tf.keras.Model([query_input, value_input], outputs), compile(optimizer="adam", loss="binary_crossentropy",
metrics=["accuracy"]) and fit on synthetic query/value ids (Tq = 8, Tv = 12) labelled 1 when the query and the
value share a token."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import tensorflow as tf

# Variable-length int sequences.
query_input = tf.keras.Input(shape=(None,), dtype='int32')
value_input = tf.keras.Input(shape=(None,), dtype='int32')

# Embedding lookup.
token_embedding = tf.keras.layers.Embedding(input_dim=100, output_dim=16)
# Query embeddings of shape [batch_size, Tq, dimension].
query_embeddings = token_embedding(query_input)
# Value embeddings of shape [batch_size, Tv, dimension].
value_embeddings = token_embedding(value_input)

# CNN layer.
cnn_layer = tf.keras.layers.Conv1D(
    filters=16,
    kernel_size=4,
    # Use 'same' padding so outputs have the same shape as inputs.
    padding='same')
# Query encoding of shape [batch_size, Tq, filters].
query_seq_encoding = cnn_layer(query_embeddings)
# Value encoding of shape [batch_size, Tv, filters].
value_seq_encoding = cnn_layer(value_embeddings)

# Query-value attention of shape [batch_size, Tq, filters].
query_value_attention_seq = tf.keras.layers.Attention()(
    [query_seq_encoding, value_seq_encoding])

# Reduce over the sequence axis to produce encodings of shape
# [batch_size, filters].
query_encoding = tf.keras.layers.GlobalAveragePooling1D()(
    query_seq_encoding)
query_value_attention = tf.keras.layers.GlobalAveragePooling1D()(
    query_value_attention_seq)

# Concatenate query and document encodings to produce a DNN input layer.
input_layer = tf.keras.layers.Concatenate()(
    [query_encoding, query_value_attention])

# Add DNN layers, and create Model.
# (not published: completed minimally)
outputs = tf.keras.layers.Dense(1, activation='sigmoid')(input_layer)
model = tf.keras.Model([query_input, value_input], outputs)
model.compile(optimizer='adam', loss='binary_crossentropy', metrics=['accuracy'])

rng = np.random.default_rng(7)
queries = rng.integers(1, 100, (320, 8)).astype('int32')
values = rng.integers(1, 100, (320, 12)).astype('int32')
labels = np.array([len(np.intersect1d(q, v)) > 0 for q, v in zip(queries, values)], dtype='float32')
model.fit([queries, values], labels, batch_size=32, epochs=2)
