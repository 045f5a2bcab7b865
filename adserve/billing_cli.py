"""`adserve billing absorbed`: one budget day's absorbed overspend, as operators read it.

  adserve billing absorbed --day 2026-12-04 [--top 20] [--json]

Spend above a campaign's budget is never billed: it is absorbed, and the money is the platform's. The
click aggregator bills each event up to the highest budget in force while it could have been served
(core.clicks), and the report landing keeps each campaign's budget day in report_billed_daily. This command
reads that table (the campaign store of the process's settings, postgres.dsn) and prints the day's billed and
absorbed money, the absorbed share by budget-size class (small < $200 a day, medium < $10,000, large), and
the campaigns that absorbed the most. The alert AbsorbedOverspendHigh points here. A paced campaign absorbs
~0.1 % of its spend; far more is slices or pacing gone wrong for that campaign. Exit status 0, or 2 when the
day is not a date or the store cannot be read."""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys

from core.billing import SIZE_CLASSES, AbsorbedDay, absorbed_report
from core.reports import BILLED_DAILY_TABLE


def register(sub) -> None:
    b = sub.add_parser("billing", help="billing as operators read it: absorbed overspend by day",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bsub = b.add_subparsers(dest="billing_command", required=True)
    p = bsub.add_parser("absorbed", help="one budget day's absorbed overspend: totals, by budget size, top campaigns",
                        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--day", required=True, help="the budget day, YYYY-MM-DD (each campaign's own time zone)")
    p.add_argument("--top", type=int, default=20, help="how many campaigns to list, most absorbed first (default 20)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.set_defaults(handler=cmd_absorbed)


def read_day(dsn: str, day: dt.date) -> list[AbsorbedDay]:
    """The day's rows of report_billed_daily with their campaigns' names and budgets."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            f"SELECT d.campaign_id, coalesce(c.name, ''), coalesce(c.advertiser_id, 0), "
            f"coalesce(c.daily_budget_micros, 0), d.billed_spend_micros, d.absorbed_overspend_micros "
            f"FROM {BILLED_DAILY_TABLE} d LEFT JOIN campaigns c USING (campaign_id) WHERE d.budget_day = %s",
            (day,)).fetchall()
    return [AbsorbedDay(*row) for row in rows]


def _dollars(micros: int) -> str:
    return f"${micros / 1e6:,.2f}"


def render(report: dict) -> str:
    lines = [f"absorbed overspend on {report['day']}: {_dollars(report['absorbed_micros'])} of "
             f"{_dollars(report['billed_micros'])} billed ({report['absorbed_share']:.3%}), "
             f"{report['campaigns_absorbing']} of {report['campaigns']} campaigns"]
    for name in SIZE_CLASSES:
        c = report["by_size_class"][name]
        lines.append(f"  {name:<7} {c['campaigns']:>6} campaigns  billed {_dollars(c['billed_micros']):>16}  "
                     f"absorbed {_dollars(c['absorbed_micros']):>12} ({c['absorbed_share']:.3%})")
    if report["top"]:
        lines.append("most absorbed:")
        for r in report["top"]:
            share = f"{r['absorbed_share']:.2%}" if r["absorbed_share"] is not None else "all"
            lines.append(f"  campaign {r['campaign_id']:>8} {r['name'][:30]:<30} {r['size_class']:<6} "
                         f"budget {_dollars(r['budget_micros']):>12}  absorbed {_dollars(r['absorbed_micros']):>10} "
                         f"({share} of billed)")
    return "\n".join(lines)


def cmd_absorbed(args: argparse.Namespace) -> int:
    from streams.endpoints import process_endpoints

    try:
        day = dt.date.fromisoformat(args.day)
    except ValueError:
        print(f"adserve billing absorbed: --day {args.day!r} is not a date (YYYY-MM-DD)", file=sys.stderr)
        return 2
    try:
        rows = read_day(process_endpoints().postgres.dsn.value, day)
    except Exception as exc:  # noqa: BLE001 - a store that cannot be read is reported, not a traceback
        print(f"adserve billing absorbed: cannot read {BILLED_DAILY_TABLE}: {type(exc).__name__}: {exc}",
              file=sys.stderr)
        return 2
    report = absorbed_report(day.isoformat(), rows, top=max(0, args.top))
    print(json.dumps(report) if args.json else render(report))
    return 0
