"""The canary's routing: a candidate click model on a small share of requests (design: "a canary on 1 % of
traffic checks calibration and revenue per request before the rollout continues").

A request goes to the candidate when a hash of its request id is below the share (`routes_to_candidate`).
Deterministic, so the same request always lands on the same arm, and the served log's model_version tells
which arm scored it. The hash is personalised ("canary"), so the canary slice is independent of the other
request-id hashes (the trainer's train / validation split). CanaryPredictor applies the rule in process; the
prediction service (serving.model.service) applies the same function. Whether the candidate may replace the
current model is decided offline (learning.canary); `promotion_refusal` is the service's check that a
report allows the promotion asked for. Never reads files or the clock."""
from __future__ import annotations

import hashlib
from typing import Any, Callable

import numpy as np

from core.errors import InvalidArgument
from serving.decision.prediction import PredictionRequest, Predictions, Predictor

CANARY_HASH_PERSON = b"adserve-canary"
# The promotion check's verdicts (learning.canary gives them; the prediction service promotes only on PROMOTE).
PROMOTE, HOLD, NOT_ENOUGH_DATA = "promote", "hold", "not enough data"


def canary_hash(request_id: str) -> float:
    """A request id's place in [0, 1) for canary routing."""
    digest = hashlib.blake2b(request_id.encode(), digest_size=8, person=CANARY_HASH_PERSON).digest()
    return int.from_bytes(digest, "big") / 2**64


def routes_to_candidate(request_id: str, share: float) -> bool:
    """Whether the candidate model scores this request (share 0.01: about one request in a hundred)."""
    return share > 0 and canary_hash(request_id) < share


def routing_key(request: PredictionRequest) -> str:
    """What a PredictionRequest is routed (and identified) by: its request id when it carries one, else a
    digest of what it asks (placement, country, device, user features, candidates), which is as
    deterministic: the same request always lands on the same arm."""
    request_id = getattr(request, "request_id", None)
    if request_id:
        return str(request_id)
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{request.placement}\x00{request.country}\x00{request.device}\x00".encode())
    digest.update(repr(sorted(request.user_features.items())).encode())
    if request.ad_ids is not None:
        digest.update(np.asarray(request.ad_ids, dtype=np.int64).tobytes())
    digest.update(repr(list(request.positions)).encode())
    return digest.hexdigest()


class CanaryPredictor:
    """The Predictor protocol over two models: the candidate scores the requests the routing rule gives it,
    the current model the rest. Errors and timeouts are the arm's own (the engine falls back either way)."""

    def __init__(self, current: Predictor, candidate: Predictor, share: float):
        if not 0 <= share <= 1:
            raise InvalidArgument(f"canary share must be in [0, 1], got {share}")
        self.current, self.candidate, self.share = current, candidate, share

    def arm(self, request: PredictionRequest) -> Predictor:
        return self.candidate if routes_to_candidate(routing_key(request), self.share) else self.current

    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        return self.arm(request).predict(request, deadline, clock)

    def affinity(self, request: PredictionRequest) -> np.ndarray | None:
        """The pre-ranker's model feature from the arm that will score the request (ModelPredictor.affinity)."""
        affinity = getattr(self.arm(request), "affinity", None)
        return None if affinity is None else affinity(request)


def promotion_refusal(report: Any, asked: str, candidate: str | None, current: str) -> str | None:
    """Why a promotion of `asked` must be refused where `candidate` is the canary and `current` the current
    model, given a canary report (canary_report's dict); None when the report allows it: its verdict is
    promote, for exactly this candidate against exactly this current model."""
    if candidate is None:
        return "no canary model is loaded"
    if asked != candidate:
        return f"the canary is {candidate}, not {asked}"
    verdict = report.get("verdict") if isinstance(report, dict) else None
    if verdict != PROMOTE:
        return f"the canary report's verdict is {verdict!r}, not {PROMOTE!r}"
    for arm, name in (("candidate", candidate), ("current", current)):
        if report.get(arm) != name:
            return f"the report judges {arm} {report.get(arm)!r}, but the {arm} model here is {name}"
    return None
