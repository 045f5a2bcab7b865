"""What an ad server learns from the platform's own streams: the click model and the ad-feature snapshot the
model registry (serving.model.registry, topic model.registry) names, loaded off the event loop and swapped in
between two requests, without a restart and without a failed request.

`RegistryFollower` is a thread. It reads model.registry from its beginning and follows it; whenever the entry
of a role changes it prepares what the entry names in the thread (a model's checks, its load and the tracing of
its compiled functions; a snapshot file read whole and indexed) and hands a ready `Scoring` to the server's
event loop (`install`), which swaps the engine's predictor and applies the snapshot's learned columns to the
index (the pre-ranker's ctr_prior, the exploration posterior, the learned quality term). A request decided
before the swap finishes on the predictor it started with; the next one uses the new one. Nothing is swapped
half-way: a model directory that fails its checks (serving.model.registry.model_refusal) or does not load is
refused, the server keeps what it has, counts the refusal and says why (log, /ready detail).

Before any model is published the server ranks on priors (PriorPredictor: the index's ctr_prior times the
position effect; ctr_prior itself learned once a feature snapshot exists) and says so: the
`adserve_scoring_on_priors` gauge is 1, /ready's `scoring.on_priors` is true, and the log says it once."""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from confluent_kafka import KafkaError, TopicPartition

from core.errors import AdserveError, CorruptRecord
from schemas import topics
from schemas.codec import AvroCodec
from serving.model import ad_features
from serving.model.registry import CANARY, CURRENT, FEATURES, ModelEntry, Registry, model_refusal
from streams import kafka

LOG = logging.getLogger("adserve.adserver.learned")
REGISTRY_ENTRY = topics.record_type(topics.MODEL_REGISTRY)


@dataclass
class Scoring:
    """What the server scores with: the predictor (None: the priors), the versions behind it, and the feature
    snapshot whose learned columns the index carries."""

    predictor: Any = None
    model_version: str | None = None
    canary_version: str | None = None
    canary_share: float = 0.0
    snapshot: ad_features.AdFeatureSnapshot | None = None
    refusals: list[str] = field(default_factory=list)
    current: Any = None  # the current model's own predictor (the prediction service routes the arms itself)
    candidate: Any = None  # the canary's predictor

    @property
    def on_priors(self) -> bool:
        return self.predictor is None

    def describe(self) -> dict[str, Any]:
        return {"on_priors": self.on_priors, "model_version": self.model_version,
                "canary_version": self.canary_version, "canary_share": self.canary_share,
                "feature_snapshot_version": None if self.snapshot is None else self.snapshot.version,
                "last_refusal": self.refusals[-1] if self.refusals else None}


def empty_snapshot(embedding_dim: int) -> ad_features.AdFeatureSnapshot:
    """A snapshot that knows no ad (a model published before the first feature snapshot scores every ad as
    unknown: the model's own out-of-snapshot row)."""
    zeros = np.zeros(0)
    return ad_features.AdFeatureSnapshot(0, zeros.astype(np.int64), zeros.astype(np.int64), zeros.astype(np.int8),
                                         zeros.astype(np.int64), zeros.astype(np.float32), zeros.astype(np.float32),
                                         zeros.astype(np.int32), np.zeros((0, embedding_dim), np.float32))


class ModelLoader:
    """Loads and checks models and snapshots (the slow part, on the follower's thread). Injected into the
    follower so unit tests can count loads without TensorFlow."""

    def model(self, entry: ModelEntry, snapshot: ad_features.AdFeatureSnapshot | None):
        from serving.model.click_model import ClickModel
        from serving.model.predictor import ModelPredictor

        refusal = model_refusal(entry.directory)
        if refusal is not None:
            raise AdserveError(refusal)
        model = ClickModel.load(Path(entry.directory))
        if model.version != entry.version:
            raise AdserveError(f"{entry.directory} holds {model.version}, the registry names {entry.version}")
        return ModelPredictor(model, snapshot if snapshot is not None else empty_snapshot(model.spec.ad_embedding_dim))

    def snapshot(self, version: int, directory: str) -> ad_features.AdFeatureSnapshot:
        return ad_features.load(Path(directory), version)

    def canary(self, current, candidate, share: float):
        from serving.model.canary import CanaryPredictor

        if current is None:
            from serving.decision.prediction import PriorPredictor
            current = PriorPredictor()
        return CanaryPredictor(current, candidate, share)


class RegistryFollower(threading.Thread):
    """Follows model.registry; `install(scoring)` is called (from this thread: the server schedules it onto its
    loop) each time what the server should score with changed and is ready."""

    def __init__(self, bootstrap: str, install: Callable[[Scoring], None], *, loader: ModelLoader | None = None,
                 poll_s: float = 0.5, models: bool = True, topic: str = topics.MODEL_REGISTRY):
        """models=False: follow the feature snapshot only (the models are the prediction service's)."""
        super().__init__(name="adserve-registry-follower", daemon=True)
        self.bootstrap, self.install, self.poll_s, self.models = bootstrap, install, poll_s, models
        self.topic = topic
        self.loader = loader or ModelLoader()
        self.registry = Registry()
        self.scoring = Scoring()
        self.loaded = threading.Event()  # the topic was read to its end once and what it names was installed
        self._halt = threading.Event()
        self._models: dict[str, Any] = {}  # version -> predictor, for the current and the canary
        self._current: Any = None  # the current model's predictor (None: the priors)
        self._installed_current: Any = None
        self._refused: dict[tuple[str, str], str] = {}  # (version, directory) -> why, never retried
        self._said_priors = False
        self.error: Exception | None = None

    def stop(self) -> None:
        self._halt.set()

    def run(self) -> None:
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - reported through the log; the server keeps what it has
            self.error = e
            LOG.exception("registry follower stopped")

    def _run(self) -> None:
        codec = AvroCodec()
        consumer = kafka.consumer(self.bootstrap, group_id=f"adserve-registry-{time.monotonic_ns()}",
                                  **{"enable.partition.eof": True})
        try:
            metadata = consumer.list_topics(timeout=10)
            if self.topic not in metadata.topics:
                LOG.warning("topic %s does not exist: ranking on priors", self.topic)
                self.loaded.set()
                return
            consumer.assign([TopicPartition(self.topic, p, 0) for p in metadata.topics[self.topic].partitions])
            changed = False
            while not self._halt.is_set():
                msg = consumer.poll(self.poll_s)
                if msg is None:
                    continue
                if msg.error():
                    if msg.error().code() == KafkaError._PARTITION_EOF:
                        if changed or not self.loaded.is_set():
                            self.refresh()
                            changed = False
                        self.loaded.set()
                    continue
                try:
                    self.registry.apply(codec.decode(msg.value(), REGISTRY_ENTRY, topic=msg.topic(),
                                                     partition=msg.partition(), offset=msg.offset()))
                    changed = True
                except (CorruptRecord, AdserveError) as exc:
                    LOG.warning("registry record refused: %s", exc)
        finally:
            consumer.close()

    def refresh(self) -> None:
        """Prepare what the registry names now and install it when anything changed. A model or snapshot that
        fails is refused: the previous one stays, and the refusal is kept for /ready."""
        before = self.scoring
        snapshot, predictor, canary_version, share, candidate = before.snapshot, None, None, 0.0, None
        refusals = list(before.refusals[-4:])
        features = self.registry.features
        if features is not None and (snapshot is None or snapshot.version != features.version):
            try:
                snapshot = self.loader.snapshot(features.version, features.directory)
                LOG.info("ad-feature snapshot v%d loaded (%d ads)", snapshot.version, len(snapshot))
            except Exception as exc:  # noqa: BLE001 - refused, the previous snapshot stays
                refusals.append(f"feature snapshot v{features.version}: {exc}")
                LOG.warning("feature snapshot v%s refused, keeping v%s: %s", features.version,
                            None if snapshot is None else snapshot.version, exc)
        current, model_version = self._current, before.model_version
        if self.registry.current is None or not self.models:
            current, model_version = None, None
        else:
            loaded = self._model(self.registry.current, snapshot, refusals, keep=before.model_version)
            if loaded is not None:  # else refused: the model held before stays
                current, model_version = loaded, self.registry.current.version
        self._current = current
        predictor = current
        if self.registry.canary is not None and self.models:
            candidate = self._model(self.registry.canary, snapshot, refusals, keep=None)
            if candidate is not None:
                canary_version, share = self.registry.canary.version, self.registry.canary.share
                predictor = self.loader.canary(current, candidate, share)
        self._models = {v: m for v, m in self._models.items() if v in (model_version, canary_version)}
        if canary_version == before.canary_version and model_version == before.model_version \
                and current is self._installed_current:
            predictor = before.predictor  # the same arms: keep the installed wrapper
        scoring = Scoring(predictor, model_version, canary_version, share, snapshot, refusals, current, candidate)
        if scoring.on_priors and self.models and not self._said_priors:
            self._said_priors = True
            LOG.warning("no model in the registry: ranking on priors until one is published (registry: %s)",
                        self.registry.describe())
        elif not scoring.on_priors:
            self._said_priors = False
        if scoring.describe() != before.describe() or predictor is not before.predictor:
            self.scoring, self._installed_current = scoring, current
            self.install(scoring)

    def _model(self, entry: ModelEntry | None, snapshot, refusals: list[str], keep: str | None):
        """The predictor of a registry entry over `snapshot` (loaded once per version; an already loaded one
        moves to the new snapshot), or None when the entry is empty or refused."""
        if entry is None:
            return None
        held = self._models.get(entry.version)
        if (entry.version, entry.directory) in self._refused:
            return None
        if held is not None:
            if snapshot is not None and getattr(held, "snapshot_version", None) != snapshot.version:
                held.use_snapshot(snapshot)
            return held
        try:
            predictor = self.loader.model(entry, snapshot)
        except Exception as exc:  # noqa: BLE001 - refused: the server keeps what it has and says why
            reason = f"model {entry.version}: {exc}"
            refusals.append(reason)
            self._refused[(entry.version, entry.directory)] = reason
            LOG.warning("registry names %s, refused (keeping %s): %s", entry.version, keep or "the priors", exc)
            return None
        self._models[entry.version] = predictor
        LOG.info("model %s loaded from %s", entry.version, entry.directory)
        return predictor
