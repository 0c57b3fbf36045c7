"""The TensorFlow tutorial "Text classification with an RNN", as published, on synthetic reviews."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import tensorflow as tf

VOCAB_SIZE, LENGTH = 200, 12
rng = np.random.default_rng(3)
lengths = rng.integers(2, LENGTH + 1, 256)
reviews = np.where(np.arange(LENGTH) < lengths[:, None], rng.integers(1, VOCAB_SIZE, (256, LENGTH)), 0)
labels = (reviews % 7 == 3).sum(axis=1) > 1

model = tf.keras.Sequential([
    tf.keras.layers.Embedding(VOCAB_SIZE, 16, mask_zero=True),
    tf.keras.layers.Bidirectional(tf.keras.layers.LSTM(8)),
    tf.keras.layers.Dense(8, activation="relu"),
    tf.keras.layers.Dropout(0.5),
    tf.keras.layers.Dense(1)
])
model.compile(loss=tf.keras.losses.BinaryCrossentropy(from_logits=True),
              optimizer=tf.keras.optimizers.Adam(1e-3),
              metrics=["accuracy"])
history = model.fit(reviews, labels, batch_size=16, epochs=10, validation_split=0.25)
print("accuracy", history.history["accuracy"][-1])
