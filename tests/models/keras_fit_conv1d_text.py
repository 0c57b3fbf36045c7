"""Keras' example "Text classification from scratch" (keras-io examples/nlp/text_classification_from_scratch.py,
the tf.keras version last modified 2020/05/17), as published: its custom_standardization, TextVectorization adapted
on the text of the training dataset, the datasets mapped by vectorize_text with cache/prefetch, and its 1D convnet
compiled and fit as published. The IMDB download and tf.keras.preprocessing.text_dataset_from_directory are
replaced by synthetic reviews (short strings with capitals, punctuation and "<br />" tags, labels 0 = neg, 1 = pos)
batched as text_dataset_from_directory gives them: (string, int32 label) batches, split 80/20 with seed 1337, the
training subset shuffled. Shrunk: 320 reviews, max_features 200, embedding_dim 16, sequence_length 40, the Conv1D
filters and hidden Dense units 16 (kernel size, strides, padding and activations as published). Left out: the test
dataset, model.evaluate and the end-to-end export model after training."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import tensorflow as tf
import numpy as np

# Synthetic reviews in place of the aclImdb/train files (neg = 0, pos = 1, as the folders' names sort).
rng = np.random.default_rng(11)
POSITIVE = ["great", "Wonderful", "loved", "superb", "moving", "brilliant", "fun", "charming"]
NEGATIVE = ["awful", "boring", "Terrible", "hated", "dull", "waste", "mess", "weak"]
NEUTRAL = ["the", "movie", "film", "plot", "actors", "a", "was", "and", "is", "it", "story", "scene", "this",
           "of", "ending", "music", "characters", "director", "script", "really", "very", "quite", "too", "I"]


def synthetic_review(label):
    words = list(rng.choice(NEUTRAL, rng.integers(8, 24)))
    for _ in range(rng.integers(2, 5)):
        words.insert(rng.integers(0, len(words) + 1), rng.choice(POSITIVE if label else NEGATIVE))
    words.insert(rng.integers(0, len(words) + 1), rng.choice(NEGATIVE if label else POSITIVE))
    text = " ".join(words)
    if rng.random() < 0.5:
        text = text.replace(" ", "!<br /><br />", 1)
    return text.capitalize() + rng.choice([".", "!", "...", "?"])


review_labels = rng.integers(0, 2, 320).astype("int32")
review_texts = np.array([synthetic_review(label) for label in review_labels])


def text_dataset_from_reviews(texts, labels, batch_size=32, validation_split=None, subset=None, seed=None):
    """As text_dataset_from_directory with label_mode="int": the files shuffled with seed, the subset taken,
    the training subset shuffled, batched."""
    order = np.random.RandomState(seed).permutation(len(texts))
    texts, labels = texts[order], labels[order]
    num_val_samples = int(validation_split * len(texts))
    if subset == "training":
        texts, labels = texts[:-num_val_samples], labels[:-num_val_samples]
    else:
        texts, labels = texts[-num_val_samples:], labels[-num_val_samples:]
    dataset = tf.data.Dataset.from_tensor_slices((texts, labels))
    if subset == "training":
        dataset = dataset.shuffle(buffer_size=batch_size * 8, seed=seed)
    return dataset.batch(batch_size)


batch_size = 32
raw_train_ds = text_dataset_from_reviews(
    review_texts,
    review_labels,
    batch_size=batch_size,
    validation_split=0.2,
    subset="training",
    seed=1337,
)
raw_val_ds = text_dataset_from_reviews(
    review_texts,
    review_labels,
    batch_size=batch_size,
    validation_split=0.2,
    subset="validation",
    seed=1337,
)

print(f"Number of batches in raw_train_ds: {raw_train_ds.cardinality()}")
print(f"Number of batches in raw_val_ds: {raw_val_ds.cardinality()}")

# It's important to take a look at your raw data to ensure your normalization
# and tokenization will work as expected. We can do that by taking a few
# examples from the training set and looking at them.
# This is one of the places where eager execution shines:
# we can just evaluate these tensors using .numpy()
# instead of needing to evaluate them in a Session/Graph context.
for text_batch, label_batch in raw_train_ds.take(1):
    for i in range(5):
        print(text_batch.numpy()[i])
        print(label_batch.numpy()[i])

from tensorflow.keras.layers import TextVectorization
import string
import re


# Having looked at our data above, we see that the raw text contains HTML break
# tags of the form '<br />'. These tags will not be removed by the default
# standardizer (which doesn't strip HTML). Because of this, we will need to
# create a custom standardization function.
def custom_standardization(input_data):
    lowercase = tf.strings.lower(input_data)
    stripped_html = tf.strings.regex_replace(lowercase, "<br />", " ")
    return tf.strings.regex_replace(
        stripped_html, f"[{re.escape(string.punctuation)}]", ""
    )


# Model constants.
max_features = 200
embedding_dim = 16
sequence_length = 40

# Now that we have our custom standardization, we can instantiate our text
# vectorization layer. We are using this layer to normalize, split, and map
# strings to integers, so we set our 'output_mode' to 'int'.
# Note that we're using the default split function,
# and the custom standardization defined above.
# We also set an explicit maximum sequence length, since the CNNs later in our
# model won't support ragged sequences.
vectorize_layer = TextVectorization(
    standardize=custom_standardization,
    max_tokens=max_features,
    output_mode="int",
    output_sequence_length=sequence_length,
)

# Now that the vocab layer has been created, call `adapt` on a text-only
# dataset to create the vocabulary. You don't have to batch, but for very large
# datasets this means you're not keeping spare copies of the dataset in memory.

# Let's make a text-only dataset (no labels):
text_ds = raw_train_ds.map(lambda x, y: x)
# Let's call `adapt`:
vectorize_layer.adapt(text_ds)


def vectorize_text(text, label):
    text = tf.expand_dims(text, -1)
    return vectorize_layer(text), label


# Vectorize the data.
train_ds = raw_train_ds.map(vectorize_text)
val_ds = raw_val_ds.map(vectorize_text)

# Do async prefetching / buffering of the data for best performance on GPU.
train_ds = train_ds.cache().prefetch(buffer_size=10)
val_ds = val_ds.cache().prefetch(buffer_size=10)

from tensorflow.keras import layers

# A integer input for vocab indices.
inputs = tf.keras.Input(shape=(None,), dtype="int64")

# Next, we add a layer to map those vocab indices into a space of dimensionality
# 'embedding_dim'.
x = layers.Embedding(max_features, embedding_dim)(inputs)
x = layers.Dropout(0.5)(x)

# Conv1D + global max pooling
x = layers.Conv1D(16, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.Conv1D(16, 7, padding="valid", activation="relu", strides=3)(x)
x = layers.GlobalMaxPooling1D()(x)

# We add a vanilla hidden layer:
x = layers.Dense(16, activation="relu")(x)
x = layers.Dropout(0.5)(x)

# We project onto a single unit output layer, and squash it with a sigmoid:
predictions = layers.Dense(1, activation="sigmoid", name="predictions")(x)

model = tf.keras.Model(inputs, predictions)

# Compile the model with binary crossentropy loss and an adam optimizer.
model.compile(loss="binary_crossentropy", optimizer="adam", metrics=["accuracy"])

epochs = 3

# Fit the model using the train and test datasets.
model.fit(train_ds, validation_data=val_ds, epochs=epochs)
