"""The fleet panels: one list, as data, of what an operator watches on the serving fleet.

Each `Panel` is a PromQL expression over the metrics the processes really export on `/metrics` (the ad
server: serving.adserver.app.Metrics; the tracker: serving.tracker.Tracker; the prediction service:
serving.model.service.Metrics; the Flink jobs through their Prometheus reporter, and recording rules over
them; the dashboard itself: serving.dashboard.app). The dashboard's `GET /v1/fleet`
evaluates them against a Prometheus HTTP API, and the Grafana dashboard is generated from this same list
(infra/platform/grafana.py), so a panel is defined once.

The list is a contract: `name` is a stable identifier (snake_case, never reused for another meaning), `unit`
is a Grafana unit id, and a panel's expression yields one series, or one per value of the labels named in
`by`. prometheus_client exposes a Counter `x` as `x_total` and a Histogram `x` as `x_bucket`/`x_sum`/`x_count`;
the expressions use those exposed names. This module never talks to Prometheus."""
from __future__ import annotations

from dataclasses import dataclass

from core.errors import InvalidArgument

RATE_WINDOW = "5m"  # the window of every rate(): a few scrapes at 15 s, smooth enough for a fleet view


@dataclass(frozen=True)
class Panel:
    """One fleet panel.

    name: stable identifier; title: what the page and Grafana show; expression: PromQL; unit: Grafana unit id
    (reqps, percentunit, s, short, ...); by: the labels that split the result into series (empty: one series);
    exported_by: the processes whose /metrics carry the metric (empty: no process exports it yet, the panel
    shows no data); description: what the number means and why it is watched."""

    name: str
    title: str
    expression: str
    unit: str
    by: tuple[str, ...]
    exported_by: tuple[str, ...]
    description: str


def _quantile(q: float, histogram: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket[{RATE_WINDOW}])))"


PANELS: tuple[Panel, ...] = (
    Panel("requests_per_second", "Ad requests/s",
          f"sum(rate(adserve_ad_requests_total[{RATE_WINDOW}]))", "reqps", (), ("adserver",),
          "Ad requests answered per second across the fleet, every outcome (served, bad_request, overloaded, "
          "not_ready, deadline)."),
    Panel("refused_share", "Refused requests (overloaded, not ready, deadline)",
          f"sum(rate(adserve_ad_requests_total{{outcome=~\"overloaded|not_ready|deadline\"}}[{RATE_WINDOW}])) / "
          f"sum(rate(adserve_ad_requests_total[{RATE_WINDOW}]))", "percentunit", (), ("adserver",),
          "Share of ad requests answered 503: the fleet is short of capacity or its state is behind."),
    Panel("fill_rate", "Fill rate",
          f"sum(rate(adserve_slots_total{{result=\"filled\"}}[{RATE_WINDOW}])) / "
          f"sum(rate(adserve_slots_total[{RATE_WINDOW}]))", "percentunit", (), ("adserver",),
          "Share of the slots asked for that got an ad."),
    Panel("latency_p50", "Ad request latency p50", _quantile(0.5, "adserve_ad_request_seconds"), "s", (),
          ("adserver",), "Median handler latency of /v1/ads (the deadline is 100 ms)."),
    Panel("latency_p99", "Ad request latency p99", _quantile(0.99, "adserve_ad_request_seconds"), "s", (),
          ("adserver",), "99th percentile handler latency of /v1/ads (the deadline is 100 ms)."),
    Panel("fallback_share", "Auctions on pre-ranker scores",
          f"sum(rate(adserve_prediction_fallbacks_total[{RATE_WINDOW}])) / "
          f"sum(rate(adserve_ad_requests_total{{outcome=\"served\"}}[{RATE_WINDOW}]))", "percentunit", (),
          ("adserver",),
          "Share of served requests whose auction ran on the pre-ranker's scores because the model did not "
          "answer in time: ranking quality drops while it is high."),
    Panel("prediction_latency_p99", "Prediction service latency p99",
          _quantile(0.99, "adserve_prediction_request_seconds"), "s", (), ("prediction",),
          "99th percentile of arrival to answer at the prediction service."),
    Panel("freshness_lag", "Advertiser change to serving (max over servers)",
          "max(adserve_commit_to_applied_seconds)", "s", (), ("adserver",),
          "Commit in the campaign store to applied in a server's index, of the latest change applied: how long a "
          "pause or a budget change takes to reach serving."),
    Panel("index_lag", "State topics behind (max over servers)", "max(adserve_index_lag_seconds)", "s", (),
          ("adserver",), "How far the slowest server's follower is behind the heads of its state topics."),
    Panel("feature_snapshot_age", "Ad-feature snapshot age (max over servers)",
          "max(adserve_feature_snapshot_age_seconds)", "s", (), ("adserver",),
          "Wall clock minus the cut of the ad-feature snapshot a server applied."),
    Panel("pacing_state_age", "Budget state age", "max(adserve_dashboard_budget_state_age_seconds)", "s", (),
          ("dashboard",),
          "Wall clock minus the event time of the newest budget.state record: the budget job's silence. Servers "
          "meter every open campaign after 60 s of it."),
    Panel("billing_lag", "Billing lag (click aggregator behind the wall clock)",
          "max(flink_taskmanager_job_task_operator_currentEmitEventTimeLag{job_name=~\"click_aggregator.*\"}) / 1000",
          "s", (), ("click_aggregator",),
          "Wall clock minus the event time of the latest beacon the click aggregator's Kafka source read (Flink's "
          "Prometheus reporter): billed spend replaces expected spend that much later. Replays of past days "
          "read far behind by design."),
    Panel("tracker_events_per_second", "Tracker events/s",
          f"sum by (type) (rate(adserve_tracker_events_total[{RATE_WINDOW}]))", "short", ("type",), ("tracker",),
          "Impressions, clicks, conversions and feedback the tracker accepted, per second."),
    Panel("rejected_tokens_per_second", "Rejected tokens/s",
          f"sum by (reason) (rate(adserve_tracker_rejected_tokens_total[{RATE_WINDOW}]))", "short", ("reason",),
          ("tracker",), "Beacons refused by reason (malformed, bad_signature, unknown_key, expired)."),
    Panel("calibration_ratio", "Calibration (predicted / observed clicks) by segment",
          "adserve_calibration_ratio", "short", ("segment",), ("training_join",),
          "Predicted over observed clicks over the last hour per segment (placement/country/billing type): "
          "training_join's calibration counters through the recording rule adserve_calibration_ratio "
          "(infra/prometheus/rules.yml). 1.0 is calibrated; prices divide by pCTR, so a segment off by 5 % is "
          "mispriced by 5 %."),
)


def panel(name: str) -> Panel:
    """The panel named `name`; InvalidArgument listing the known names otherwise."""
    for candidate in PANELS:
        if candidate.name == name:
            return candidate
    raise InvalidArgument(f"panel: no fleet panel named {name!r}; known: {', '.join(p.name for p in PANELS)}")
