"""Building a PredictionService from saved models (`load_service`) or from what the model registry names
(`service_from_registry`, which keeps following the registry). It loads models; it never serves."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Callable

from core.errors import InvalidSettings
from serving.model.routes import PredictionService, ServiceConfig


def load_service(model_dir: Path, ad_features_dir: Path, *, canary_model_dir: Path | None = None,
                 config: ServiceConfig | None = None) -> PredictionService:
    """The service over saved models and the newest snapshot of the folder (loads TensorFlow)."""
    from serving.model import ad_features
    from serving.model.click_model import ClickModel
    from serving.model.predictor import ModelPredictor

    snapshot = ad_features.load(ad_features_dir)
    current = ModelPredictor(ClickModel.load(model_dir), snapshot)
    candidate = ModelPredictor(ClickModel.load(canary_model_dir), snapshot) if canary_model_dir else None
    config = config or ServiceConfig()
    config.ad_features_dir = ad_features_dir
    return PredictionService(current, candidate, config)


def service_from_registry(bootstrap: str, config: ServiceConfig | None = None, *, wait_s: float = 10 ** 9,
                          log: Callable[[str], None] = print):
    """(the service over the registry's current model and newest feature snapshot, its registry follower): waits
    until the registry names a model that loads (saying so while it waits). The follower keeps swapping the
    service's models afterwards once `follow(service, loop)` is called."""
    from serving.adserver.learned import RegistryFollower

    latest: list = []
    follower = RegistryFollower(bootstrap, latest.append)
    follower.start()
    began, said = time.monotonic(), 0.0
    while not (latest and latest[-1].current is not None):
        if time.monotonic() - began > wait_s:
            follower.stop()
            raise InvalidSettings(f"the model registry named no loadable model within {wait_s:.0f} s")
        if time.monotonic() - said > 30:
            said = time.monotonic()
            log("prediction service: waiting for the model registry to name a model (`adserve model retrain`)")
        time.sleep(0.2)
    scoring = latest[-1]
    service = PredictionService(scoring.current, None, config or ServiceConfig())
    service.install_scoring(scoring)

    def follow(loop: asyncio.AbstractEventLoop) -> None:
        follower.install = lambda update: loop.call_soon_threadsafe(service.install_scoring, update)
        if follower.scoring is not scoring:
            loop.call_soon_threadsafe(service.install_scoring, follower.scoring)
    return service, follow
