"""The Java operators' column constants follow the .avsc contracts they read (schemas/), so a schema change
that would make them read the wrong field fails here, not on a cluster.

The constants come from the classes themselves, printed by the golden driver (jobs/jvm/test)."""
from __future__ import annotations

import re

import pytest

from jobs.jvm import run_golden_driver
from schemas import topics
from schemas.codec import default_registry

SPEND_REPORT = topics.record_type(topics.BUDGET_SPEND)
AD_EVENT = topics.record_type(topics.AD_EVENTS)


@pytest.fixture(scope="module")
def java_fields() -> dict:
    return run_golden_driver(["fields"])[0]


def avsc_fields(record_type: str) -> list[str]:
    return [f["name"] for f in default_registry().schema(record_type)["fields"]]


def in_schema_order(names: list[str], record_type: str) -> bool:
    order = avsc_fields(record_type)
    return all(n in order for n in names) and names == sorted(names, key=order.index)


def test_the_spend_decoder_reads_the_spend_report_fields_in_the_schema_order(java_fields):
    assert java_fields["DecodeSpendReport.FIELDS"] == avsc_fields(SPEND_REPORT)


def test_the_spend_decoder_reads_the_campaign_columns_in_the_schema_order(java_fields):
    (campaigns,) = [f for f in default_registry().schema(SPEND_REPORT)["fields"] if f["name"] == "campaigns"]
    (columns,) = [branch for branch in campaigns["type"] if isinstance(branch, dict)]
    assert java_fields["DecodeSpendReport.COLUMNS"] == [f["name"] for f in columns["fields"]]


def test_the_event_decoder_emits_every_ad_event_field_in_the_schema_order(java_fields):
    columns = re.findall(r"(\w+) [A-Z]+(?:,|>)", java_fields["DecodeAdEvent.output"])
    assert columns[0] == "ok" and columns[-1] == "agent_lower"
    assert columns[1:-1] == avsc_fields(AD_EVENT)


def test_first_seen_input_is_kafka_coordinates_then_ad_event_fields_in_schema_order_then_sql_flags(java_fields):
    names = java_fields["FirstSeen.INPUT_FIELDS"]
    assert names[:6] == ["topic", "partition", "offset", "k", "v", "ok"]
    assert names[-2:] == ["billable", "reason"]
    assert in_schema_order(names[6:-2], AD_EVENT)


def test_first_seen_output_carries_its_input_event_fields_under_the_same_names(java_fields):
    event_fields = java_fields["FirstSeen.INPUT_FIELDS"][6:-2]
    assert set(event_fields) <= set(java_fields["FirstSeen.OUTPUT_FIELDS"])
