"""RemotePredictor: the prediction service (serving.model.service, POST /v1/score) behind the decision
engine's Predictor protocol: the ad server's side of the call.

The engine calls predict synchronously inside the ad server's request handler, so this is a blocking
HTTP/1.1 keep-alive connection (http.client), one per thread, and before every step (connect and send,
the status line, each read of the body) its socket timeout is set to what is left of the deadline: a call
never outlives its deadline by more than one socket operation's slack, whatever the service does. The
deadline also travels in the body (deadline_ms), so the service drops a request it can no longer answer in
time instead of scoring it.

Any failure raises, so the engine runs the auction on the pre-ranker's scores and marks the decision
scored_by_fallback: PredictionTimeout on a socket timeout, a 504 or an answer that came after the deadline;
PredictionServiceError otherwise (refused or broken connection, another status, a body that does not fit
the request). A keep-alive connection the service closed while idle is replaced once, within the deadline.
Imports no TensorFlow: the ad server does not load the model."""
from __future__ import annotations

import http.client
import json
import threading
from typing import Any, Callable
from urllib.parse import urlsplit

import numpy as np

from core.errors import AdserveError, InvalidSettings
from serving.decision.prediction import PredictionRequest, Predictions, PredictionTimeout
from serving.model.canary import routing_key

SCORE_PATH = "/v1/score"


class PredictionServiceError(AdserveError):
    """The prediction service could not be reached or gave no usable answer; the engine falls back."""


class RemotePredictor:
    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise InvalidSettings(f"prediction service URL must look like http://HOST:PORT, got {url!r}")
        self.url = url.rstrip("/")
        self.host, self.port = parts.hostname, parts.port or 80
        self.path = parts.path.rstrip("/") + SCORE_PATH
        self._local = threading.local()  # this thread's connection

    # ------------------------------------------------------------------ the protocol
    def predict(self, request: PredictionRequest, deadline: float, clock: Callable[[], float]) -> Predictions:
        left_s = deadline - clock()
        if left_s <= 0:
            raise PredictionTimeout("deadline passed before scoring")
        if request.ad_ids is None:
            raise PredictionServiceError("the prediction request carries no ad ids (the service looks ads up by id)")
        ad_ids = np.asarray(request.ad_ids, dtype=np.int64)
        body = json.dumps({
            "request_id": routing_key(request), "placement": request.placement, "country": request.country,
            "device": request.device, "user_features": {k: float(v) for k, v in request.user_features.items()},
            "ad_ids": ad_ids.tolist(),
            "positions": [int(p) for p in request.positions], "deadline_ms": left_s * 1000}).encode()
        status, payload = self._post(body, deadline, clock)
        if status == 504:
            raise PredictionTimeout(f"the prediction service missed the deadline: {_message(payload)}")
        if status != 200:
            raise PredictionServiceError(f"the prediction service at {self.url} answered {status}: "
                                         f"{_message(payload)}")
        predictions = _predictions(payload, len(ad_ids), len(request.positions))
        if clock() > deadline:
            raise PredictionTimeout("the prediction service answered after the deadline")
        return predictions

    def close(self) -> None:
        """Close this thread's connection (the next call opens another)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None

    # ------------------------------------------------------------------ HTTP
    def _post(self, body: bytes, deadline: float, clock: Callable[[], float]) -> tuple[int, bytes]:
        for attempt in (1, 2):
            connection = getattr(self._local, "connection", None)
            reused = connection is not None and connection.sock is not None
            if connection is None:
                connection = self._local.connection = http.client.HTTPConnection(self.host, self.port)
            try:
                return _exchange(connection, self.path, body, deadline, clock)
            except TimeoutError as exc:
                self.close()  # a half-read answer leaves the connection unusable
                raise PredictionTimeout(f"no answer from the prediction service within the deadline ({exc})") from exc
            except (http.client.HTTPException, OSError) as exc:
                self.close()
                if attempt == 1 and reused and clock() < deadline:
                    continue  # the service closed an idle keep-alive connection: once more on a new one
                raise PredictionServiceError(f"the prediction service at {self.url} is unreachable: "
                                             f"{type(exc).__name__}: {exc}") from exc
        raise AssertionError("unreachable")


def _left(deadline: float, clock: Callable[[], float]) -> float:
    left = deadline - clock()
    if left <= 0:
        raise TimeoutError("deadline passed")
    return left


def _exchange(connection: http.client.HTTPConnection, path: str, body: bytes, deadline: float,
              clock: Callable[[], float]) -> tuple[int, bytes]:
    """One POST on the connection, every socket step bounded by what is left of the deadline."""
    connection.timeout = _left(deadline, clock)  # connect() uses it
    if connection.sock is not None:
        connection.sock.settimeout(connection.timeout)
    connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    sock = connection.sock  # kept: http.client lets go of it when the answer says Connection: close
    sock.settimeout(_left(deadline, clock))
    response = connection.getresponse()
    chunks = []
    while True:
        sock.settimeout(_left(deadline, clock))
        chunk = response.read(65_536)
        if not chunk:
            break
        chunks.append(chunk)
    return response.status, b"".join(chunks)


def _message(payload: bytes) -> str:
    try:
        return str(json.loads(payload).get("error", payload[:200]))
    except (ValueError, AttributeError):
        return repr(payload[:200])


def _predictions(payload: bytes, candidates: int, slots: int) -> Predictions:
    """The answer as Predictions, checked against the request's shape."""
    try:
        answer: dict[str, Any] = json.loads(payload)
        pctr = np.asarray(answer["pctr"], dtype=np.float64)
        pcvr = np.asarray(answer["pcvr"], dtype=np.float64)
        version = answer["model_version"]
        snapshot = answer.get("snapshot_version")
    except (ValueError, KeyError, TypeError) as exc:
        raise PredictionServiceError(f"the prediction service's answer is not a score answer: {exc}") from exc
    if pctr.size != candidates * slots or pcvr.shape != (candidates,) or not isinstance(version, str):
        raise PredictionServiceError(f"the prediction service answered pctr of shape {pctr.shape} and pcvr of shape "
                                     f"{pcvr.shape} for {candidates} candidates x {slots} positions")
    return Predictions(pctr.reshape(candidates, slots), pcvr, version, None if snapshot is None else int(snapshot))
