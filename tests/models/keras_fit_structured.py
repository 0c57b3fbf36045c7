"""Keras' example "Structured data classification from scratch", as published in its tf.keras version with
encode_numerical_feature / encode_categorical_feature (keras-io commit b0d6875: a keras.Input per feature, with its
name and dtype, a Normalization, IntegerLookup or StringLookup adapted on the training dataset, layers.concatenate,
Dense, Dropout, a sigmoid; compile("adam", "binary_crossentropy") and fit with validation_data), on synthetic patients.
The heart-disease CSV (303 rows) is replaced by 303 rows of its 14 columns, their names and kinds (int64 columns,
oldpeak a float, thal a string of "fixed", "normal", "reversible", target 0 or 1) made with numpy; pandas replaced by
a dict of numpy columns: `dataframe.sample(frac=0.2, random_state=1337)` and `drop` are a permutation drawn with
seed 1337, `len(dataframe)` (its rows) is `len(labels)`, and `dataframe.shape`, `head()` left out. Shrunk: epochs
50 -> 2. The plot_model graph and the inference on a new sample left out."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import tensorflow as tf
import numpy as np
from tensorflow import keras
from tensorflow.keras import layers

"""
## Preparing the data
"""

# The heart-disease CSV, replaced by synthetic columns of its names and kinds
rng = np.random.default_rng(17)
n = 303
dataframe = {
    "age": rng.integers(29, 78, n), "sex": rng.integers(0, 2, n), "cp": rng.integers(0, 5, n),
    "trestbps": rng.integers(94, 201, n), "chol": rng.integers(126, 565, n), "fbs": rng.integers(0, 2, n),
    "restecg": rng.integers(0, 3, n), "thalach": rng.integers(71, 203, n), "exang": rng.integers(0, 2, n),
    "oldpeak": rng.uniform(0, 6.2, n).round(1), "slope": rng.integers(1, 4, n), "ca": rng.integers(0, 4, n),
    "thal": rng.choice(["fixed", "normal", "reversible"], n),
}
dataframe["target"] = ((dataframe["exang"] + (dataframe["oldpeak"] > 2) + (dataframe["thal"] == "reversible")
                        + (dataframe["thalach"] < 130)) >= 2).astype(np.int64)

val_index = np.random.default_rng(1337).permutation(n)[:round(0.2 * n)]
val_dataframe = {name: column[val_index] for name, column in dataframe.items()}
train_dataframe = {name: np.delete(column, val_index) for name, column in dataframe.items()}

print(
    "Using %d samples for training and %d for validation"
    % (len(train_dataframe["target"]), len(val_dataframe["target"]))
)

"""
Let's generate `tf.data.Dataset` objects for each dataframe:
"""


def dataframe_to_dataset(dataframe):
    dataframe = dataframe.copy()
    labels = dataframe.pop("target")
    ds = tf.data.Dataset.from_tensor_slices((dict(dataframe), labels))
    ds = ds.shuffle(buffer_size=len(labels))
    return ds


train_ds = dataframe_to_dataset(train_dataframe)
val_ds = dataframe_to_dataset(val_dataframe)

for x, y in train_ds.take(1):
    print("Input:", x)
    print("Target:", y)

train_ds = train_ds.batch(32)
val_ds = val_ds.batch(32)

"""
## Feature preprocessing with Keras layers
"""

from tensorflow.keras.layers import IntegerLookup
from tensorflow.keras.layers import Normalization
from tensorflow.keras.layers import StringLookup


def encode_numerical_feature(feature, name, dataset):
    # Create a Normalization layer for our feature
    normalizer = Normalization()

    # Prepare a Dataset that only yields our feature
    feature_ds = dataset.map(lambda x, y: x[name])
    feature_ds = feature_ds.map(lambda x: tf.expand_dims(x, -1))

    # Learn the statistics of the data
    normalizer.adapt(feature_ds)

    # Normalize the input feature
    encoded_feature = normalizer(feature)
    return encoded_feature


def encode_categorical_feature(feature, name, dataset, is_string):
    lookup_class = StringLookup if is_string else IntegerLookup
    # Create a lookup layer which will turn strings into integer indices
    lookup = lookup_class(output_mode="binary")

    # Prepare a Dataset that only yields our feature
    feature_ds = dataset.map(lambda x, y: x[name])
    feature_ds = feature_ds.map(lambda x: tf.expand_dims(x, -1))

    # Learn the set of possible string values and assign them a fixed integer index
    lookup.adapt(feature_ds)

    # Turn the string input into integer indices
    encoded_feature = lookup(feature)
    return encoded_feature


"""
## Build a model
"""

# Categorical features encoded as integers
sex = keras.Input(shape=(1,), name="sex", dtype="int64")
cp = keras.Input(shape=(1,), name="cp", dtype="int64")
fbs = keras.Input(shape=(1,), name="fbs", dtype="int64")
restecg = keras.Input(shape=(1,), name="restecg", dtype="int64")
exang = keras.Input(shape=(1,), name="exang", dtype="int64")
ca = keras.Input(shape=(1,), name="ca", dtype="int64")

# Categorical feature encoded as string
thal = keras.Input(shape=(1,), name="thal", dtype="string")

# Numerical features
age = keras.Input(shape=(1,), name="age")
trestbps = keras.Input(shape=(1,), name="trestbps")
chol = keras.Input(shape=(1,), name="chol")
thalach = keras.Input(shape=(1,), name="thalach")
oldpeak = keras.Input(shape=(1,), name="oldpeak")
slope = keras.Input(shape=(1,), name="slope")

all_inputs = [
    sex,
    cp,
    fbs,
    restecg,
    exang,
    ca,
    thal,
    age,
    trestbps,
    chol,
    thalach,
    oldpeak,
    slope,
]

# Integer categorical features
sex_encoded = encode_categorical_feature(sex, "sex", train_ds, False)
cp_encoded = encode_categorical_feature(cp, "cp", train_ds, False)
fbs_encoded = encode_categorical_feature(fbs, "fbs", train_ds, False)
restecg_encoded = encode_categorical_feature(restecg, "restecg", train_ds, False)
exang_encoded = encode_categorical_feature(exang, "exang", train_ds, False)
ca_encoded = encode_categorical_feature(ca, "ca", train_ds, False)

# String categorical features
thal_encoded = encode_categorical_feature(thal, "thal", train_ds, True)

# Numerical features
age_encoded = encode_numerical_feature(age, "age", train_ds)
trestbps_encoded = encode_numerical_feature(trestbps, "trestbps", train_ds)
chol_encoded = encode_numerical_feature(chol, "chol", train_ds)
thalach_encoded = encode_numerical_feature(thalach, "thalach", train_ds)
oldpeak_encoded = encode_numerical_feature(oldpeak, "oldpeak", train_ds)
slope_encoded = encode_numerical_feature(slope, "slope", train_ds)

all_features = layers.concatenate(
    [
        sex_encoded,
        cp_encoded,
        fbs_encoded,
        restecg_encoded,
        exang_encoded,
        slope_encoded,
        ca_encoded,
        thal_encoded,
        age_encoded,
        trestbps_encoded,
        chol_encoded,
        thalach_encoded,
        oldpeak_encoded,
    ]
)
x = layers.Dense(32, activation="relu")(all_features)
x = layers.Dropout(0.5)(x)
output = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(all_inputs, output)
model.compile("adam", "binary_crossentropy", metrics=["accuracy"])

"""
## Train the model
"""

model.fit(train_ds, epochs=2, validation_data=val_ds)
