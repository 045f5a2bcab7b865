"""What the jobs count for monitoring (Prometheus, through Flink's metrics), pure:

* `calibration_counts`: a click example's share of its calibration segment's predicted and observed clicks
  (training_join), the two sides of "predicted over observed click rate per placement, country and bid type".
* `LimitedCampaigns`: how many campaigns have been limited by bid or by audience (core.pacing.delivery_limit)
  without a break for at least an hour of event time (budget_pacing).

Both give counts per segment or in total, never per campaign: a campaign id never becomes a metric label."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

MICROS = 1_000_000


class CalibrationCounts(NamedTuple):
    segment: tuple[str, str, str]  # placement, country ("" when unknown), billing type
    predicted_clicks_micros: int  # sample weight x logged pCTR, in millionths of a click
    clicks: int  # sample weight x label: the clicks this example stands for


def calibration_counts(example: dict[str, Any]) -> CalibrationCounts | None:
    """A TrainingExample's contribution to its segment's calibration, or None for a conversion example. The
    sample weight undoes the down-sampling of non-clicks, so the sums estimate every rendered impression's."""
    if example.get("task", "CLICK") != "CLICK":
        return None
    weight = float(example["sample_weight"])
    segment = (str(example["placement"]), str(example.get("country") or ""), str(example["billing_type"]))
    return CalibrationCounts(segment, round(weight * float(example["logged_pctr"]) * MICROS),
                             round(weight * int(example["label"])))


LIMITS = ("BID", "AUDIENCE")
LIMITED_FOR_MS = 3_600_000  # an hour: the design's bar for reporting a campaign as limited


@dataclass
class LimitedCampaigns:
    """Per campaign, its current limit and since when it has held without a break."""

    limited_for_ms: int = LIMITED_FOR_MS
    since: dict[int, tuple[str, int]] = field(default_factory=dict)  # campaign id -> (limit, first step ms)
    latest_ms: int = 0  # the newest step seen: the counts are "as of" this instant

    def observe(self, campaign_id: int, limit: str | None, now_ms: int) -> None:
        """One controller step's verdict for the campaign (None: not limited)."""
        self.latest_ms = max(self.latest_ms, now_ms)
        held = self.since.get(campaign_id)
        if limit is None:
            self.since.pop(campaign_id, None)
        elif held is None or held[0] != limit:
            self.since[campaign_id] = (limit, now_ms)

    def count(self, limit: str) -> int:
        """Campaigns limited by `limit` for at least `limited_for_ms` as of the newest step."""
        return sum(1 for kind, began in self.since.values()
                   if kind == limit and self.latest_ms - began >= self.limited_for_ms)
