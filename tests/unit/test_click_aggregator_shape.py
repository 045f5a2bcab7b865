"""The click aggregator's Python bill reads rows keyed in the JVM (jobs/jvm/.../ByCampaign.java): both sides
must name the same fields in the same order, or the bill would read one field as another; the keys are campaign
shards, whose count a restore may not change."""
from __future__ import annotations

import re
from pathlib import Path

from jobs import click_aggregator

JAVA = Path(__file__).resolve().parents[2] / "jobs" / "jvm" / "io" / "adserve" / "flink" / "ByCampaign.java"


def test_the_jvm_keyed_row_has_the_python_bill_row_fields_in_order():
    source = JAVA.read_text()
    declared = re.search(r"String\[\] FIELDS = \{(.*?)\};", source, re.S)
    assert declared is not None, "ByCampaign.FIELDS not found"
    assert re.findall(r'"(\w+)"', declared.group(1)) == click_aggregator.ROW_FIELDS


def test_the_jvm_shards_campaigns_by_campaign_id_modulo_the_shard_count():
    source = JAVA.read_text()
    assert re.search(r"return Math\.floorMod\(campaignId, \(long\) shards\);", source), \
        "ByCampaign.shard no longer keys a campaign by its id modulo the shard count"


def test_state_written_with_another_shard_count_fails_the_job_with_what_to_do():
    import pytest

    from core.errors import ShardCountChanged
    from jobs.flink_io import check_shards

    check_shards("click_aggregator", None, 16)  # a fresh shard
    check_shards("click_aggregator", 16, 16)
    with pytest.raises(ShardCountChanged, match=r"written with 16 shards.*runs with 8.*--shards 16"):
        check_shards("click_aggregator", 16, 8)

