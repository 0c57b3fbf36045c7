"""Keras' example "Character-level recurrent sequence-to-sequence model" (keras-io examples/nlp/lstm_seq2seq.py,
last modified 2023/11/22), as published up to its model.fit: its vectorization of tab-separated text lines into
one-hot encoder inputs, decoder inputs and decoder targets one step ahead, a functional encoder-decoder of an
LSTM(return_state=True) whose states are the initial_state of a second LSTM(return_sequences=True,
return_state=True), a Dense softmax, compiled with "rmsprop" and categorical cross-entropy, fit on the two inputs
with validation_split=0.2. The fra-eng download (its unzip, os and pathlib) is replaced by synthetic lines of
fra.txt's form (English, French, attribution, tab-separated): short sentences of random lowercase words, the
target the words reversed through a fixed letter substitution. Shrunk: num_samples 10000 -> 320, latent_dim 256
-> 32, epochs 100 -> 2. Left out after fit: model.save, the inference models and decode_sequence."""
import harness.keras_program  # toolkit: model.fit below trains in the toolkit's runners (before TensorFlow)
import numpy as np
import keras

# Synthetic sentence pairs instead of the download, one line each as fra.txt has them.
rng = np.random.default_rng(11)
letters = list("abcdefghijklmnopqrstuvwxyz")
cipher = dict(zip(letters, rng.permutation(letters)))


def synthetic_line(k):
    words = ["".join(rng.choice(letters, rng.integers(2, 6))) for _ in range(rng.integers(2, 4))]
    english = " ".join(words).capitalize() + "."
    french = " ".join("".join(cipher[c] for c in w) for w in reversed(words)).capitalize() + " !"
    return f"{english}\t{french}\tCC-BY 2.0 (France) Attribution: tatoeba.org #{k}"


batch_size = 64  # Batch size for training.
epochs = 2  # Number of epochs to train for.
latent_dim = 32  # Latent dimensionality of the encoding space.
num_samples = 320  # Number of samples to train on.

# Vectorize the data.
input_texts = []
target_texts = []
input_characters = set()
target_characters = set()
lines = ("\n".join(synthetic_line(k) for k in range(num_samples)) + "\n").split("\n")
for line in lines[: min(num_samples, len(lines) - 1)]:
    input_text, target_text, _ = line.split("\t")
    # We use "tab" as the "start sequence" character
    # for the targets, and "\n" as "end sequence" character.
    target_text = "\t" + target_text + "\n"
    input_texts.append(input_text)
    target_texts.append(target_text)
    for char in input_text:
        if char not in input_characters:
            input_characters.add(char)
    for char in target_text:
        if char not in target_characters:
            target_characters.add(char)

input_characters = sorted(list(input_characters))
target_characters = sorted(list(target_characters))
num_encoder_tokens = len(input_characters)
num_decoder_tokens = len(target_characters)
max_encoder_seq_length = max([len(txt) for txt in input_texts])
max_decoder_seq_length = max([len(txt) for txt in target_texts])

print("Number of samples:", len(input_texts))
print("Number of unique input tokens:", num_encoder_tokens)
print("Number of unique output tokens:", num_decoder_tokens)
print("Max sequence length for inputs:", max_encoder_seq_length)
print("Max sequence length for outputs:", max_decoder_seq_length)

input_token_index = dict([(char, i) for i, char in enumerate(input_characters)])
target_token_index = dict([(char, i) for i, char in enumerate(target_characters)])

encoder_input_data = np.zeros(
    (len(input_texts), max_encoder_seq_length, num_encoder_tokens),
    dtype="float32",
)
decoder_input_data = np.zeros(
    (len(input_texts), max_decoder_seq_length, num_decoder_tokens),
    dtype="float32",
)
decoder_target_data = np.zeros(
    (len(input_texts), max_decoder_seq_length, num_decoder_tokens),
    dtype="float32",
)

for i, (input_text, target_text) in enumerate(zip(input_texts, target_texts)):
    for t, char in enumerate(input_text):
        encoder_input_data[i, t, input_token_index[char]] = 1.0
    encoder_input_data[i, t + 1 :, input_token_index[" "]] = 1.0
    for t, char in enumerate(target_text):
        # decoder_target_data is ahead of decoder_input_data by one timestep
        decoder_input_data[i, t, target_token_index[char]] = 1.0
        if t > 0:
            # decoder_target_data will be ahead by one timestep
            # and will not include the start character.
            decoder_target_data[i, t - 1, target_token_index[char]] = 1.0
    decoder_input_data[i, t + 1 :, target_token_index[" "]] = 1.0
    decoder_target_data[i, t:, target_token_index[" "]] = 1.0

# Define an input sequence and process it.
encoder_inputs = keras.Input(shape=(None, num_encoder_tokens))
encoder = keras.layers.LSTM(latent_dim, return_state=True)
encoder_outputs, state_h, state_c = encoder(encoder_inputs)

# We discard `encoder_outputs` and only keep the states.
encoder_states = [state_h, state_c]

# Set up the decoder, using `encoder_states` as initial state.
decoder_inputs = keras.Input(shape=(None, num_decoder_tokens))

# We set up our decoder to return full output sequences,
# and to return internal states as well. We don't use the
# return states in the training model, but we will use them in inference.
decoder_lstm = keras.layers.LSTM(latent_dim, return_sequences=True, return_state=True)
decoder_outputs, _, _ = decoder_lstm(decoder_inputs, initial_state=encoder_states)
decoder_dense = keras.layers.Dense(num_decoder_tokens, activation="softmax")
decoder_outputs = decoder_dense(decoder_outputs)

# Define the model that will turn
# `encoder_input_data` & `decoder_input_data` into `decoder_target_data`
model = keras.Model([encoder_inputs, decoder_inputs], decoder_outputs)

model.compile(
    optimizer="rmsprop", loss="categorical_crossentropy", metrics=["accuracy"]
)
model.fit(
    [encoder_input_data, decoder_input_data],
    decoder_target_data,
    batch_size=batch_size,
    epochs=epochs,
    validation_split=0.2,
)
