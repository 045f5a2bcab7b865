"""The click model's network and how it is fitted, offline: the Keras architecture (build), the training
configuration and the fit with early stopping. The trained network is served inside
serving.model.click_model.ClickModel, which loads a saved one without this module.

Architecture (functional API, every layer a built-in one so a saved model loads without this module):

    user features (standardised) ──► Dense(k, no bias) ─┐
    ad: embedding ++ category emb ++ bid-type emb       │ dot ──► user-ad interaction (a logit term)
        ++ (log ctr prior, quality, known) ─────────────► Dense(k, no bias) ─┘
    [user, ad, placement/country/device/position embeddings, interaction] ──► MLP ──► Dense(1)
    logit = prior logit + MLP output + interaction + position bias[position];  pCTR = sigmoid(logit)

The prior logit anchors the click model on what the ad-feature snapshot already knows of every ad: the
logit of the ad's ctr prior x the position effect (PriorPredictor's pCTR), moved to the training data's
keep rate (odds / w). The other terms start at zero (the last MLP layer and the ad projection are
zero-initialised), so the untrained network is the priors baseline and training learns corrections to it.
A training log shows only the ads its serving policy picked (one campaign's best ad may take nearly every
impression); without the anchor the network's scores for the other ads are whatever its layers
extrapolate to (ads with priors of 2-7 % scored at 25-45 %), and the next auction picks exactly those.
With it, an ad the log barely covers scores near its prior. The conversion model is built without the
anchor (a click prior says nothing of conversions).

The projected dot product learns which users click which ads (what an ad's prior cannot know); the
position enters both the MLP and a per-position logit bias, so at serving one candidate is scored at every
slot position by tiling it over the positions. Never runs on the request path."""
from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ start-up chatter, not errors

import keras  # noqa: E402 - after the log level, which TensorFlow reads at import
from keras import layers, ops  # noqa: E402

from core.errors import InvalidArgument  # noqa: E402
from serving.decision.prediction import position_effect  # noqa: E402
from serving.model.features import AD_NUMERIC, CTR_FLOOR, FeatureSpec  # noqa: E402


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


def prior_logit(spec: FeatureSpec, ad_numeric, position, keep_rate: float):
    """The anchor's logit, (n, 1): logit(ad ctr prior x position effect) - log(keep rate), PriorPredictor's
    pCTR at the training data's keep rate, from the inputs the network gets (the standardised log ctr prior,
    the position index). Frozen layers hold the spec's standardisation and the position effects, so the saved
    network scores without the spec or this module."""
    if not 0 < keep_rate <= 1:
        raise InvalidArgument(f"keep rate must be in (0, 1], got {keep_rate}")
    log_prior = layers.Dense(1, trainable=False, name="prior_log_ctr", kernel_initializer=keras.initializers.Constant(
        [[spec.log_ctr_scale]] + [[0.0]] * (len(AD_NUMERIC) - 1)),
        bias_initializer=keras.initializers.Constant(spec.log_ctr_mean))(ad_numeric)
    positions = range(spec.vocabulary_size("position"))
    log_effect = layers.Embedding(spec.vocabulary_size("position"), 1, trainable=False, name="prior_log_position",
                                  embeddings_initializer=keras.initializers.Constant(
                                      [[math.log(e)] for e in position_effect(positions).tolist()]))(position)
    p = ops.clip(ops.exp(log_prior + log_effect), CTR_FLOOR, 1.0 - CTR_FLOOR)
    return ops.log(p) - ops.log1p(-p) - math.log(keep_rate)


def build(spec: FeatureSpec, architecture: Architecture = Architecture(), name: str = "click_model", *,
          prior_keep_rate: float | None = None):
    """The Keras model for a feature spec (inputs named as features.request_inputs names them). With
    `prior_keep_rate` (the training data's keep rate) the logit is anchored on the ads' click prior (see the
    module docstring); None builds it without the anchor."""
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
    anchored = prior_keep_rate is not None
    start = "zeros" if anchored else "glorot_uniform"  # anchored: the untrained network is the prior
    user_projection = layers.Dense(architecture.interaction_dim, use_bias=False, name="user_projection")(inputs["user"])
    ad_projection = layers.Dense(architecture.interaction_dim, use_bias=False, kernel_initializer=start,
                                 name="ad_projection")(ad)
    interaction = layers.Dot(axes=1, name="user_ad_interaction")([user_projection, ad_projection])
    hidden = layers.Concatenate(name="mlp_input")(
        [inputs["user"], ad, embedded["placement"], embedded["country"], embedded["device"], embedded["position"],
         interaction])
    for i, width in enumerate(architecture.hidden):
        hidden = layers.Dense(width, activation="relu", name=f"hidden_{i}")(hidden)
    mlp_logit = layers.Dense(1, kernel_initializer=start, name="mlp_logit")(hidden)
    position_bias = layers.Embedding(spec.vocabulary_size("position"), 1, embeddings_initializer="zeros",
                                     name="position_bias")(inputs["position"])
    terms = [mlp_logit, interaction, position_bias]
    if anchored:
        terms.append(prior_logit(spec, inputs["ad_numeric"], inputs["position"], prior_keep_rate))
    logit = layers.Add(name="logit")(terms)
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
