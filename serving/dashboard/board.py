"""What the dashboard holds in memory: each campaign's serving record, latest budget state and row.

`PacingBoard` is plain data plus `apply` (no I/O): the topic follower hands it decoded records of the
campaigns topic and the budget-state topic (names given, so a simulated day's own topics can be followed),
and it rebuilds the row of each campaign a record changed with core.pacing_view.campaign_row. A list request
then reads rows from memory; only a campaign's minute series comes from Redis."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from core.pacing_view import BudgetWord, CampaignInfo, CampaignRow, budget_word, campaign_info, campaign_row
from schemas import topics


@dataclass
class PacingBoard:
    state_topic: str = topics.BUDGET_STATE
    campaigns_topic: str = topics.SERVING_CAMPAIGNS
    campaigns: dict[int, CampaignInfo] = field(default_factory=dict)
    words: dict[int, BudgetWord] = field(default_factory=dict)
    rows: dict[int, CampaignRow] = field(default_factory=dict)
    versions: dict[int, int] = field(default_factory=dict)  # serving record version applied, by campaign
    newest_state_ms: int = 0  # event time of the newest budget state applied (0: none yet)
    newest_event_ms: int = 0  # the newest event time of any record applied: a simulated day's clock
    applied: int = 0

    def apply(self, batch: Iterable[tuple[str, dict[str, Any], int]]) -> None:
        """Apply a follower batch of (topic, record, timestamp_ms); records of other topics are ignored. A serving
        record applies only when its version is newer, a budget state only when its event time is not older than
        the one held (a compacted topic replays its latest record per key, in order per partition)."""
        changed: set[int] = set()
        for topic, record, _timestamp_ms in batch:
            if topic == self.campaigns_topic:
                campaign_id, version = int(record["campaign_id"]), int(record["version"])
                if version > self.versions.get(campaign_id, -1):
                    self.versions[campaign_id] = version
                    self.campaigns[campaign_id] = campaign_info(record)
                    changed.add(campaign_id)
            elif topic == self.state_topic:
                word = budget_word(record)
                held = self.words.get(word.campaign_id)
                if held is None or word.event_time_ms >= held.event_time_ms:
                    self.words[word.campaign_id] = word
                    self.newest_state_ms = max(self.newest_state_ms, word.event_time_ms)
                    changed.add(word.campaign_id)
            else:
                continue
            self.newest_event_ms = max(self.newest_event_ms, int(record.get("event_time") or 0))
            self.applied += 1
        for campaign_id in changed:
            self.rows[campaign_id] = campaign_row(campaign_id, self.campaigns.get(campaign_id),
                                                  self.words.get(campaign_id))

    def committed_and_unbilled_micros(self) -> tuple[int, int]:
        """Today's committed spend over all campaigns, and the part of it billing has not covered yet."""
        committed = sum(word.committed_spend_micros for word in self.words.values())
        billed = sum(min(word.billed_spend_micros, word.committed_spend_micros) for word in self.words.values())
        return committed, committed - billed
