"""`adserve simulate` (the main command: a simulated day through the real budget and billing jobs) and
`adserve pacing show`."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from infra.platform import PlatformSettings
from serving.scrape_targets import TARGETS_DIR_ENV
from sim.day_watch import DayWatch

DEFAULT_REQUESTS = 60_000  # the default day: every figure and check of the full-size one in ~60 % of its time
DEFAULT_SERVERS = 2
TARGETS = {  # the simulated day's targets (README, "Targets and where they stand")
    "overspend_pct_paced": ("<=", 0.1), "max_overspend_clicks_small": ("<=", 1.0),
    "billed_above_budget_micros": ("<=", 0), "delivery_pct": (">=", 98.0), "curve_error_pct_hourly": ("<=", 5.0)}


def register(sub) -> None:
    from sim import pacing_day as simulate

    p = sub.add_parser("simulate", help="the main job: a simulated day through the real budget and billing jobs, "
                       "with a report",
                       description=simulate.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--full", action="store_true",
                   help=f"the full-size day: {simulate.FULL_DAY_REQUESTS:,} requests through "
                        f"{simulate.FULL_DAY_SERVERS} ad servers at full budgets (15-25 minutes on 2 cores; the "
                        "default day takes 10-15)")
    p.add_argument("--requests", type=int,
                   help=f"ad requests over the day (default {DEFAULT_REQUESTS:,}; {simulate.FULL_DAY_REQUESTS:,} with "
                        f"--full); every budget scales by requests / {simulate.FULL_DAY_REQUESTS:,}")
    p.add_argument("--servers", type=int,
                   help=f"simulated ad servers (default {DEFAULT_SERVERS}; {simulate.FULL_DAY_SERVERS} with --full; "
                        "at least 2: one is killed at 21:30)")
    p.add_argument("--lead-s", type=int, default=15,
                   help="how far (event-time seconds) servers may run ahead of the newest budget state: the loop "
                        "delay, 1-3 s in production; near the 30 s a slice lives, metered campaigns starve "
                        "(default 15). It sets the wall time too: the day waits on the job once per --lead-s less "
                        "its 2 s of out-of-orderness, rounded down to its 10 s steps (15: once every step; 23: "
                        "every other one, about half the time, but metered campaigns then keep 7 s of each "
                        "slice and delivery and the curve error fall apart)")
    p.add_argument("--parallelism", type=int, default=2, help="parallelism of the budget job (default 2)")
    p.add_argument("--seed", type=int, default=1, help="random seed of traffic, clicks and campaigns")
    p.add_argument("--out", type=Path, default=Path("simulate-out"),
                   help="folder for simulate.html (the picture), simulate.json and dashboard.png (the pacing "
                        "dashboard at the end of the day) (default ./simulate-out)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--no-dashboard", action="store_true",
                   help="do not serve the pacing dashboard on the day's topics (nor take its screenshot)")
    p.add_argument("--dashboard-port", type=int,
                   help="port of the day's pacing dashboard on 127.0.0.1 (default: the platform's dashboard port, "
                        "ADSERVE_DASHBOARD_PORT, 18092; 0: any free port)")
    p.add_argument("--down", action="store_true", help="stop the platform at the end (default: leave it up)")
    p.set_defaults(handler=cmd_simulate)

    pacing = sub.add_parser("pacing", help="what the budget job decided for a campaign today",
                            description="Read Redis pacing:{campaign} (written by the budget_pacing job).")
    psub = pacing.add_subparsers(dest="pacing_command", required=True, metavar="ACTION")
    p = psub.add_parser("show", help="a campaign's day: target, committed spend, p and state, hour by hour")
    p.add_argument("campaign_id", type=int)
    p.add_argument("--redis-url", help="default: the local platform's Redis")
    p.add_argument("--json", action="store_true", help="print the day as JSON")
    p.set_defaults(handler=cmd_pacing_show)


def _verdicts(figures: dict) -> list[tuple[str, bool, object, str]]:
    out = []
    for name, (op, limit) in TARGETS.items():
        value = figures.get(name)
        ok = value is not None and (value <= limit if op == "<=" else value >= limit)
        out.append((name, ok, value, f"{op} {limit}"))
    return out


def day_size(args: argparse.Namespace) -> tuple[int, int]:
    """(requests, servers) of the day asked for: the default day, the full-size one with --full, and either
    number as given."""
    from sim import pacing_day as simulate

    requests = args.requests if args.requests is not None else \
        simulate.FULL_DAY_REQUESTS if args.full else DEFAULT_REQUESTS
    servers = args.servers if args.servers is not None else simulate.FULL_DAY_SERVERS if args.full else DEFAULT_SERVERS
    if requests < 1:
        raise SystemExit(f"adserve simulate: --requests must be at least 1 (got {requests})")
    if servers < 2:
        raise SystemExit(f"adserve simulate: --servers must be at least 2: one is killed at 21:30 (got {servers})")
    return requests, servers


def cmd_simulate(args: argparse.Namespace) -> int:
    from sim import pacing_day as simulate, pacing_report as simulate_report
    from sim.progress import Progress
    from infra.platform import control

    requests, servers = day_size(args)
    settings = PlatformSettings.from_env()
    # the day's dashboard announces itself to the platform's Prometheus, as the simulated fleet does
    os.environ.setdefault(TARGETS_DIR_ENV, str(settings.prometheus_targets_dir))
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    watch: DayWatch | None = None
    try:
        control.up(settings, log=log)
        bar: list[Progress] = []

        def progress(where: simulate.DayProgress) -> None:
            if not bar:  # the clock starts with the day's first second, not with the deploys before it
                bar.append(Progress("simulated day", where.work_total))
            clock = f"{where.second // 3600:02d}:{where.second % 3600 // 60:02d}"
            note = f"{clock} of 24:00, {where.requests:,} requests"
            if where.second >= 86_400:
                bar[0].close(note)
            else:
                bar[0].update(where.work_done, note=note)

        log(f"simulating {simulate.SIM_DAY}: {requests:,} requests through {servers} ad servers at most "
            f"{args.lead_s} s ahead of the budget job, budgets at "
            f"{100 * requests / simulate.FULL_DAY_REQUESTS:g} % of the full-size day's ...")
        if not args.no_dashboard:
            watch = DayWatch(bootstrap=settings.kafka_bootstrap, prometheus_url=settings.prometheus_url,
                             host="127.0.0.1", port=dashboard_port(args, settings), out_dir=args.out, log=log)
        day = simulate.DaySettings(requests=requests, seed=args.seed, servers=servers, lead_s=args.lead_s,
                                   parallelism=args.parallelism)
        result = simulate.run_day(settings, day, out_dir=args.out, progress=progress,
                                  on_start=None if watch is None else watch.on_start, log=log)
        figures = simulate_report.figures(result)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "simulate.html").write_text(simulate_report.picture(result, figures))
        (args.out / "simulate.json").write_text(json.dumps(figures, indent=2, default=str))
        verdicts = _verdicts(figures)
        if args.json:
            print(json.dumps({k: v for k, v in figures.items() if k != "per_campaign"}, default=str))
        else:
            print(simulate_report.text(figures))
            print()
            for name, ok, value, target in verdicts:
                print(f"  {'met   ' if ok else 'MISSED'} {name} = {value} (target {target})")
            print(f"\npicture: {args.out / 'simulate.html'}; figures: {args.out / 'simulate.json'}")
            print(f"result: {'OK' if all(ok for _, ok, _, _ in verdicts) else 'targets missed (see above)'}")
        failures = money_failures(figures)
        for failure in failures:
            print(f"FAILED: {failure}", file=sys.stderr)
    finally:
        if watch is not None:
            watch.close()
        if args.down:
            control.down(settings, log=log)
    return 1 if failures else 0


def dashboard_port(args: argparse.Namespace, settings: PlatformSettings) -> int:
    """The day's dashboard port: --dashboard-port, else the platform's (ADSERVE_DASHBOARD_PORT)."""
    port = settings.dashboard_port if args.dashboard_port is None else args.dashboard_port
    if not 0 <= port <= 65_535:
        raise SystemExit(f"adserve simulate: --dashboard-port must be 0-65535 (got {port})")
    return port


def money_failures(figures: dict) -> list[str]:
    """What makes the day fail (exit 1) whatever its targets: money billed above a budget, the aggregator's totals
    not equal to the recount, the advertiser reports not equal to the recount (or not checked)."""
    from sim.day_reports import summary_line

    out = []
    if figures["billed_above_budget_micros"]:
        out.append(f"{figures['billed_above_budget_micros']} micros billed above a budget")
    if figures["billing_recount_mismatches"]:
        out.append(f"{figures['billing_recount_mismatches']} campaigns' billed totals differ from the recount")
    if figures.get("reports_equal_recount") is not True:
        out.append(summary_line(figures))
    return out


def cmd_pacing_show(args: argparse.Namespace) -> int:
    from streams.pacing_store import PacingStore

    store = PacingStore(args.redis_url or PlatformSettings.from_env().redis_url)
    day = store.read(args.campaign_id)
    store.close()
    if day is None:
        print(f"no pacing for campaign {args.campaign_id} (is budget_pacing running, and has it seen the campaign?)",
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({**{k: v for k, v in vars(day).items() if k != "points"},
                          "points": [vars(p) for p in day.points]}))
        return 0
    usd = 1_000_000
    print(f"campaign {day.campaign_id}, budget day {day.day}: budget ${day.budget_micros / usd:,.2f}, "
          f"state {day.state}, p {day.participation_probability:.3f}")
    print(f"  target so far ${day.target_micros / usd:,.2f}, committed ${day.committed_micros / usd:,.2f}, "
          f"billed ${day.billed_micros / usd:,.2f}")
    print(f"\n  {'hour':>5} {'target $':>12} {'committed $':>12} {'p':>7}  state")
    by_hour = {}
    for point in day.points:
        by_hour[point.minute // 60] = point  # the last point of each hour
    for hour, point in sorted(by_hour.items()):
        bar = "#" * int(round(point.participation_probability * 20))
        print(f"  {hour:>4}h {point.target_micros / usd:>12,.2f} {point.committed_micros / usd:>12,.2f} "
              f"{point.participation_probability:>7.3f}  {point.state:<8} {bar}")
    return 0
