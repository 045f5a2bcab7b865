"""The body of POST /v1/score (serving/model/openapi.yaml) read into a ScoreRequest: every field checked, the
first wrong one named in a BadRequest. It never scores and never touches the network."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from core.errors import BadRequest
from serving.decision.prediction import PredictionRequest

MAX_CANDIDATES = 10_000
MAX_POSITIONS = 64
AD_ID_RANGE = (-2**63, 2**63 - 1)  # the model looks ads up by id in an int64 column
POSITION_RANGE = (1, 2**31 - 1)  # slot positions, as the ad server and the served log bound them


@dataclass
class ScoreRequest:
    request_id: str
    prediction: PredictionRequest
    deadline_ms: float

    @property
    def rows(self) -> int:
        """Input rows it costs the model: candidates x positions."""
        return len(self.prediction.ad_ids) * len(self.prediction.positions)


def _text(body: dict, name: str, *, required: bool) -> str | None:
    value = body.get(name)
    if value is None:
        if required:
            raise BadRequest(name, "required (a string)")
        return None
    if not isinstance(value, str):
        raise BadRequest(name, f"must be a string, got {type(value).__name__}")
    return value


def _integers(body: dict, name: str, limit: int, bounds: tuple[int, int]) -> list[int]:
    values = body.get(name)
    if not isinstance(values, list):
        raise BadRequest(name, "required (a list of integers)")
    if len(values) > limit:
        raise BadRequest(name, f"at most {limit:,} entries, got {len(values):,}")
    least, most = bounds
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, int) or not least <= v <= most:
            raise BadRequest(f"{name}[{i}]", f"must be an integer from {least} to {most}, got {v!r}")
    return values


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (a bool, a string, an integer beyond a double)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if np.isfinite(number) else None


def parse_score_request(body: Any) -> ScoreRequest:
    """The body of POST /v1/score as a ScoreRequest, or BadRequest naming the first wrong field."""
    if not isinstance(body, dict):
        raise BadRequest("body", "must be a JSON object")
    request_id = _text(body, "request_id", required=True)
    placement = _text(body, "placement", required=True)
    country, device = _text(body, "country", required=False), _text(body, "device", required=False)
    features = body.get("user_features") or {}
    if not isinstance(features, dict):
        raise BadRequest("user_features", "must be an object of feature name -> number")
    values = {name: _finite(value) for name, value in features.items()}
    for name, value in values.items():
        if value is None:
            raise BadRequest(f"user_features.{name}", f"must be a finite number, got {features[name]!r}")
    ad_ids = _integers(body, "ad_ids", MAX_CANDIDATES, AD_ID_RANGE)
    positions = _integers(body, "positions", MAX_POSITIONS, POSITION_RANGE)
    if not positions:
        raise BadRequest("positions", "at least one slot position")
    deadline_ms = _finite(body.get("deadline_ms"))
    if deadline_ms is None or deadline_ms <= 0:
        raise BadRequest("deadline_ms", f"required: the caller's remaining budget in ms (> 0), got "
                                        f"{body.get('deadline_ms')!r}")
    n = len(ad_ids)
    prediction = PredictionRequest(
        rows=np.arange(n), ctr_prior=np.zeros(n), positions=positions, placement=placement,  # the index's rows
        user_features=values, ad_ids=np.asarray(ad_ids, dtype=np.int64),
        country=country, device=device)  # and priors are the ad server's; the model looks ads up by id
    return ScoreRequest(request_id, prediction, deadline_ms)
