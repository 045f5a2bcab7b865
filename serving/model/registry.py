"""The model registry: which click model scores traffic, which one is on canary, and the newest complete
ad-feature snapshot, as three entries on the compacted topic model.registry (schemas/registry_entry.avsc,
keyed by role).

Models are stored as they are trained (`models/click-vN/`, a local folder or a mounted object-store path);
the registry only names them. Every ad server and prediction service reads the topic from its beginning (it is
compacted: the latest entry per role is the state) and follows it, so publishing an entry is how a model is
rolled out, canaried, promoted or rolled back, and how a new feature snapshot reaches the fleet.

`Registry` is the state (pure: `apply` an entry). `model_refusal` is the check a model directory must pass
before anyone publishes or loads it: complete files, readable metadata and calibration, validation metrics
present. A server that finds a published model failing it keeps the one it has and says why (serving.adserver
.learned). `publish` and `read_registry` are the thin Kafka shells."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from core.errors import InvalidArgument
from schemas import topics
from serving.model.bundle import CALIBRATION_FILE, METADATA_FILE, MODEL_FILE, SPEC_FILE

CURRENT, CANARY, FEATURES = "CURRENT", "CANARY", "FEATURES"
ROLES = (CURRENT, CANARY, FEATURES)
REQUIRED_FILES = (MODEL_FILE, SPEC_FILE, CALIBRATION_FILE, METADATA_FILE)
REGISTRY_ENTRY = topics.record_type(topics.MODEL_REGISTRY)


@dataclass(frozen=True)
class ModelEntry:
    """A model the registry names: its version (click-vN) and directory; `share` is the canary's."""

    version: str
    directory: str
    share: float = 0.0


@dataclass(frozen=True)
class FeatureEntry:
    """The newest complete ad-feature snapshot: its version and the folder holding its file."""

    version: int
    directory: str


@dataclass
class Registry:
    """The registry's state: the latest entry of each role (None: the role is empty)."""

    current: ModelEntry | None = None
    canary: ModelEntry | None = None
    features: FeatureEntry | None = None
    reasons: dict[str, str] = field(default_factory=dict)

    def apply(self, entry: Mapping[str, Any]) -> str:
        """One RegistryEntry record into the state; returns its role."""
        role = str(entry["role"])
        if role not in ROLES:
            raise InvalidArgument(f"role: {role!r} is not one of {', '.join(ROLES)}")
        self.reasons[role] = str(entry.get("reason") or "")
        if role == FEATURES:
            version, directory = entry.get("snapshot_version"), entry.get("snapshot_dir")
            self.features = None if version is None or not directory else FeatureEntry(int(version), str(directory))
            return role
        version, directory = entry.get("model_version"), entry.get("model_dir")
        model = None if not version or not directory else \
            ModelEntry(str(version), str(directory), float(entry.get("canary_share") or 0.0))
        if role == CURRENT:
            self.current = model
        else:
            self.canary = model if model is not None and model.share > 0 else None
        return role

    def describe(self) -> dict[str, Any]:
        return {"current": None if self.current is None else vars(self.current),
                "canary": None if self.canary is None else vars(self.canary),
                "features": None if self.features is None else vars(self.features)}


def model_entry(role: str, version: str | None, directory: str | Path | None, *, share: float = 0.0,
                reason: str = "", now_ms: int | None = None) -> dict[str, Any]:
    """The RegistryEntry record naming a model for CURRENT or CANARY (version None: empty the role)."""
    if role not in (CURRENT, CANARY):
        raise InvalidArgument(f"role: a model entry is CURRENT or CANARY, not {role!r}")
    if role == CANARY and version is not None and not 0 < share <= 1:
        raise InvalidArgument(f"canary_share: must be in (0, 1], got {share}")
    return {"role": role, "event_time": int(time.time() * 1000) if now_ms is None else now_ms,
            "model_version": version, "model_dir": None if directory is None else str(directory),
            "canary_share": float(share) if role == CANARY else 0.0, "snapshot_version": None,
            "snapshot_dir": None, "reason": reason}


def features_entry(version: int, directory: str | Path, *, reason: str = "",
                   now_ms: int | None = None) -> dict[str, Any]:
    """The RegistryEntry record naming the newest complete ad-feature snapshot."""
    return {"role": FEATURES, "event_time": int(time.time() * 1000) if now_ms is None else now_ms,
            "model_version": None, "model_dir": None, "canary_share": 0.0, "snapshot_version": int(version),
            "snapshot_dir": str(directory), "reason": reason}


def model_refusal(directory: str | Path) -> str | None:
    """Why this model directory must not be published or loaded; None when it passes: the bundle's files are
    all there, metadata.json and calibration.json are readable JSON objects, the metadata names the directory's
    version and holds finite validation metrics. Reads a few small files; loading the network is the loader's."""
    folder = Path(directory)
    if not folder.is_dir():
        return f"{folder} is not a directory"
    missing = [name for name in REQUIRED_FILES if not (folder / name).exists()]
    if missing:
        return f"{folder} is incomplete: missing {', '.join(missing)}"
    try:
        metadata = json.loads((folder / METADATA_FILE).read_text())
        calibration = json.loads((folder / CALIBRATION_FILE).read_text())
    except (OSError, ValueError) as exc:
        return f"{folder}: unreadable metadata or calibration ({exc})"
    if not isinstance(metadata, dict) or not isinstance(calibration, (dict, list)):
        return f"{folder}: metadata.json or calibration.json is not a JSON object"
    version = metadata.get("model_version")
    if version != folder.name:
        return f"{folder}: metadata names version {version!r}, not the directory's {folder.name!r}"
    metrics = (metadata.get("validation_metrics") or {}).get("model") or {}
    ne = metrics.get("ne")
    if not isinstance(ne, (int, float)) or not math.isfinite(ne):
        return f"{folder}: no finite validation NE in metadata.json (training did not finish its evaluation)"
    return None


def publish(bootstrap: str, entry: Mapping[str, Any], timeout_s: float = 15.0,
            topic: str = topics.MODEL_REGISTRY) -> None:
    """Produce one RegistryEntry (keyed by its role) and wait for the broker's acknowledgement."""
    from schemas.codec import AvroCodec
    from streams import kafka

    producer = kafka.producer(bootstrap)
    failures: list[str] = []
    producer.produce(topic, key=str(entry["role"]).encode(),
                     value=AvroCodec().encode(REGISTRY_ENTRY, dict(entry)), timestamp=int(entry["event_time"]),
                     on_delivery=lambda err, msg: failures.append(str(err)) if err else None)
    if producer.flush(timeout_s) or failures:
        raise InvalidArgument(f"registry entry {entry['role']} not acknowledged: {failures or 'timed out'}")


def read_registry(bootstrap: str, timeout_s: float = 10.0, topic: str = topics.MODEL_REGISTRY) -> Registry:
    """The registry's state: the topic read from its beginning to its end."""
    from confluent_kafka import KafkaError, TopicPartition

    from schemas.codec import AvroCodec
    from streams import kafka

    registry, codec = Registry(), AvroCodec()
    consumer = kafka.consumer(bootstrap, group_id=f"adserve-registry-read-{time.monotonic_ns()}",
                              **{"enable.partition.eof": True})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                continue
            registry.apply(codec.decode(msg.value(), REGISTRY_ENTRY))
    finally:
        consumer.close()
    return registry
