"""The tracker's feedback beacon over HTTP, with a recording producer: a verified token gives one AdFeedback on
ad.feedback keyed by impression id (nothing on ad.events), a bad token is refused exactly as a click's is, and
a `type` other than hide or report gets a 400 naming `type`."""
from __future__ import annotations

import asyncio
import dataclasses

import pytest
from aiohttp.test_utils import TestClient, TestServer

from core.errors import InvalidField
from core.tokens import TokenClaims, TokenKeys
from schemas import topics
from schemas.codec import AvroCodec
from serving.tracker import Tracker, feedback_type

NOW = 1_800_000_000_000
KEYS = TokenKeys({"k1": b"feedback-test-key-0123"}, active="k1")
CLAIMS = TokenClaims(impression_id="req-9:2", ad_id=71, campaign_id=7, price_micros=1_500_000, billing="IMPRESSION",
                     landing_url="https://shop.example/a", expires_ms=NOW + 3_600_000, served_ms=NOW - 4_000)
CODEC = AvroCodec()


def _forged(token: str) -> str:
    return token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")


def _rejected(tracker: Tracker) -> dict[str, float]:
    return {sample.labels["reason"]: sample.value for metric in tracker.rejected.collect()
            for sample in metric.samples if sample.name.endswith("_total")}


def _calls(requests: list[tuple[str, dict[str, str]]]) -> tuple[list[int], list[tuple[str, bytes, bytes]], Tracker]:
    """Each (path, query) answered by a tracker whose clock reads NOW: (statuses, records produced, tracker)."""
    produced: list[tuple[str, bytes, bytes]] = []
    tracker = Tracker(KEYS, lambda topic, key, value: produced.append((topic, key, value)), clock=lambda: NOW / 1000)

    async def scenario() -> list[int]:
        async with TestClient(TestServer(tracker.app())) as client:
            statuses = []
            for path, query in requests:
                async with client.get(path, params=query, allow_redirects=False) as r:
                    await r.read()
                    statuses.append(r.status)
            return statuses
    return asyncio.run(scenario()), produced, tracker


def test_an_accepted_feedback_beacon_produces_one_ad_feedback_keyed_by_impression_and_nothing_billable():
    statuses, produced, tracker = _calls([("/v1/feedback", {"t": KEYS.sign(CLAIMS), "type": "hide"}),
                                          ("/v1/feedback", {"t": KEYS.sign(CLAIMS), "type": "REPORT"})])
    assert statuses == [204, 204]
    assert [(topic, key) for topic, key, _ in produced] == [(topics.AD_FEEDBACK, b"req-9:2")] * 2
    hide, report = (CODEC.decode(value, topics.record_type(topics.AD_FEEDBACK)) for _, _, value in produced)
    assert {k: v for k, v in hide.items() if k != "event_id"} == {
        "impression_id": "req-9:2", "feedback_type": "HIDE", "event_time": NOW, "served_time": NOW - 4_000,
        "campaign_id": 7, "ad_id": 71, "user_id": None, "token_key_id": "k1"}
    assert report["feedback_type"] == "REPORT" and report["event_id"] != hide["event_id"]
    events = {s.labels["type"]: s.value for m in tracker.events.collect() for s in m.samples
              if s.name.endswith("_total")}
    assert events == {"FEEDBACK_HIDE": 1.0, "FEEDBACK_REPORT": 1.0}


@pytest.mark.parametrize("token, status, reason", [
    (_forged(KEYS.sign(CLAIMS)), 403, "bad_signature"),
    (KEYS.sign(dataclasses.replace(CLAIMS, expires_ms=NOW - 1)), 410, "expired"),
    (TokenKeys({"old": b"retired-key-0123456789"}, active="old").sign(CLAIMS), 403, "unknown_key"),
    ("not-a-token", 400, "malformed"),
    ("", 400, "malformed"),
])
def test_a_bad_token_is_refused_on_feedback_exactly_as_on_a_click_and_counted(token, status, reason):
    statuses, produced, tracker = _calls([("/v1/click", {"t": token}),
                                          ("/v1/feedback", {"t": token, "type": "hide"})])
    assert statuses == [status, status]
    assert produced == []
    assert _rejected(tracker) == {reason: 2.0}


def test_a_feedback_type_other_than_hide_or_report_is_a_400_naming_type():
    produced: list = []
    tracker = Tracker(KEYS, lambda *record: produced.append(record), clock=lambda: NOW / 1000)

    async def scenario() -> list[tuple[int, str]]:
        async with TestClient(TestServer(tracker.app())) as client:
            answers = []
            for query in ({"t": KEYS.sign(CLAIMS), "type": "like"}, {"t": KEYS.sign(CLAIMS)}):
                async with client.get("/v1/feedback", params=query) as r:
                    answers.append((r.status, await r.text()))
            return answers

    answers = asyncio.run(scenario())
    assert [status for status, _ in answers] == [400, 400]
    assert all(text.startswith("type: ") for _, text in answers), answers
    assert produced == [] and _rejected(tracker) == {"bad_feedback_type": 2.0}


def test_the_feedback_type_reads_hide_and_report_in_any_case():
    assert (feedback_type("hide"), feedback_type(" Report ")) == ("HIDE", "REPORT")
    with pytest.raises(InvalidField) as e:
        feedback_type("spam")
    assert e.value.field == "type"
