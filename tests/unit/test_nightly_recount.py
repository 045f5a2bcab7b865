"""The Beam recount on beam.Create: the same totals as core.clicks.recount, and the comparison with streaming."""
from __future__ import annotations

import apache_beam as beam
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from core import clicks
from pipelines.nightly_recount import RecountBill, differences
from schemas import topics
from tests.unit.test_clicks import DOLLAR, T0, _campaign, _event


def _day_of_events() -> tuple[list[dict], list[dict]]:
    events = [_event("dup-a", "imp-1", "CLICK", T0 + 1_000), _event("dup-b", "imp-1", "CLICK", T0 + 1_500),
              _event("bot", "imp-2", "CLICK", T0 + 2_000, agent="AhrefsBot/7.0"),
              _event("fast", "imp-3", "CLICK", T0 + 3_000, served_ms=T0 + 2_500),
              _event("cpm", "imp-4", "IMPRESSION", T0 + 4_000, campaign=2, billing="IMPRESSION", price=DOLLAR // 2)]
    events += [_event(f"burst-{i}", f"imp-b{i}", "CLICK", T0 + 30_000 + i, ip="10.9.9.9") for i in range(7)]
    events += [_event(f"user-{i}", f"imp-u{i}", "CLICK", T0 + 40_000, ip=f"10.8.0.{i}", user="u1") for i in range(6)]
    events += [_event(f"over-{i}", f"imp-o{i}", "CLICK", T0 + 50_000 + i * 10_000, ip=f"10.7.0.{i}")
               for i in range(40)]
    return events, [_campaign(1, 30 * DOLLAR), _campaign(2, 10 * DOLLAR)]


def test_the_beam_recount_gives_the_same_bill_as_the_rule_in_one_process():
    events, campaigns = _day_of_events()
    expected = sorted(clicks.recount(events, campaigns).items())
    assert expected[0][1]["invalid_credit_micros"] > 0 and expected[0][1]["absorbed_overspend_micros"] > 0
    with TestPipeline() as p:
        versions = p | "Versions" >> beam.Create([(c["campaign_id"], [c]) for c in campaigns])
        got = (p | beam.Create(events) | RecountBill(versions)
               | beam.MapTuple(lambda key, r: (key, {k: v for k, v in r.items() if k != "budget_class"})))
        assert_that(got, equal_to(expected))


def test_absorbed_overspend_is_reported_by_budget_size():
    from pipelines.nightly_recount import absorbed_by_budget_size

    totals = {"1": {"budget_class": "small", "billed_spend_micros": 20 * DOLLAR,
                    "absorbed_overspend_micros": 2 * DOLLAR},
              "2": {"budget_class": "small", "billed_spend_micros": 5 * DOLLAR, "absorbed_overspend_micros": 0},
              "3": {"budget_class": "large", "billed_spend_micros": 10_000 * DOLLAR, "absorbed_overspend_micros": 7}}
    report = absorbed_by_budget_size(totals)
    assert report["small"] == {"campaigns": 2, "billed_micros": 25 * DOLLAR, "absorbed_micros": 2 * DOLLAR}
    assert report["medium"]["campaigns"] == 0 and report["large"]["absorbed_micros"] == 7


def test_differences_name_each_field_that_disagrees_and_nothing_on_a_clean_day():
    events, campaigns = _day_of_events()
    recount = clicks.recount(events, campaigns)
    assert differences("2026-01-05", dict(recount), recount) == []
    streaming = {k: dict(v) for k, v in recount.items()}
    streaming[(1, "2026-01-05")]["billed_clicks"] += 1
    del streaming[(2, "2026-01-05")]
    found = differences("2026-01-05", streaming, recount)
    assert {(d["campaign_id"], d["field"]) for d in found if d["campaign_id"] == 1} == {(1, "billed_clicks")}
    assert {d["field"] for d in found if d["campaign_id"] == 2} == {"billed_spend_micros", "billed_impressions"}


def test_archived_envelopes_unwrap_to_their_records_and_a_corrupt_value_is_named():
    import pytest

    from core.errors import CorruptRecord
    from pipelines.avro_files import unwrap
    from schemas.codec import AvroCodec

    codec = AvroCodec()
    event = _event("e1", "imp-1", "CLICK", T0)
    event.update(ad_id=5, token_key_id="k1")
    envelope = {"topic": topics.AD_EVENTS, "partition": 0, "offset": 7, "event_time": T0, "k": b"1",
                "v": codec.encode(topics.record_type(topics.AD_EVENTS), event)}
    assert unwrap(envelope, codec)["impression_id"] == "imp-1"
    assert unwrap({"campaign_id": 1, "event_time": T0})["campaign_id"] == 1  # a plain record passes through
    with pytest.raises(CorruptRecord) as error:
        unwrap(dict(envelope, v=b"\xc3\x01 garbage"), codec)
    assert topics.AD_EVENTS in str(error.value) and "7" in str(error.value)
