"""Keras' example "Timeseries forecasting for weather prediction", as published (its normalization of the selected
features, keras.preprocessing.timeseries_dataset_from_array for training and validation, an LSTM(32) and Dense(1)
fitted with Adam and mse, its EarlyStopping and ModelCheckpoint callbacks), on synthetic weather. The Jena climate
CSV (downloaded and unzipped) is replaced by 2,000 rows of its 15 columns (a "Date Time" string and 14 float
measurements, the temperature with a daily cycle) made with numpy; pandas replaced by a dict of numpy columns and a
numpy array, doing the same steps (`.loc[0 : train_split - 1]` inclusive is `[0:train_split]`; `[[1]]` keeps a
column of its own). Shrunk: past 720 -> 120, future 72 -> 12 (step 6 kept), epochs 10 -> 2. Plots left out."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import tensorflow as tf
from tensorflow import keras

"""
## Climate Data Time-Series
"""

# The Jena climate CSV (one row every 10 minutes), replaced by synthetic columns of its names and kinds
rng = np.random.default_rng(11)
rows = 2000
daily = np.sin(2 * np.pi * np.arange(rows) / 144)  # 144 records of 10 minutes a day
first_row = {"p (mbar)": 996.52, "T (degC)": -8.02, "Tpot (K)": 265.4, "Tdew (degC)": -8.9, "rh (%)": 93.3,
             "VPmax (mbar)": 3.33, "VPact (mbar)": 3.11, "VPdef (mbar)": 0.22, "sh (g/kg)": 1.94,
             "H2OC (mmol/mol)": 3.12, "rho (g/m**3)": 1307.75, "wv (m/s)": 1.03, "max. wv (m/s)": 1.75,
             "wd (deg)": 152.3}
df = {"Date Time": np.array([f"{1 + i // 144:02d}.01.2009 {i // 6 % 24:02d}:{i % 6 * 10:02d}:00"
                             for i in range(rows)])}
df.update({key: value + (abs(value) * 0.05 + 1) * (rng.uniform(-1, 1) * daily + 0.2 * rng.normal(size=rows))
           for key, value in first_row.items()})

titles = [
    "Pressure",
    "Temperature",
    "Temperature in Kelvin",
    "Temperature (dew point)",
    "Relative Humidity",
    "Saturation vapor pressure",
    "Vapor pressure",
    "Vapor pressure deficit",
    "Specific humidity",
    "Water vapor concentration",
    "Airtight",
    "Wind speed",
    "Maximum wind speed",
    "Wind direction in degrees",
]

feature_keys = [
    "p (mbar)",
    "T (degC)",
    "Tpot (K)",
    "Tdew (degC)",
    "rh (%)",
    "VPmax (mbar)",
    "VPact (mbar)",
    "VPdef (mbar)",
    "sh (g/kg)",
    "H2OC (mmol/mol)",
    "rho (g/m**3)",
    "wv (m/s)",
    "max. wv (m/s)",
    "wd (deg)",
]

date_time_key = "Date Time"

"""
## Data Preprocessing
"""

split_fraction = 0.715
train_split = int(split_fraction * int(len(df[date_time_key])))
step = 6

past = 120
future = 12
learning_rate = 0.001
batch_size = 256
epochs = 2


def normalize(data, train_split):
    data_mean = data[:train_split].mean(axis=0)
    data_std = data[:train_split].std(axis=0)
    return (data - data_mean) / data_std


print(
    "The selected parameters are:",
    ", ".join([titles[i] for i in [0, 1, 5, 7, 8, 10, 11]]),
)
selected_features = [feature_keys[i] for i in [0, 1, 5, 7, 8, 10, 11]]
features = np.stack([df[key] for key in selected_features], axis=1)

features = normalize(features, train_split)

train_data = features[0:train_split]
val_data = features[train_split:]

"""
# Training dataset
"""

start = past + future
end = start + train_split

x_train = train_data[:, [i for i in range(7)]]
y_train = features[start:end][:, [1]]

sequence_length = int(past / step)

dataset_train = keras.preprocessing.timeseries_dataset_from_array(
    x_train,
    y_train,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)

"""
## Validation dataset
"""

x_end = len(val_data) - past - future

label_start = train_split + past + future

x_val = val_data[:x_end][:, [i for i in range(7)]]
y_val = features[label_start:][:, [1]]

dataset_val = keras.preprocessing.timeseries_dataset_from_array(
    x_val,
    y_val,
    sequence_length=sequence_length,
    sampling_rate=step,
    batch_size=batch_size,
)


for batch in dataset_train.take(1):
    inputs, targets = batch

print("Input shape:", inputs.numpy().shape)
print("Target shape:", targets.numpy().shape)

"""
## Training
"""

inputs = keras.layers.Input(shape=(inputs.shape[1], inputs.shape[2]))
lstm_out = keras.layers.LSTM(32)(inputs)
outputs = keras.layers.Dense(1)(lstm_out)

model = keras.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")
model.summary()

path_checkpoint = "model_checkpoint.h5"
es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

modelckpt_callback = keras.callbacks.ModelCheckpoint(
    monitor="val_loss",
    filepath=path_checkpoint,
    verbose=1,
    save_weights_only=True,
    save_best_only=True,
)

history = model.fit(
    dataset_train,
    epochs=epochs,
    validation_data=dataset_val,
    callbacks=[es_callback, modelckpt_callback],
)
