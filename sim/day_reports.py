"""The simulated day's advertiser reports against its recount.

After the day's billing closes, the run's billed topic (the click aggregator's BilledSpend totals) is landed into
the campaign store's report tables by `serving.report_landing` (in process, until caught up, under a consumer group
of the run), each campaign's daily report is read back as the advertiser API builds it
(`serving.advertiser.store.campaigns_report`) and compared field by field with `core.clicks.recount` of the
day's beacons (`core.reports.recount_differences`). The landing keys its rows by campaign id and budget day
alone (no campaign row is needed for billed totals), so the run's campaigns land under their own ids, which are
unique per run.

`day_recount`, `verdict` and `summary_line` are pure; `check` does the I/O. A store or Kafka that fails the
check is a failed check (`reports_equal_recount` false, with the error), never a skipped one."""
from __future__ import annotations

import asyncio
from typing import Any, Iterable, Mapping

from core.reports import BILLED_METRICS, day_start_ms, next_day, recount_differences, ReportRequest


def day_recount(recount: Mapping[tuple[int, str], Mapping[str, Any]], day: str) -> dict[int, dict[str, int]]:
    """`core.clicks.recount`'s records of one budget day as campaign id -> the report's billed figures."""
    return {campaign_id: {name: int(record.get(name, 0)) for name in BILLED_METRICS}
            for (campaign_id, record_day), record in recount.items() if record_day == day}


def verdict(campaign_ids: Iterable[int], differences: list[dict[str, Any]], error: str | None = None
            ) -> dict[str, Any]:
    """The check's figures: how many campaigns were compared, every difference (campaign, field, report,
    recount), and whether the reports equal the recount (no difference and no error)."""
    return {"reports_equal_recount": error is None and not differences, "report_campaigns": len(set(campaign_ids)),
            "report_differences": differences, "reports_error": error}


def summary_line(figures: Mapping[str, Any]) -> str:
    """One line for the report: the agreement, the differences (the first five) or why there was no check."""
    if figures.get("reports_equal_recount") is None:
        return "reports against the recount: not checked"
    if figures.get("reports_error"):
        return f"REPORTS NOT CHECKED AGAINST THE RECOUNT: {figures['reports_error']}"
    differences = figures.get("report_differences") or []
    if not differences:
        return f"reports equal the recount: {figures['report_campaigns']} campaigns, 0 differences"
    shown = "; ".join(f"campaign {d['campaign_id']} {d['field']}: report {d['report']}, recount {d['recount']}"
                      for d in differences[:5])
    more = f"; {len(differences) - 5} more" if len(differences) > 5 else ""
    return (f"REPORTS DIFFER FROM THE RECOUNT: {len(differences)} differences over {figures['report_campaigns']} "
            f"campaigns ({shown}{more})")


def _daily_request(day: str) -> ReportRequest:
    """The daily report of one budget day."""
    start = day_start_ms(day)
    return ReportRequest("day", start, day_start_ms(next_day(day)))


async def _read_report(dsn: str, campaign_ids: list[int], day: str) -> dict[str, Any]:
    import psycopg

    from serving.advertiser.store import campaigns_report

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await campaigns_report(conn, campaign_ids, _daily_request(day))


def check(platform, topics: Mapping[str, str], run: str, campaign_ids: Iterable[int],
          recount: Mapping[int, Mapping[str, Any]], day: str) -> dict[str, Any]:
    """Land the run's billed topic, read the day's report of `campaign_ids` and compare it with `recount`
    (campaign id -> totals, `day_recount`); returns `verdict`'s figures plus how many records were landed."""
    import psycopg
    from confluent_kafka import KafkaException

    from core.errors import AdserveError
    from serving.report_landing.main import land
    from serving.report_landing.settings import ReportLandingSettings
    from serving.advertiser.store import migrate

    ids = sorted(set(campaign_ids))
    try:
        migrate(platform.postgres_dsn)  # `adserve up` applies them; a store made before the report tables has none
        counts = land(ReportLandingSettings(platform.kafka_bootstrap, platform.postgres_dsn, topics["billed"],
                                            topics["conversions"], topics["dead"], f"adserve-simulate-reports-{run}",
                                            until_caught_up=True))
        report = asyncio.run(_read_report(platform.postgres_dsn, ids, day))
    except (psycopg.Error, KafkaException, AdserveError, OSError) as error:
        # the check failed: reported as such (the command exits 1), never read as agreement
        return {**verdict(ids, [], f"{type(error).__name__}: {error}"), "billed_records_landed": 0}
    return {**verdict(ids, recount_differences(report, recount)), "billed_records_landed": counts.billed}
