"""The click aggregator's bill and the budget job's pacer read rows keyed in the JVM by campaign shard
(jobs/jvm/.../ByCampaign.java); a shard's count may not change under its state."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import ShardCountChanged
from jobs.click_aggregator import functions as click_aggregator
from jobs.budget_pacing import functions as budget_pacing
from jobs.common.shards import check_shards

JAVA = Path(__file__).resolve().parents[2] / "jobs" / "jvm" / "io" / "adserve" / "flink" / "ByCampaign.java"


def test_the_jvm_shards_campaigns_by_campaign_id_modulo_the_shard_count():
    source = JAVA.read_text()
    assert re.search(r"return Math\.floorMod\(campaignId, \(long\) shards\);", source), \
        "ByCampaign.shard no longer keys a campaign by its id modulo the shard count"


@pytest.mark.parametrize("job", [click_aggregator, budget_pacing])
def test_the_keyed_rows_carry_a_campaign_id_for_the_jvm_to_shard_by(job):
    assert "campaign_id" in job.ROW_FIELDS
    assert job.SHARDS >= 1


def test_state_written_with_another_shard_count_fails_the_job_with_what_to_do():
    check_shards("click_aggregator", None, 16)  # a fresh shard
    check_shards("click_aggregator", 16, 16)
    with pytest.raises(ShardCountChanged, match=r"written with 16 shards.*runs with 8.*--shards 16"):
        check_shards("click_aggregator", 16, 8)
