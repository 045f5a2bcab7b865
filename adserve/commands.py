"""Subcommand groups beyond up/down/status: jobs, pipelines, benchmarks and the main demo."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from infra.platform import PlatformSettings
from sim.tokens import TOKEN_KEYS_HELP, token_keys_from_env


def register(sub) -> None:
    _register_jobs(sub)
    _register_demo(sub)
    _register_bench(sub)
    _register_auction(sub)
    _register_serve(sub)
    from adserve import campaigns_cli

    campaigns_cli.register(sub)
    campaigns_cli.register_snapshots(sub)
    from adserve import operators_cli

    operators_cli.register(sub)
    from adserve import pacing_cli

    pacing_cli.register(sub)
    from adserve import model_cli

    model_cli.register(sub)
    from adserve import learning_cli

    learning_cli.register(sub)


# auction ------------------------------------------------------------------------

def _register_auction(sub) -> None:
    from adserve import auction_cli

    p = sub.add_parser("auction", help="run the auction alone on candidates given as JSON",
                       description=auction_cli.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", required=True, help="a JSON file, or - for standard input")
    p.set_defaults(handler=cmd_auction)


def cmd_auction(args: argparse.Namespace) -> int:
    from adserve import auction_cli

    if args.input == "-":
        return auction_cli.run(sys.stdin)
    try:
        with open(args.input) as stream:
            return auction_cli.run(stream)
    except OSError as exc:
        print(f"adserve auction: cannot read {args.input}: {exc.strerror}", file=sys.stderr)
        return 2


# benchmarks ---------------------------------------------------------------------

def _register_bench(sub) -> None:
    from bench import platform as bench

    p = sub.add_parser("bench", help="benchmarks: figures with the machine's details and a same-run baseline",
                       description="Run a benchmark. Each prints its figures beside a baseline measured in the "
                                   "same run; --json prints one JSON object (names in the benchmark's help).")
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="BENCHMARK")
    b = bsub.add_parser("platform", help="platform start, job submission, smoke-job throughput, Avro codec",
                        description=bench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    b.add_argument("--events", type=int, default=100_000, help="events through the smoke job (default 100,000)")
    b.add_argument("--no-cold-start", action="store_true", help="skip the cold start of a second instance")
    b.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    b.set_defaults(handler=cmd_bench_platform)

    from bench import decision as bench_decision

    d = bsub.add_parser("decision", help="targeting index, filters, pre-rank and auction on synthetic ads",
                        description=bench_decision.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("--ads", default="1000000,10000000",
                   help="comma-separated ad counts (default 1000000,10000000)")
    d.add_argument("--requests", type=int, default=2000, help="requests per size (default 2,000)")
    d.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    d.set_defaults(handler=cmd_bench_decision)

    from bench import serve as bench_serve

    v = bsub.add_parser("serve", help="the ad server under load over loopback (needs `adserve up`)",
                        description=bench_serve.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--ads", default="100000,1000000", help="comma-separated ad counts (default 100000,1000000)")
    v.add_argument("--duration", type=float, default=10.0, help="seconds per load step (default 10)")
    v.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    v.set_defaults(handler=cmd_bench_serve)

    from bench import freshness as bench_freshness

    f = bsub.add_parser("freshness", help="advertiser change -> ad server lag, index builder throughput, "
                                          "snapshot boot (needs `adserve up`)",
                        description=bench_freshness.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    f.add_argument("--ads", type=int, default=100_000, help="ads loaded through the real path (default 100,000; 0 skips part 1)")
    f.add_argument("--changes", type=int, default=1_000, help="random changes (default 1,000)")
    f.add_argument("--rate", type=float, default=50.0, help="changes committed per second (default 50)")
    f.add_argument("--snapshot-ads", type=int, default=1_000_000, help="ads in the snapshot boot test "
                                                                        "(default 1,000,000; 0 skips it)")
    f.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    f.set_defaults(handler=cmd_bench_freshness)

    from bench import pacing as bench_pacing

    g = bsub.add_parser("pacing", help="spend items/s through the budget job, controller steps/s (needs `adserve up`)",
                        description=bench_pacing.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("--items", type=int, default=4_000_000, help="spend reports through the job (default 4,000,000)")
    g.add_argument("--servers", type=int, default=200, help="reporting servers (default 200)")
    g.add_argument("--campaigns", type=int, default=2_000, help="campaigns reported on (default 2,000)")
    g.add_argument("--controller-campaigns", type=int, default=100_000,
                   help="campaigns in the controller part (default 100,000)")
    g.add_argument("--checkpoint-interval-ms", type=int, default=bench_pacing.CHECKPOINT_MS,
                   help=f"the job's checkpoint interval (default {bench_pacing.CHECKPOINT_MS}, the job's own)")
    g.add_argument("--json", action="store_true", help="print one JSON object of the figures")
    g.set_defaults(handler=cmd_bench_pacing)

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


def cmd_bench_model(args: argparse.Namespace) -> int:
    import json

    from bench import model as bench_model
    from core.errors import AdserveError

    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    threads = [int(x) for x in args.concurrency.split(",") if x.strip()]
    clients = [] if args.no_service else [int(x) for x in args.service_clients.split(",") if x.strip()]
    try:
        figures = bench_model.run(model_dir=args.model, ad_features_dir=args.ad_features, requests=args.requests,
                                  candidates=args.candidates, slots=args.slots, concurrency=threads,
                                  service_clients=clients, max_wait_ms=args.max_wait_ms, log=log)
    except (AdserveError, ValueError, RuntimeError) as exc:
        print(f"adserve bench model: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(figures) if args.json else bench_model.render(figures))
    return 0


def cmd_bench_billing(args: argparse.Namespace) -> int:
    import json

    from bench import billing as bench_billing

    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    figures = bench_billing.run(events=args.events, campaigns=args.campaigns, latency_rate=args.latency_rate,
                                latency_s=args.latency_s, recount=not args.no_recount,
                                checkpoint_ms=args.checkpoint_interval_ms,
                                compare_full_snapshots=args.compare_full_snapshots, log=log)
    print(json.dumps(figures) if args.json else bench_billing.render(figures))
    return 0


def cmd_bench_pacing(args: argparse.Namespace) -> int:
    import json

    from bench import pacing as bench_pacing

    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    figures = bench_pacing.run(items=args.items, servers=args.servers, campaigns=args.campaigns,
                               controller_campaigns=args.controller_campaigns,
                               checkpoint_ms=args.checkpoint_interval_ms, log=log)
    print(json.dumps(figures) if args.json else bench_pacing.render(figures))
    return 0


def cmd_bench_freshness(args: argparse.Namespace) -> int:
    import json

    from bench import freshness as bench_freshness

    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    figures = bench_freshness.run(ads=args.ads, changes=args.changes, rate=args.rate,
                                  snapshot_ads=args.snapshot_ads, log=log)
    print(json.dumps(figures) if args.json else bench_freshness.render(figures))
    return 0


def cmd_bench_serve(args: argparse.Namespace) -> int:
    import json

    from bench import serve as bench_serve

    sizes = [int(x.replace("_", "")) for x in args.ads.split(",") if x.strip()]
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else print
    figures = bench_serve.run(sizes, duration=args.duration, log=log)
    print(json.dumps(figures) if args.json else bench_serve.render(figures))
    return 0


def cmd_bench_decision(args: argparse.Namespace) -> int:
    import json

    from bench import decision as bench_decision

    sizes = [int(x.replace("_", "")) for x in args.ads.split(",") if x.strip()]
    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    figures = bench_decision.run(sizes, requests=args.requests, log=log)
    print(json.dumps(figures) if args.json else bench_decision.render(figures))
    return 0


def cmd_bench_platform(args: argparse.Namespace) -> int:
    import json

    from bench import platform as bench

    log = (lambda line: print(line, file=sys.stderr)) if args.json else print
    figures = bench.run(events=args.events, cold_start=not args.no_cold_start, log=log)
    print(json.dumps(figures) if args.json else bench.render(figures))
    return 0


# main job -----------------------------------------------------------------------

def _register_demo(sub) -> None:
    from sim import event_counts_demo as demo

    p = sub.add_parser("demo", help="the main job: platform + simulated traffic through the real jobs, with a report",
                       description=demo.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=50_000, help="simulated ad events (default 50,000)")
    p.add_argument("--corrupt", type=int, default=5, help="corrupt records mixed in (default 5)")
    p.add_argument("--seed", type=int, default=7, help="random seed of the simulation")
    p.add_argument("--requests", type=int, default=3_000,
                   help="simulated ad requests through the ad server and tracker (default 3,000; 0 skips serving)")
    p.add_argument("--down", action="store_true", help="stop the platform at the end (default: leave it up)")
    p.set_defaults(handler=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    from sim import event_counts_demo as demo
    from infra.platform import control

    settings = PlatformSettings.from_env()
    try:
        report = demo.run(settings, events=args.events, corrupt=args.corrupt, seed=args.seed,
                          requests=args.requests)
        print(report.render())
    finally:
        if args.down:
            control.down(settings)
    if not args.down:
        print(f"the platform is still up: Flink UI {settings.flink_rest_url}; stop it with `adserve down`")
    return 0 if report.agrees else 1


# jobs -------------------------------------------------------------------------

def _register_jobs(sub) -> None:
    from jobs.deploy import JOBS

    jobs = sub.add_parser("jobs", help="deploy, list and cancel the streaming jobs on a Flink cluster",
                          description="The Flink jobs: " + "; ".join(f"{j.name}: {j.summary}" for j in JOBS.values()))
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    p = jsub.add_parser("deploy", help="submit a job with `flink run` (detached)",
                        description="Submit a job to a Flink session cluster with `flink run`, as on any cluster. "
                                    "Defaults target the local platform; for your own cluster pass --jobmanager, "
                                    "--python and the job's flags after `--` (e.g. -- --bootstrap kafka:9092).")
    p.add_argument("name", choices=sorted(JOBS))
    p.add_argument("--jobmanager", help="REST address host:port of the cluster (default: the local platform's)")
    p.add_argument("--python", default=sys.executable,
                   help="Python interpreter on the TaskManagers with this project's requirements (default: this one)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted, without waiting for RUNNING")
    p.add_argument("job_args", nargs=argparse.REMAINDER,
                   help="arguments for the job itself, after `--` (see python -m jobs.NAME --help)")
    p.set_defaults(handler=cmd_jobs_deploy)

    p = jsub.add_parser("list", help="show the jobs on the cluster and their state",
                        description="List the jobs of a Flink cluster over its REST API.")
    p.add_argument("--jobmanager", help="REST address host:port (default: the local platform's)")
    p.add_argument("--all", action="store_true", help="include finished, failed and cancelled jobs")
    p.set_defaults(handler=cmd_jobs_list)

    p = jsub.add_parser("cancel", help="stop a job (with a savepoint) by id or name",
                        description="Stop a running job gracefully with a savepoint (every running job of that name "
                                    "when a name is given); --hard cancels at once without one.")
    p.add_argument("job", help="a Flink job id, or a job name such as event_counts")
    p.add_argument("--hard", action="store_true",
                   help="cancel without a savepoint (can kill the TaskManager of a Python job in PyFlink 2.2)")
    p.add_argument("--jobmanager", help="REST address host:port (default: the local platform's)")
    p.set_defaults(handler=cmd_jobs_cancel)


def _rest_url(args: argparse.Namespace, settings: PlatformSettings) -> str:
    return f"http://{args.jobmanager}" if args.jobmanager else settings.flink_rest_url


def cmd_jobs_deploy(args: argparse.Namespace) -> int:
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink, pyflink_home
    from jobs import deploy

    settings = PlatformSettings.from_env()
    job_args = [a for a in args.job_args if a != "--"]
    if "--bootstrap" not in job_args:
        job_args += ["--bootstrap", settings.kafka_bootstrap]
    if "--connector-jar" not in job_args:
        job_args += ["--connector-jar", str(flink_connector_jar(settings))]
    local_conf = Flink(settings).conf_dir
    conf_dir = local_conf if local_conf.exists() and not args.jobmanager else pyflink_home() / "conf"
    jobmanager = args.jobmanager or f"{settings.host}:{settings.flink_rest_port}"
    print(f"submitting {args.name} to {jobmanager} with `flink run` ...")
    job_id = deploy.deploy(args.name, jobmanager=jobmanager, conf_dir=conf_dir, job_args=job_args,
                           python=args.python)
    print(f"submitted {args.name}: job id {job_id}")
    if not args.no_wait:
        waited = deploy.wait_running(f"http://{jobmanager}", job_id)
        print(f"{args.name} is RUNNING ({waited:.1f} s after submission)")
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from jobs import deploy

    jobs = deploy.list_jobs(_rest_url(args, PlatformSettings.from_env()))
    shown = [j for j in jobs if args.all or j.state not in ("FINISHED", "CANCELED", "FAILED")]
    if not shown:
        print("no jobs" + ("" if args.all else " running (--all shows ended ones)"))
    for j in shown:
        print(f"{j.job_id}  {j.state:<10} {j.duration_ms / 1000:>9.1f} s  {j.name}")
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from jobs import deploy

    rest = _rest_url(args, PlatformSettings.from_env())
    targets = [j for j in deploy.list_jobs(rest)
               if (j.job_id == args.job or j.name == args.job) and j.state not in ("FINISHED", "CANCELED", "FAILED")]
    if not targets:
        print(f"no running job matches {args.job!r}", file=sys.stderr)
        return 1
    for j in targets:
        if args.hard:
            deploy.cancel(rest, j.job_id)
            print(f"cancelled {j.name} ({j.job_id})")
        else:
            location = deploy.stop(rest, j.job_id)
            print(f"stopped {j.name} ({j.job_id}); savepoint {location}")
    return 0


# serve and users ----------------------------------------------------------------

def _register_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the ad server, the tracker, the advertiser API or the prediction service "
                                     "(HTTP)")
    ssub = p.add_subparsers(dest="service", required=True)
    a = ssub.add_parser("ads", help="POST /v1/ads on the decision engine",
                        description="The ad server: builds its index from serving.ads and serving.campaigns, "
                                    "follows budget.state and budget.leases, reads profiles and frequency records "
                                    "from Redis, writes ad.served and budget.spend. OpenAPI at /openapi.json.",
                        epilog=TOKEN_KEYS_HELP + " " + PORTS_HELP_SHORT)
    a.add_argument("--port", type=int, default=8080)
    a.add_argument("--server-id", default="adserver-1", help="tags spend reports and leases (default adserver-1)")
    a.add_argument("--tracker-url", default="http://127.0.0.1:8081", help="base of impression and click URLs")
    a.add_argument("--max-in-flight", type=int, default=64, help="requests in the handler before 503 (default 64)")
    a.add_argument("--geo-table", help="CSV of 'cidr,COUNTRY/Region/City' to locate requests by IP")
    a.add_argument("--snapshot-dir", help="boot from the newest snapshot here, then replay from its offsets "
                                          "(see `adserve snapshots write`)")
    scoring = a.add_mutually_exclusive_group()
    scoring.add_argument("--prediction-url", help="score candidates with the prediction service at this URL "
                                                  "(e.g. http://127.0.0.1:8090; `adserve serve prediction`); the "
                                                  "pre-ranker's scores when it does not answer within the model "
                                                  "budget. Default: the priors-only predictor")
    scoring.add_argument("--model", type=Path, help="score with this click model in process (models/click-vN; "
                                                    "needs --ad-features)")
    a.add_argument("--ad-features", type=Path, help="the ad-feature snapshot folder for --model or --prerank-model "
                                                    "(newest version)")
    a.add_argument("--prerank-model", type=Path,
                   help="with --prediction-url: the service's model directory, whose pre-ranker student "
                        "(prerank_student.npz) the ad server's pre-ranker ranks with, numpy only (needs "
                        "--ad-features); without it the pre-ranker uses its own features (docs/learning.md)")
    a.add_argument("--recall-share", type=float, default=0.0,
                   help="share of requests whose whole filtered candidate set the model scores after the response, "
                        "for the pre-ranker's recall (adserve_prerank_recall_* on /metrics; default 0; e.g. 0.005)")
    a.add_argument("--prerank-weights", type=Path,
                   help="the pre-ranker's weights (JSON by feature name, e.g. from `adserve learning-day "
                        "--fit-prerank`); default: its built-in weights")
    a.set_defaults(handler=cmd_serve_ads)
    r = ssub.add_parser("prediction", help="the prediction service: POST /v1/score on the click model, batched",
                        description="The click model behind HTTP with dynamic batching across concurrent requests: "
                                    "POST /v1/score, GET /healthz, /v1/model, /metrics (serving.model.service; "
                                    "docs/learning.md). --canary-model scores the share of requests whose request-id "
                                    "hash is below --canary-share; `adserve model canary-report` judges it.")
    r.add_argument("--model", type=Path, required=True, help="the model directory (models/click-vN)")
    r.add_argument("--ad-features", type=Path, required=True,
                   help="the ad-feature snapshot folder (the newest version is loaded, and re-checked every "
                        "--snapshot-refresh-s)")
    r.add_argument("--host", default="127.0.0.1")
    r.add_argument("--port", type=int, default=8090)
    r.add_argument("--canary-model", type=Path, help="a candidate model directory scored on --canary-share")
    r.add_argument("--canary-share", type=float, default=0.01,
                   help="share of requests the candidate scores (default 0.01; only with --canary-model)")
    r.add_argument("--max-wait-ms", type=float, default=1.0,
                   help="longest a request waits for companions in its batch (default 1 ms)")
    r.add_argument("--max-batch-rows", type=int, default=3_200,
                   help="input rows (candidates x positions) per scoring call (default 3,200)")
    r.add_argument("--snapshot-refresh-s", type=float, default=300.0,
                   help="seconds between checks for a newer ad-feature snapshot (default 300; 0: never)")
    r.set_defaults(handler=cmd_serve_prediction)
    t = ssub.add_parser("tracker", help="impression beacons and click redirects",
                        description="GET /v1/impression?t=TOKEN -> 204; GET /v1/click?t=TOKEN -> 302 to the signed "
                                    "landing URL; events to ad.events keyed by campaign.",
                        epilog=TOKEN_KEYS_HELP + " " + PORTS_HELP_SHORT)
    t.add_argument("--port", type=int, default=8081)
    t.set_defaults(handler=cmd_serve_tracker)
    v = ssub.add_parser("advertiser-api", help="the advertiser API (campaigns, ads, budgets, bids; API keys)",
                        description="REST API on the campaign store; OpenAPI at /openapi.json. Create a key with "
                                    "`adserve advertisers create NAME`.", epilog=PORTS_HELP_SHORT)
    v.add_argument("--port", type=int, default=8082)
    v.set_defaults(handler=cmd_serve_advertiser_api)

    u = sub.add_parser("users", help="user data in Redis")
    usub = u.add_subparsers(dest="action", required=True)
    d = usub.add_parser("delete", help="remove a user's profile and frequency record",
                        description="Deletes Redis keys user:{ID} and fc:{ID}.", epilog=PORTS_HELP_SHORT)
    d.add_argument("user_id")
    d.set_defaults(handler=cmd_users_delete)


PORTS_HELP_SHORT = "Platform ports come from ADSERVE_* variables (see `adserve up --help`)."


def cmd_serve_ads(args: argparse.Namespace) -> int:
    from core.errors import AdserveError
    from serving.adserver.app import ServerConfig
    from serving.adserver.main import run_ad_server
    from serving.adserver.request import GeoResolver

    s = PlatformSettings.from_env()
    from serving.decision.engine import EngineConfig
    from serving.decision.prerank import load_weights

    config = ServerConfig(server_id=args.server_id, tracker_url=args.tracker_url, max_in_flight=args.max_in_flight,
                          engine=EngineConfig(recall_sample_share=args.recall_share,
                                              prerank_weights=load_weights(args.prerank_weights)
                                              if args.prerank_weights else None))
    try:
        predictor = ads_predictor(args)
    except (ValueError, AdserveError) as exc:
        print(f"adserve serve ads: {exc}", file=sys.stderr)
        return 2
    run_ad_server(bootstrap=s.kafka_bootstrap, redis_host=s.host, redis_port=s.redis_port, keys=token_keys_from_env(),
                  config=config, port=args.port, geo=GeoResolver.from_csv(args.geo_table) if args.geo_table else None,
                  snapshot_dir=Path(args.snapshot_dir) if args.snapshot_dir else None, predictor=predictor)
    return 0


def ads_predictor(args: argparse.Namespace):
    """The ad server's predictor: the prediction service, the model in process, or None (the priors)."""
    if getattr(args, "prerank_model", None) and not args.prediction_url:
        raise ValueError("--prerank-model goes with --prediction-url (with --model the student comes from that "
                         "bundle)")
    if args.prediction_url:
        from serving.model.remote import RemotePredictor

        predictor = RemotePredictor(args.prediction_url)
        print(f"ad server: scoring with the prediction service at {predictor.url}", flush=True)
        if args.prerank_model:  # the service's model bundle: its student for the pre-ranker, numpy only
            if not args.ad_features:
                raise ValueError("--prerank-model needs --ad-features (the snapshot folder of its student's ads)")
            from serving.model.student import StudentAffinity, StudentConversionRates, WithStudent

            affinity = StudentAffinity.load(args.prerank_model, args.ad_features)
            if affinity is None:
                print(f"ad server: {args.prerank_model} has no pre-ranker student; the pre-ranker uses its own "
                      f"features", flush=True)
            else:
                rates = StudentConversionRates.load(args.prerank_model, args.ad_features)
                print(f"ad server: the pre-ranker ranks with {args.prerank_model.name}'s student (ad-feature "
                      f"snapshot v{affinity.table.version}); conversion bids at "
                      + ("its conversion student's pCVR" if rates is not None else "the constant pCVR prior"),
                      flush=True)
                return WithStudent(predictor, affinity, rates)
        return predictor
    if args.model:
        if not args.ad_features:
            raise ValueError("--model needs --ad-features (the snapshot folder the model scores against)")
        from serving.model.predictor import ModelPredictor

        predictor = ModelPredictor.load(args.model, args.ad_features)
        print(f"ad server: scoring with {predictor.model.version} in process (ad-feature snapshot "
              f"v{predictor.snapshot_version})", flush=True)
        return predictor
    return None


def cmd_serve_prediction(args: argparse.Namespace) -> int:
    from core.errors import AdserveError
    from serving.model.service import ServiceConfig, load_service, run_prediction_service

    config = ServiceConfig(max_wait_ms=args.max_wait_ms, max_batch_rows=args.max_batch_rows,
                           canary_share=args.canary_share if args.canary_model else 0.0,
                           snapshot_refresh_s=args.snapshot_refresh_s)
    try:
        service = load_service(args.model, args.ad_features, canary_model_dir=args.canary_model, config=config)
    except (ValueError, AdserveError) as exc:
        print(f"adserve serve prediction: {exc}", file=sys.stderr)
        return 2
    run_prediction_service(service, host=args.host, port=args.port, log=lambda line: print(line, flush=True))
    return 0


def cmd_serve_tracker(args: argparse.Namespace) -> int:
    import asyncio

    from serving.tracker import start_tracker

    s = PlatformSettings.from_env()

    async def main() -> None:
        runner, port, _, producer = await start_tracker(bootstrap=s.kafka_bootstrap, keys=token_keys_from_env(),
                                                        port=args.port)
        print(f"tracker on 127.0.0.1:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            producer.flush(5)

    asyncio.run(main())
    return 0


def cmd_serve_advertiser_api(args: argparse.Namespace) -> int:
    import asyncio

    from serving.advertiser.api import start_advertiser_api

    s = PlatformSettings.from_env()

    async def main() -> None:
        runner, port, store = await start_advertiser_api(s.postgres_dsn, port=args.port)
        print(f"advertiser API on 127.0.0.1:{port}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()
            await store.close()

    asyncio.run(main())
    return 0


def cmd_users_delete(args: argparse.Namespace) -> int:
    import asyncio

    from serving.frequency_store import UserStore

    s = PlatformSettings.from_env()

    async def main() -> int:
        store = UserStore(s.host, s.redis_port)
        try:
            return await store.delete_user(args.user_id)
        finally:
            await store.close()

    removed = asyncio.run(main())
    print(f"user {args.user_id}: {removed} key(s) removed (profile and frequency record)")
    return 0
