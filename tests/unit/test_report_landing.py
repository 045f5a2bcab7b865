"""serving/report_landing without servers: its settings, and one batch through `ReportLanding.step` on a fake
consumer: billed records reduced to one row per bucket, a conversion on its campaign's budget day, a record that
does not decode sent to the dead letters, and every offset (the bad record's too) written with the batch."""
from __future__ import annotations

import pytest

from core.errors import InvalidSettings
from serving.report_landing import main as landing_main
from serving.report_landing.main import ReportLanding, parse_settings
from schemas import topics
from schemas.codec import AvroCodec
from tests import billed_feed as feed


def test_the_settings_need_a_campaign_store_and_print_without_its_password():
    with pytest.raises(InvalidSettings):
        parse_settings([], environ={})
    settings = parse_settings([], environ={"ADSERVE_POSTGRES_DSN": "postgresql://adserve:s3cret@db:5432/adserve"})
    assert "s3cret" not in settings.describe() and settings.billed_topic == topics.BILLED_SPEND


class Message:
    def __init__(self, topic: str, partition: int, offset: int, value: bytes, timestamp_ms: int):
        self._topic, self._partition, self._offset, self._value, self._ts = topic, partition, offset, value, timestamp_ms

    def error(self):
        return None

    def topic(self):
        return self._topic

    def partition(self):
        return self._partition

    def offset(self):
        return self._offset

    def value(self):
        return self._value

    def key(self):
        return b"k"

    def timestamp(self):
        return 1, self._ts


class Consumer:
    def __init__(self, messages):
        self.messages = messages

    def consume(self, limit, timeout):
        out, self.messages = self.messages[:limit], self.messages[limit:]
        return out


class Producer:
    def __init__(self):
        self.sent = []

    def produce(self, topic, key, value, timestamp):
        self.sent.append((topic, value))

    def flush(self, timeout):
        return 0


def test_a_batch_lands_reduced_with_its_offsets_and_a_bad_record_becomes_a_dead_letter(monkeypatch):
    codec, settings = AvroCodec(), parse_settings(["--postgres-dsn", "host=db"], environ={})
    billed = [dict(campaign_id=5, event_time=feed.T0 + s * 10_000, budget_day="2026-03-09",
                   billed_spend_micros=100 * s, billed_impressions=0, billed_clicks=s, absorbed_overspend_micros=0,
                   invalid_credit_micros=0, joined_clicks=0) for s in (1, 2, 3)]
    conversion = {"conversion_id": "c1", "impression_id": "i1", "event_time": feed.T0 + 60_000,
                  "served_time": feed.T0, "click_time": feed.T0 + 5_000, "campaign_id": 5, "ad_id": 50,
                  "token_key_id": "k1"}
    billed_type, conversion_type = topics.record_type(topics.BILLED_SPEND), topics.record_type(topics.AD_CONVERSIONS)
    messages = [Message(settings.billed_topic, 0, 10 + i, codec.encode(billed_type, r), r["event_time"])
                for i, r in enumerate(billed)]
    messages += [Message(settings.billed_topic, 1, 7, b"\x00junk", feed.T0),
                 Message(settings.conversions_topic, 2, 40, codec.encode(conversion_type, conversion), feed.T0)]
    written = []
    monkeypatch.setattr(landing_main, "write_batch", lambda conn, group, batch, offsets: written.append(
        (batch, dict(offsets))))
    monkeypatch.setattr(landing_main, "campaign_timezones", lambda conn, ids: {5: "America/New_York"})
    producer = Producer()
    job = ReportLanding(settings, conn=None, consumer=Consumer(messages), producer=producer)
    assert job.step() == 5
    (batch, offsets), = written
    assert offsets == {(settings.billed_topic, 0): 13, (settings.billed_topic, 1): 8,
                       (settings.conversions_topic, 2): 41}
    assert [r["billed_spend_micros"] for r in batch.daily.values()] == [300]
    assert list(batch.hourly) == [(5, "2026-03-09", feed.T0)]
    assert batch.conversions == {"i1": (5, "2026-03-09", feed.T0, feed.T0 + 60_000)}
    (topic, letter), = producer.sent
    assert topic == settings.dead_letter_topic and codec.decode(letter)["source_offset"] == 7
