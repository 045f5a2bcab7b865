"""The click model's network and how it is fitted, offline: the Keras architecture (build), the training
configuration and the fit with early stopping. The trained network is served inside
serving.model.click_model.ClickModel, which loads a saved one without this module.

Architecture (functional API, every layer a built-in one so a saved model loads without this module):

    user features (standardised) ──► Dense(k, no bias) ─┐
    ad: embedding ++ category emb ++ bid-type emb       │ dot ──► user-ad interaction (a logit term)
        ++ (log ctr prior, quality, known) ─────────────► Dense(k, no bias) ─┘
    [user, ad, placement/country/device/position embeddings, interaction] ──► MLP ──► Dense(1)
    logit = MLP output + interaction + position bias[position];  pCTR = sigmoid(logit)

The projected dot product learns which users click which ads (what an ad's prior cannot know); the
position enters both the MLP and a per-position logit bias, so at serving one candidate is scored at every
slot position by tiling it over the positions. Never runs on the request path."""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, not errors

import keras  # noqa: E402 - after the log level, which TensorFlow reads at import
from keras import layers  # noqa: E402

from serving.model.features import AD_NUMERIC, FeatureSpec  # noqa: E402


@dataclass(frozen=True)
class Architecture:
    embedding_dim: int = 4  # per categorical input
    interaction_dim: int = 8  # width of the user and ad projections of the dot product
    hidden: tuple[int, ...] = (64, 32)


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    batch_size: int = 512
    learning_rate: float = 3e-3
    patience: int = 2  # epochs without a better validation loss before stopping (best weights restored)
    seed: int = 1
    architecture: Architecture = field(default_factory=Architecture)


def build(spec: FeatureSpec, architecture: Architecture = Architecture(), name: str = "click_model"):
    """The Keras model for a feature spec (inputs named as features.request_inputs names them)."""
    e = architecture.embedding_dim
    inputs = {
        "user": keras.Input((spec.user_dim,), name="user"),
        "ad_embedding": keras.Input((spec.ad_embedding_dim,), name="ad_embedding"),
        "ad_numeric": keras.Input((len(AD_NUMERIC),), name="ad_numeric"),
    }
    embedded = {}
    for name, width in (("ad_category", e), ("bid_type", 2), ("placement", e), ("country", e), ("device", e),
                        ("position", e)):
        inputs[name] = keras.Input((), dtype="int32", name=name)
        embedded[name] = layers.Embedding(spec.vocabulary_size(name), width, name=f"{name}_embedding")(inputs[name])
    ad = layers.Concatenate(name="ad")([inputs["ad_embedding"], embedded["ad_category"], embedded["bid_type"],
                                        inputs["ad_numeric"]])
    user_projection = layers.Dense(architecture.interaction_dim, use_bias=False, name="user_projection")(inputs["user"])
    ad_projection = layers.Dense(architecture.interaction_dim, use_bias=False, name="ad_projection")(ad)
    interaction = layers.Dot(axes=1, name="user_ad_interaction")([user_projection, ad_projection])
    hidden = layers.Concatenate(name="mlp_input")(
        [inputs["user"], ad, embedded["placement"], embedded["country"], embedded["device"], embedded["position"],
         interaction])
    for i, width in enumerate(architecture.hidden):
        hidden = layers.Dense(width, activation="relu", name=f"hidden_{i}")(hidden)
    mlp_logit = layers.Dense(1, name="mlp_logit")(hidden)
    position_bias = layers.Embedding(spec.vocabulary_size("position"), 1, embeddings_initializer="zeros",
                                     name="position_bias")(inputs["position"])
    logit = layers.Add(name="logit")([mlp_logit, interaction, position_bias])
    pctr = layers.Activation("sigmoid", name="pctr")(logit)
    return keras.Model(inputs=inputs, outputs=pctr, name=name)


class EpochLog(keras.callbacks.Callback):
    """One line per epoch (loss, validation loss, seconds) to a log function (stderr by default)."""

    def __init__(self, log: Callable[[str], None], epochs: int):
        super().__init__()
        self.log, self.epochs, self.began = log, epochs, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.began = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.log(f"epoch {epoch + 1}/{self.epochs}: loss {logs.get('loss', float('nan')):.5f} "
                 f"val_loss {logs.get('val_loss', float('nan')):.5f} ({time.monotonic() - self.began:.1f} s)")


def fit(model, train_inputs: Mapping[str, np.ndarray], train_labels: np.ndarray,
        validation_inputs: Mapping[str, np.ndarray], validation_labels: np.ndarray, config: TrainConfig,
        log: Callable[[str], None]) -> dict[str, list[float]]:
    """Adam on unweighted binary cross-entropy, early stopping on the validation loss (best weights kept)."""
    keras.utils.set_random_seed(config.seed)
    model.compile(optimizer=keras.optimizers.Adam(config.learning_rate), loss="binary_crossentropy")
    history = model.fit(
        dict(train_inputs), train_labels.astype(np.float32), batch_size=config.batch_size, epochs=config.epochs,
        validation_data=(dict(validation_inputs), validation_labels.astype(np.float32)), shuffle=True, verbose=0,
        callbacks=[keras.callbacks.EarlyStopping(monitor="val_loss", patience=config.patience,
                                                 restore_best_weights=True),
                   EpochLog(log, config.epochs)])
    return {k: [float(v) for v in values] for k, values in history.history.items()}


def stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
