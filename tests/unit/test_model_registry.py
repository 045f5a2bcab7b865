"""The model registry's state and checks (serving.model.registry) and the ad server's follower logic
(serving.adserver.learned.RegistryFollower.refresh) with a loader that needs no TensorFlow and no Kafka."""
from __future__ import annotations

import json

import numpy as np
import pytest

from core.errors import AdserveError, InvalidArgument
from serving.adserver.learned import RegistryFollower, Scoring
from serving.model import ad_features
from serving.model.registry import (CANARY, CURRENT, FEATURES, Registry, features_entry, model_entry,
                                    model_refusal)


def snapshot(version: int, ctr: float = 0.02) -> ad_features.AdFeatureSnapshot:
    n = 3
    return ad_features.AdFeatureSnapshot(version, np.arange(1, n + 1, dtype=np.int64), np.ones(n, np.int64),
                                         np.ones(n, np.int8), np.full(n, 1_000_000, np.int64),
                                         np.full(n, ctr, np.float32), np.zeros(n, np.float32),
                                         np.zeros(n, np.int32), np.zeros((n, 4), np.float32))


class FakeModel:
    def __init__(self, version: str, snap):
        self.version, self.snapshot_version = version, None if snap is None else snap.version

    def use_snapshot(self, snap):
        self.snapshot_version = snap.version


class FakeLoader:
    def __init__(self, refuse: set[str] = frozenset()):
        self.refuse, self.loads, self.snapshots = set(refuse), [], []

    def model(self, entry, snap):
        self.loads.append(entry.version)
        if entry.version in self.refuse:
            raise AdserveError(f"{entry.directory} is incomplete: missing model.keras")
        return FakeModel(entry.version, snap)

    def snapshot(self, version, directory):
        self.snapshots.append(version)
        return snapshot(version)

    def canary(self, current, candidate, share):
        return ("canary", current, candidate, share)


def follower(loader):
    installed: list[Scoring] = []
    f = RegistryFollower("unused:9092", installed.append, loader=loader)
    return f, installed


def test_registry_state_keeps_the_latest_entry_per_role():
    registry = Registry()
    registry.apply(model_entry(CURRENT, "click-v1", "/m/click-v1", now_ms=1))
    registry.apply(model_entry(CANARY, "click-v2", "/m/click-v2", share=0.05, now_ms=2))
    registry.apply(features_entry(300_000, "/f", now_ms=3))
    registry.apply(model_entry(CURRENT, "click-v2", "/m/click-v2", now_ms=4))
    registry.apply(model_entry(CANARY, None, None, now_ms=5))
    assert registry.current.version == "click-v2" and registry.canary is None
    assert registry.features.version == 300_000
    with pytest.raises(InvalidArgument, match="canary_share"):
        model_entry(CANARY, "click-v3", "/m/click-v3", share=0.0)


def test_an_incomplete_or_unevaluated_model_directory_is_refused(tmp_path):
    folder = tmp_path / "click-v3"
    folder.mkdir()
    assert "missing" in model_refusal(folder)
    for name in ("model.keras", "feature_spec.json", "calibration.json"):
        (folder / name).write_text("{}")
    (folder / "metadata.json").write_text(json.dumps({"model_version": "click-v3", "validation_metrics": {}}))
    assert "validation NE" in model_refusal(folder)
    (folder / "metadata.json").write_text(json.dumps({"model_version": "click-v9",
                                                      "validation_metrics": {"model": {"ne": 0.9}}}))
    assert "click-v9" in model_refusal(folder)
    (folder / "metadata.json").write_text(json.dumps({"model_version": "click-v3",
                                                      "validation_metrics": {"model": {"ne": 0.9}}}))
    assert model_refusal(folder) is None


def test_the_follower_installs_snapshot_then_model_and_swaps_without_reloading():
    loader = FakeLoader()
    f, installed = follower(loader)
    f.refresh()
    assert installed == []  # nothing published: the priors, as the server started
    f.registry.apply(features_entry(300_000, "/f"))
    f.refresh()
    assert installed[-1].on_priors and installed[-1].snapshot.version == 300_000
    f.registry.apply(model_entry(CURRENT, "click-v1", "/m/click-v1"))
    f.refresh()
    assert not installed[-1].on_priors and installed[-1].model_version == "click-v1"
    assert installed[-1].predictor.snapshot_version == 300_000
    f.registry.apply(features_entry(600_000, "/f"))
    f.refresh()
    assert loader.loads == ["click-v1"]  # the held model moved to the new snapshot, not reloaded
    assert installed[-1].predictor.snapshot_version == 600_000 and installed[-1].snapshot.version == 600_000


def test_a_refused_model_leaves_the_current_one_serving_and_says_why():
    loader = FakeLoader(refuse={"click-v2"})
    f, installed = follower(loader)
    f.registry.apply(model_entry(CURRENT, "click-v1", "/m/click-v1"))
    f.refresh()
    f.registry.apply(model_entry(CURRENT, "click-v2", "/m/click-v2"))
    f.refresh()
    assert installed[-1].model_version == "click-v1"
    assert "click-v2" in installed[-1].describe()["last_refusal"] and "missing" in installed[-1].describe()["last_refusal"]
    f.refresh()
    assert loader.loads == ["click-v1", "click-v2"]  # a refused version is not retried


def test_a_canary_wraps_the_current_model_and_its_promotion_unwraps_it():
    loader = FakeLoader()
    f, installed = follower(loader)
    f.registry.apply(model_entry(CANARY, "click-v1", "/m/click-v1", share=0.1))
    f.refresh()
    kind, current, candidate, share = installed[-1].predictor
    assert kind == "canary" and current is None and candidate.version == "click-v1" and share == 0.1
    assert installed[-1].model_version is None and installed[-1].canary_version == "click-v1"
    f.registry.apply(model_entry(CURRENT, "click-v1", "/m/click-v1"))
    f.registry.apply(model_entry(CANARY, None, None))
    f.refresh()
    assert installed[-1].predictor is candidate and installed[-1].canary_version is None
    assert loader.loads == ["click-v1"]


def test_a_features_only_follower_never_loads_a_model():
    loader = FakeLoader()
    installed: list[Scoring] = []
    f = RegistryFollower("unused:9092", installed.append, loader=loader, models=False)
    f.registry.apply(model_entry(CURRENT, "click-v1", "/m/click-v1"))
    f.registry.apply(features_entry(300_000, "/f"))
    f.refresh()
    assert loader.loads == [] and installed[-1].snapshot.version == 300_000


def test_the_prediction_service_takes_the_registrys_current_model_and_canary():
    from types import SimpleNamespace

    from serving.model.service import PredictionService

    def model(version):
        return SimpleNamespace(model=SimpleNamespace(version=version))

    first, second, third = model("click-v1"), model("click-v2"), model("click-v3")
    service = PredictionService(first)  # not started: no batcher thread, no port
    service.install_scoring(Scoring(current=second, candidate=third, canary_share=0.1,
                                    model_version="click-v2", canary_version="click-v3"))
    assert service.current is second and service.candidate is third and service.config.canary_share == 0.1
    service.install_scoring(Scoring(current=third, model_version="click-v3"))  # promoted
    assert service.current is third and service.candidate is None and service.config.canary_share == 0.0
    service.install_scoring(Scoring())  # a registry without a model leaves the one the service holds
    assert service.current is third
