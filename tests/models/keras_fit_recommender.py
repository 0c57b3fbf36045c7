"""Keras' example "Collaborative Filtering for Movie Recommendations", as published (its tf.keras version): the
subclassed RecommenderNet (user and movie Embeddings with he_normal and an l2 regularizer, the biases Embeddings of
1, tf.tensordot, a sigmoid), its compile and its fit. The MovieLens download (ratings.csv, read with pandas) is a
synthetic ratings table of 600 ratings by 40 users of 80 movies (non-sequential ids, ratings 0.5 to 5 by 0.5);
pandas is not installed, so the table is a dict of numpy columns and the example's steps are numpy's:
`unique().tolist()` keeps the ids' first appearance order, `map` is the dicts' lookup, and `df.sample(frac=1,
random_state=42)` is the permutation pandas draws for it (RandomState(42)). EMBEDDING_SIZE shrunk from 50 to 16;
the plotting and the recommendations shown after training are left out."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

"""
## First, load the data and apply preprocessing
"""

# Synthetic ratings.csv: userId, movieId, rating, timestamp
rng = np.random.default_rng(7)
user_pool, movie_pool = rng.choice(np.arange(1, 1000), 40, replace=False), rng.choice(np.arange(1, 5000), 80, replace=False)
users, movies = rng.integers(0, 40, 600), rng.integers(0, 80, 600)
affinity = rng.normal(0, 1, 40)[users] + rng.normal(0, 1, 80)[movies] + rng.normal(0, 0.5, 600)
df = {"userId": user_pool[users], "movieId": movie_pool[movies],
      "rating": np.clip(np.round(2 * (3 + affinity)) / 2, 0.5, 5.0), "timestamp": rng.integers(964982703, 1537799250, 600)}

"""
First, need to perform some preprocessing to encode users and movies as integer indices.
"""
user_ids = list(dict.fromkeys(df["userId"].tolist()))
user2user_encoded = {x: i for i, x in enumerate(user_ids)}
userencoded2user = {i: x for i, x in enumerate(user_ids)}
movie_ids = list(dict.fromkeys(df["movieId"].tolist()))
movie2movie_encoded = {x: i for i, x in enumerate(movie_ids)}
movie_encoded2movie = {i: x for i, x in enumerate(movie_ids)}
df["user"] = np.array([user2user_encoded[x] for x in df["userId"].tolist()])
df["movie"] = np.array([movie2movie_encoded[x] for x in df["movieId"].tolist()])

num_users = len(user2user_encoded)
num_movies = len(movie_encoded2movie)
df["rating"] = df["rating"].astype(np.float32)
# min and max ratings will be used to normalize the ratings later
min_rating = min(df["rating"])
max_rating = max(df["rating"])

print(
    "Number of users: {}, Number of Movies: {}, Min rating: {}, Max rating: {}".format(
        num_users, num_movies, min_rating, max_rating
    )
)

"""
## Prepare training and validation data
"""
order = np.random.RandomState(42).permutation(len(df["rating"]))  # df.sample(frac=1, random_state=42)
df = {column: values[order] for column, values in df.items()}
x = np.stack([df["user"], df["movie"]], axis=1)
# Normalize the targets between 0 and 1. Makes it easy to train.
y = (df["rating"] - min_rating) / (max_rating - min_rating)
# Assuming training on 90% of the data and validating on 10%.
train_indices = int(0.9 * len(df["rating"]))
x_train, x_val, y_train, y_val = (
    x[:train_indices],
    x[train_indices:],
    y[:train_indices],
    y[train_indices:],
)

"""
## Create the model

We embed both users and movies in to 50-dimensional vectors.

The model computes a match score between user and movie embeddings via a dot product,
and adds a per-movie and per-user bias. The match score is scaled to the `[0, 1]`
interval via a sigmoid (since our ratings are normalized to this range).
"""
EMBEDDING_SIZE = 16


class RecommenderNet(keras.Model):
    def __init__(self, num_users, num_movies, embedding_size, **kwargs):
        super(RecommenderNet, self).__init__(**kwargs)
        self.num_users = num_users
        self.num_movies = num_movies
        self.embedding_size = embedding_size
        self.user_embedding = layers.Embedding(
            num_users,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.user_bias = layers.Embedding(num_users, 1)
        self.movie_embedding = layers.Embedding(
            num_movies,
            embedding_size,
            embeddings_initializer="he_normal",
            embeddings_regularizer=keras.regularizers.l2(1e-6),
        )
        self.movie_bias = layers.Embedding(num_movies, 1)

    def call(self, inputs):
        user_vector = self.user_embedding(inputs[:, 0])
        user_bias = self.user_bias(inputs[:, 0])
        movie_vector = self.movie_embedding(inputs[:, 1])
        movie_bias = self.movie_bias(inputs[:, 1])
        dot_user_movie = tf.tensordot(user_vector, movie_vector, 2)
        # Add all the components (including bias)
        x = dot_user_movie + user_bias + movie_bias
        # The sigmoid activation forces the rating to between 0 and 1
        return tf.nn.sigmoid(x)


model = RecommenderNet(num_users, num_movies, EMBEDDING_SIZE)
model.compile(
    loss=tf.keras.losses.BinaryCrossentropy(),
    optimizer=keras.optimizers.Adam(learning_rate=0.001),
)

"""
## Train the model based on the data split
"""
history = model.fit(
    x=x_train,
    y=y_train,
    batch_size=64,
    epochs=5,
    verbose=1,
    validation_data=(x_val, y_val),
)
