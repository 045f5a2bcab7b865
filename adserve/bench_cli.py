"""`adserve bench ...`: the benchmarks' arguments and the calls into bench/; each prints its figures, or one
JSON object with --json (progress to stderr then). The figures themselves are defined in bench/."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmarks: figures with the machine's details and a same-run baseline",
                       description="Run a benchmark. Each prints its figures beside a baseline measured in the "
                                   "same run; --json prints one JSON object (names in the benchmark's help).")
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    _add_platform(bsub)
    _add_decision(bsub)
    _add_serve(bsub)
    _add_freshness(bsub)
    _add_pacing(bsub)
    _add_billing(bsub)
    _add_model(bsub)
    _add_live_loop(bsub)
    _add_dashboard(bsub)
    _add_faults(bsub)
    _add_soak(bsub)
    _add_table(bsub)


def _add_platform(bsub) -> None:
    from bench import platform as bench

    b = bsub.add_parser("platform", help="platform start, job submission, smoke-job throughput, Avro codec",
                        description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--events", type=int, default=100_000, help="events through the smoke job (default 100,000)")
    b.add_argument("--no-cold-start", action="store_true", help="skip the cold start of a second instance")
    b.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    b.set_defaults(handler=cmd_bench_platform)


def _add_decision(bsub) -> None:
    from bench import decision as bench_decision

    d = bsub.add_parser("decision", help="targeting index, filters, pre-rank and auction on synthetic ads",
                        description=bench_decision.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--ads", default="1000000,10000000",
                   help="comma-separated ad counts (default 1000000,10000000)")
    d.add_argument("--requests", type=int, default=2000, help="requests per size (default 2,000)")
    d.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    d.set_defaults(handler=cmd_bench_decision)


def _add_serve(bsub) -> None:
    from bench import serve as bench_serve

    v = bsub.add_parser("serve", help="the serving tier (workers behind the gateway) under load over loopback, "
                                      "driven by vegeta (needs `adserve up`)",
                        description=bench_serve.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--ads", default="100000,1000000,10000000",
                   help="comma-separated ad counts (default 100000,1000000,10000000)")
    v.add_argument("--workers", type=int, default=None, help="ad-server worker processes (default: one per core)")
    v.add_argument("--duration", type=float, default=10.0, help="seconds per load step (default 10)")
    v.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    v.set_defaults(handler=cmd_bench_serve)


def _add_freshness(bsub) -> None:
    from bench import freshness as bench_freshness

    f = bsub.add_parser("freshness", help="advertiser change -> ad server lag, index builder throughput, "
                                          "snapshot boot (needs `adserve up`)",
                        description=bench_freshness.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--ads", type=int, default=100_000,
                   help="ads loaded through the real path (default 100,000; 0 skips part 1)")
    f.add_argument("--changes", type=int, default=1_000, help="random changes (default 1,000)")
    f.add_argument("--rate", type=float, default=50.0, help="changes committed per second (default 50)")
    f.add_argument("--snapshot-ads", type=int, default=1_000_000, help="ads in the snapshot boot test "
                                                                        "(default 1,000,000; 0 skips it)")
    f.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    f.set_defaults(handler=cmd_bench_freshness)


def _add_pacing(bsub) -> None:
    from bench import pacing as bench_pacing

    g = bsub.add_parser("pacing", help="spend items/s through the budget job, controller steps/s (needs `adserve up`)",
                        description=bench_pacing.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--items", type=int, default=4_000_000, help="spend reports through the job (default 4,000,000)")
    g.add_argument("--servers", type=int, default=200, help="reporting servers (default 200)")
    g.add_argument("--campaigns", type=int, default=2_000, help="campaigns reported on (default 2,000)")
    g.add_argument("--controller-campaigns", type=int, default=100_000,
                   help="campaigns in the controller part (default 100,000)")
    g.add_argument("--single-reports", action="store_true",
                   help="one record per spend report, as tools send them (default: each server's second batched "
                        "per partition, as ad servers send them)")
    g.add_argument("--checkpoint-interval-ms", type=int, default=bench_pacing.CHECKPOINT_MS,
                   help=f"the job's checkpoint interval (default {bench_pacing.CHECKPOINT_MS}, the job's own)")
    g.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    g.set_defaults(handler=cmd_bench_pacing)


def _add_billing(bsub) -> None:
    from bench import billing as bench_billing

    h = bsub.add_parser("billing", help="events/s through the click aggregator, beacon-to-billed latency, the "
                                        "nightly recount (needs `adserve up`)",
                        description=bench_billing.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    h.add_argument("--events", type=int, default=3_000_000, help="events through the job (default 3,000,000)")
    h.add_argument("--campaigns", type=int, default=2_000, help="campaigns (default 2,000)")
    h.add_argument("--latency-rate", type=int, default=2_000, help="events/s in the latency part (default 2,000)")
    h.add_argument("--latency-s", type=int, default=60, help="seconds of the latency part (default 60)")
    h.add_argument("--no-recount", action="store_true", help="skip the archive and the nightly recount")
    h.add_argument("--compare-full-snapshots", action="store_true",
                   help="run part 1 again with the job's state written whole at every checkpoint (no changelog)")
    h.add_argument("--checkpoint-interval-ms", type=int, default=bench_billing.CHECKPOINT_MS,
                   help=f"the job's checkpoint interval (default {bench_billing.CHECKPOINT_MS}, the job's own)")
    h.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    h.set_defaults(handler=cmd_bench_billing)


def _add_faults(bsub) -> None:
    from bench import faults as bench_faults

    f = bsub.add_parser("faults", help="the fault matrix: each part of the platform killed and restarted under a "
                                       "day's traffic, the invariants checked after each (needs `adserve up`)",
                        description=bench_faults.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--short", action="store_true",
                   help=f"only {', '.join(bench_faults.SHORT_FAULTS)} (the version CI runs)")
    f.add_argument("--faults", help=f"comma-separated faults to run, in order (default all: "
                                    f"{','.join(bench_faults.FAULTS)})")
    f.add_argument("--rate", type=float, default=8.0, help="ad requests a second (default 8)")
    f.add_argument("--settle-s", type=float, default=bench_faults.Timing.settle_s,
                   help="seconds a phase's campaigns serve before the fault")
    f.add_argument("--outage-s", type=float, default=bench_faults.Timing.outage_s,
                   help="seconds the killed part stays down before its restart")
    f.add_argument("--after-s", type=float, default=bench_faults.Timing.after_s,
                   help="seconds of traffic after the recovery")
    f.add_argument("--broker-outage-s", type=float, default=bench_faults.Timing.broker_outage_s,
                   help="seconds the broker stays down (longer than --delivery-timeout-ms, so only the spool and "
                        "the spend resends keep what the producers held)")
    f.add_argument("--delivery-timeout-ms", type=int, default=bench_faults.Timing.delivery_timeout_ms,
                   help="the run's servers' and tracker's producer delivery timeout (librdkafka message.timeout.ms)")
    f.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    f.set_defaults(handler=cmd_bench_faults)


def _add_soak(bsub) -> None:
    from bench import soak as bench_soak

    s = bsub.add_parser("soak", help="one ad server at a constant rate for --minutes on loopback: memory, file "
                                     "descriptors, p99 and producer queues must not grow (needs `adserve up`)",
                        description=bench_soak.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--minutes", type=int, default=bench_soak.MINUTES,
                   help=f"minutes of load (default {bench_soak.MINUTES})")
    s.add_argument("--rate", type=float, default=bench_soak.RATE,
                   help=f"ad requests a second, open loop (default {bench_soak.RATE:g}; give it the highest rate "
                        "one server holds)")
    s.add_argument("--ads", type=int, default=bench_soak.ADS, help=f"synthetic ads (default {bench_soak.ADS:,})")
    s.add_argument("--sample-s", type=float, default=bench_soak.SAMPLE_S,
                   help=f"seconds between looks at memory, descriptors and queues (default {bench_soak.SAMPLE_S:g})")
    s.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    s.set_defaults(handler=cmd_bench_soak)


def _add_model(bsub) -> None:
    from bench import model as bench_model

    m = bsub.add_parser("model", help="click-model scores/s and latency in process and through the prediction "
                                      "service, beside the priors baseline",
                        description=bench_model.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("--model", type=Path, help="a model directory (models/click-vN); default: train a small one on "
                                              "synthetic impressions first")
    m.add_argument("--ad-features", type=Path, help="the snapshot folder for --model (its newest snapshot is used)")
    m.add_argument("--requests", type=int, default=2_000, help="requests per concurrency step (default 2,000)")
    m.add_argument("--candidates", type=int, default=200, help="candidates per request (default 200)")
    m.add_argument("--slots", type=int, default=2, help="slot positions per request (default 2)")
    m.add_argument("--concurrency", default="1,2,4", help="comma-separated thread counts (default 1,2,4)")
    m.add_argument("--service-clients", default="1,4,16",
                   help="comma-separated client thread counts against the prediction service (default 1,4,16)")
    m.add_argument("--max-wait-ms", type=float, default=1.0, help="the service's batching wait (default 1 ms)")
    m.add_argument("--no-service", action="store_true", help="skip the prediction service")
    m.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    m.set_defaults(handler=cmd_bench_model)


def _add_live_loop(bsub) -> None:
    from bench import live_loop

    g = bsub.add_parser("live-loop", help="the platform learning from its own traffic against a world of known click "
                                          "rates: NE before and after the first model, calibration, snapshot age, "
                                          "hot swaps, new ads, reserves (needs `adserve up`)",
                        description=live_loop.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--requests", type=int, default=200_000, help="requests over the three phases (default 200,000)")
    g.add_argument("--advertisers", type=int, default=20, help="advertisers of the world, 5 campaigns of 4 ads each "
                                                               "(default 20: 400 ads)")
    g.add_argument("--users", type=int, default=20_000, help="users of the world (default 20,000)")
    g.add_argument("--processes", type=int, default=2,
                   help="client processes sending the simulated users' requests and beacons (default 2)")
    g.add_argument("--concurrency", type=int, default=3,
                   help="simulated users in flight per client process, each waiting for its answer and beacons "
                        "(default 3)")
    g.add_argument("--canary-share", type=float, default=0.5,
                   help="share of requests the first model scores as a canary (default 0.5)")
    g.add_argument("--new-ad-share", type=float, default=0.1,
                   help="share of the ads that join part-way through the priors phase (default 0.1)")
    g.add_argument("--feature-tick-ms", type=int, default=300_000,
                   help="the features job's snapshot period in event time (default 300,000: the design's 5 minutes; "
                        "short runs use less so that their first phase is served with snapshots)")
    g.add_argument("--seed", type=int, default=5)
    g.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    g.set_defaults(handler=cmd_bench_live_loop)


def _add_dashboard(bsub) -> None:
    from bench import dashboard as bench_dashboard

    d = bsub.add_parser("dashboard", help="the pacing campaign list at 10,000 campaigns, a 30-day hourly advertiser "
                                          "report and the dashboard page in headless Chromium (needs `adserve up`)",
                        description=bench_dashboard.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--campaigns", type=int, default=10_000, help="campaigns the dashboard holds (default 10,000)")
    d.add_argument("--requests", type=int, default=700, help="campaign-list requests (default 700)")
    d.add_argument("--report-campaigns", type=int, default=10,
                   help="campaigns of the reporting advertiser (default 10: 7,200 hourly rows in 30 days)")
    d.add_argument("--report-requests", type=int, default=200, help="report requests (default 200)")
    d.add_argument("--loads", type=int, default=7, help="page loads in Chromium (default 7)")
    d.add_argument("--no-browser", action="store_true", help="skip the page in Chromium")
    d.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    d.set_defaults(handler=cmd_bench_dashboard)


def cmd_bench_dashboard(args: argparse.Namespace) -> int:
    from bench import dashboard as bench_dashboard
    from core.errors import AdserveError

    try:
        figures = bench_dashboard.run(campaigns=args.campaigns, requests=args.requests,
                                      report_campaigns=args.report_campaigns, report_requests=args.report_requests,
                                      loads=args.loads, browser=not args.no_browser, log=_log(args))
    except AdserveError as exc:
        print(f"adserve bench dashboard: {exc}", file=sys.stderr)
        return 2
    return _emit(args, figures, bench_dashboard.render)


def cmd_bench_live_loop(args: argparse.Namespace) -> int:
    from bench import live_loop
    from core.errors import AdserveError

    try:
        options = live_loop.LiveLoopOptions(
            requests=args.requests, seed=args.seed, advertisers=args.advertisers, users=args.users,
            concurrency=args.concurrency, processes=args.processes, canary_share=args.canary_share,
            new_ad_share=args.new_ad_share, feature_tick_ms=args.feature_tick_ms)
        figures = live_loop.run(options, log=_log(args))
    except (AdserveError, ValueError, RuntimeError, TimeoutError) as exc:
        print(f"adserve bench live-loop: {exc}", file=sys.stderr)
        return 2
    return _emit(args, figures, live_loop.render)


def _add_table(bsub) -> None:
    from bench import targets

    t = bsub.add_parser("table", help="the targets table (markdown) from the benchmarks' latest JSON; --write "
                                      "puts it into the README",
                        description=targets.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("--benchmarks", type=Path, default=Path("benchmarks"),
                   help="the folder of the benchmarks' JSON (default benchmarks)")
    t.add_argument("--write", type=Path, metavar="README",
                   help="replace the table between the README's markers instead of printing it")
    t.set_defaults(handler=cmd_bench_table)


def cmd_bench_table(args: argparse.Namespace) -> int:
    from bench import targets
    from core.errors import AdserveError

    try:
        table = targets.render(targets.load_figures(args.benchmarks))
        if args.write is None:
            print(table)
            return 0
        readme = args.write.read_text()
        updated = targets.with_table(readme, table)
    except AdserveError as exc:
        print(f"adserve bench table: {exc}", file=sys.stderr)
        return 2
    if updated != readme:
        args.write.write_text(updated)
    print(f"{args.write}: targets table {'updated' if updated != readme else 'already current'}")
    return 0


def _log(args: argparse.Namespace):
    """Progress lines: to stderr with --json, so stdout holds the JSON object alone."""
    return (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print


def _emit(args: argparse.Namespace, figures: dict, render) -> int:
    print(json.dumps(figures) if args.json else render(figures))
    return 0


def cmd_bench_model(args: argparse.Namespace) -> int:
    from bench import model as bench_model
    from core.errors import AdserveError

    log = _log(args)
    threads = [int(x) for x in args.concurrency.split(",") if x.strip()]
    clients = [] if args.no_service else [int(x) for x in args.service_clients.split(",") if x.strip()]
    try:
        figures = bench_model.run(model_dir=args.model, ad_features_dir=args.ad_features,
                                  workload=bench_model.Workload(args.requests, args.candidates, args.slots),
                                  concurrency=threads, service_clients=clients, max_wait_ms=args.max_wait_ms, log=log)
    except (AdserveError, ValueError, RuntimeError) as exc:
        print(f"adserve bench model: {exc}", file=sys.stderr)
        return 2
    return _emit(args, figures, bench_model.render)


def cmd_bench_billing(args: argparse.Namespace) -> int:
    from bench import billing as bench_billing

    log = _log(args)
    figures = bench_billing.run(events=args.events, campaigns=args.campaigns, latency_rate=args.latency_rate,
                                latency_s=args.latency_s, recount=not args.no_recount,
                                checkpoint_ms=args.checkpoint_interval_ms,
                                compare_full_snapshots=args.compare_full_snapshots, log=log)
    return _emit(args, figures, bench_billing.render)


def cmd_bench_faults(args: argparse.Namespace) -> int:
    from bench import faults as bench_faults

    log = _log(args)
    chosen = bench_faults.SHORT_FAULTS if args.short else bench_faults.FAULTS
    if args.faults:
        chosen = tuple(name.strip() for name in args.faults.split(",") if name.strip())
    if args.broker_outage_s * 1000 <= args.delivery_timeout_ms:
        print(f"--broker-outage-s {args.broker_outage_s:g} must be longer than --delivery-timeout-ms "
              f"{args.delivery_timeout_ms}: a shorter outage is covered by the producers' own retries", file=sys.stderr)
        return 2
    timing = bench_faults.Timing(settle_s=args.settle_s, outage_s=args.outage_s, after_s=args.after_s,
                                 broker_outage_s=args.broker_outage_s, delivery_timeout_ms=args.delivery_timeout_ms)
    figures = bench_faults.run(faults=chosen, rate=args.rate, timing=timing, log=log)
    code = _emit(args, figures, bench_faults.render)
    return code if figures["all_held"] else 1


def cmd_bench_soak(args: argparse.Namespace) -> int:
    from bench import soak as bench_soak

    log = _log(args)
    figures = bench_soak.run(minutes=args.minutes, rate=args.rate, ads=args.ads, sample_s=args.sample_s, log=log)
    code = _emit(args, figures, bench_soak.render)
    return code if figures["all_held"] else 1


def cmd_bench_pacing(args: argparse.Namespace) -> int:
    from bench import pacing as bench_pacing

    log = _log(args)
    figures = bench_pacing.run(items=args.items, servers=args.servers, campaigns=args.campaigns,
                               controller_campaigns=args.controller_campaigns,
                               checkpoint_ms=args.checkpoint_interval_ms, log=log,
                               batched=not args.single_reports)
    return _emit(args, figures, bench_pacing.render)


def cmd_bench_freshness(args: argparse.Namespace) -> int:
    from bench import freshness as bench_freshness

    log = _log(args)
    figures = bench_freshness.run(ads=args.ads, changes=args.changes, rate=args.rate,
                                  snapshot_ads=args.snapshot_ads, log=log)
    return _emit(args, figures, bench_freshness.render)


def cmd_bench_serve(args: argparse.Namespace) -> int:
    from bench import serve as bench_serve

    sizes = [int(x.replace("_", "")) for x in args.ads.split(",") if x.strip()]
    log = _log(args)
    figures = bench_serve.run(sizes, duration=args.duration, workers=args.workers, log=log)
    return _emit(args, figures, bench_serve.render)


def cmd_bench_decision(args: argparse.Namespace) -> int:
    from bench import decision as bench_decision

    sizes = [int(x.replace("_", "")) for x in args.ads.split(",") if x.strip()]
    log = _log(args)
    figures = bench_decision.run(sizes, requests=args.requests, log=log)
    return _emit(args, figures, bench_decision.render)


def cmd_bench_platform(args: argparse.Namespace) -> int:
    from bench import platform as bench

    log = _log(args)
    figures = bench.run(events=args.events, cold_start=not args.no_cold_start, log=log)
    return _emit(args, figures, bench.render)
