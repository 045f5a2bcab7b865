"""`adserve serve ads|prediction|tracker|advertiser-api|dashboard`: the HTTP services of serving/ started with
their typed settings (flags over the platform's ADSERVE_* variables), each printed once at start with its
secrets masked; a tier of ad servers (--workers N) runs through infra.adserver_tier."""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from infra.platform import PlatformSettings
from infra.platform.environ import platform_environ
from schemas import topics
from serving.adserver.settings import TOKEN_KEYS_HELP, add_development_argument

PORTS_HELP_SHORT = "Platform ports come from ADSERVE_* variables (see `adserve up --help`)."
DRAIN_HELP = ("on SIGTERM, seconds GET /ready answers 503 while requests are still served, before the listener "
              "closes (for the load balancer to drop this instance; default 5); then the requests in flight finish "
              "and the service closes cleanly")
HOST_HELP = "address to listen on (default 127.0.0.1; 0.0.0.0 in a container behind a Kubernetes Service)"


def check_endpoints(kind: str, *, kafka: bool = False, redis: bool = False, postgres: bool = False) -> None:
    """The endpoints printed (secrets masked), then the start-up checks of those a server uses
    (streams.endpoints.check): a broker, Redis or PostgreSQL that does not answer, or refuses the certificate or
    the credentials, stops it here, named."""
    from core.settings import describe
    from streams import endpoints as process

    endpoints = process.process_endpoints()
    print(f"{kind} endpoints: {describe(endpoints)}", flush=True)  # secrets masked
    process.check(endpoints, kafka=kafka, redis=redis, postgres=postgres)


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the ad server, the tracker, the advertiser API or the prediction service "
                                     "(HTTP)")
    ssub = p.add_subparsers(dest="service", required=True)
    _add_ads(ssub)
    _add_prediction(ssub)
    _add_tracker(ssub)
    _add_advertiser_api(ssub)
    _add_dashboard(ssub)


def _add_ads(ssub) -> None:
    a = ssub.add_parser("ads", aliases=["adserver"], help="POST /v1/ads on the decision engine",
                        description="The ad server: builds its index from serving.ads and serving.campaigns, "
                                    "follows budget.state and budget.leases, reads profiles and frequency records "
                                    "from Redis, writes ad.served and budget.spend. OpenAPI at /openapi.json.",
                        epilog=TOKEN_KEYS_HELP + " " + PORTS_HELP_SHORT)
    a.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    a.add_argument("--port", type=int, default=8080, help="the gateway's port; worker i listens on PORT+1+i "
                                                          "(with --reuse-port: every worker's port; with --workers "
                                                          "0: the server's own port; default 8080)")
    a.add_argument("--workers", "--processes", type=int, default=None,
                   help="ad-server processes sharing one copy of the index loaded from --snapshot-dir (default: "
                        "one per usable core: the CPU affinity mask, capped by the container's CPU limit); 0: a "
                        "single server process on --port")
    a.add_argument("--reuse-port", action="store_true",
                   help="every worker listens on --port itself (SO_REUSEPORT: the kernel spreads connections over "
                        "them) instead of behind the gateway (HAProxy, hashing users to workers); a supervisor "
                        "restarts a worker that dies (with backoff) and forwards SIGTERM to all. For a pod "
                        "behind a Kubernetes Service")
    a.add_argument("--drain-delay-s", type=float, default=5.0,
                   help="on SIGTERM, seconds /ready answers 503 while requests are still served, before the "
                        "listener closes (for the load balancer to take the server out; default 5); then the "
                        "requests in flight finish, the last spend is reported, the served log flushed and the "
                        "budget slices released")
    a.add_argument("--grace-s", type=float, default=25.0,
                   help="with --reuse-port: how long the supervisor waits for the workers to drain after SIGTERM "
                        "before killing them (default 25; keep it under the pod's terminationGracePeriodSeconds)")
    a.add_argument("--server-id", default="adserver-1", help="tags spend reports and leases; worker i of a tier "
                                                             "uses SERVER_ID-wI (default adserver-1)")
    a.add_argument("--tracker-url", default="http://127.0.0.1:8081", help="base of impression and click URLs")
    a.add_argument("--max-in-flight", type=int, default=64, help="requests in the handler before 503 (default 64)")
    a.add_argument("--geo-table", help="CSV of 'cidr,COUNTRY/Region/City' to locate requests by IP")
    a.add_argument("--snapshot-dir", help="boot from the newest snapshot here, then replay from its offsets "
                                          "(see `adserve snapshots write`)")
    scoring = a.add_mutually_exclusive_group()
    scoring.add_argument("--prediction-url", help="score candidates with the prediction service at this URL "
                                                  "(e.g. http://127.0.0.1:8090; `adserve serve prediction`); the "
                                                  "pre-ranker's scores when it does not answer within the model "
                                                  "budget; the ad server follows only the registry's feature "
                                                  "snapshot. Default: the model registry (topic model.registry): "
                                                  "the published model in process, swapped when a new one is "
                                                  "promoted; the priors until one is")
    scoring.add_argument("--model", type=Path, help="score with this click model in process (models/click-vN; "
                                                    "needs --ad-features), fixed: the registry is not followed")
    scoring.add_argument("--priors", action="store_true",
                         help="rank on priors only and do not follow the model registry")
    a.add_argument("--registry-topic", default=topics.MODEL_REGISTRY,
                   help="the model registry's topic (default model.registry; benchmarks use their own)")
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
    add_development_argument(a)
    a.set_defaults(handler=cmd_serve_ads)


def _add_prediction(ssub) -> None:
    r = ssub.add_parser("prediction", help="the prediction service: POST /v1/score on the click model, batched",
                        description="The click model behind HTTP with dynamic batching across concurrent requests: "
                                    "POST /v1/score, GET /healthz, /v1/model, /metrics (serving.model.service; "
                                    "docs/learning.md). --canary-model scores the share of requests whose request-id "
                                    "hash is below --canary-share; `adserve model canary-report` judges it.")
    r.add_argument("--model", type=Path, help="the model directory (models/click-vN); without it the service "
                                              "follows the model registry (topic model.registry): it starts with "
                                              "the published model and swaps to each one promoted or canaried")
    r.add_argument("--ad-features", type=Path,
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
    r.add_argument("--drain-delay-s", type=float, default=5.0, help=DRAIN_HELP)
    r.set_defaults(handler=cmd_serve_prediction)


def _add_tracker(ssub) -> None:
    t = ssub.add_parser("tracker", help="impression beacons and click redirects",
                        description="GET /v1/impression?t=TOKEN -> 204; GET /v1/click?t=TOKEN -> 302 to the signed "
                                    "landing URL; events to ad.events keyed by campaign.",
                        epilog=TOKEN_KEYS_HELP + " " + PORTS_HELP_SHORT)
    t.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    t.add_argument("--port", type=int, default=8081)
    t.add_argument("--spool-dir", help="the spool folder: every accepted beacon is kept there until Kafka "
                                       "acknowledges it, and sent again after a restart (default "
                                       "$ADSERVE_HOME/state/tracker-spool/port-PORT)")
    t.add_argument("--spool-max-bytes", type=int,
                   help="the spool's bound: past it beacons get 503 with Retry-After (default 268435456, 256 MiB)")
    t.add_argument("--spool-fsync-ms", type=int,
                   help="how often the spool is fsynced (default 200; 0: every beacon before its answer)")
    add_development_argument(t)
    t.add_argument("--drain-delay-s", type=float, default=5.0, help=DRAIN_HELP)
    t.set_defaults(handler=cmd_serve_tracker)


def _add_advertiser_api(ssub) -> None:
    v = ssub.add_parser("advertiser-api", help="the advertiser API (campaigns, ads, budgets, bids; API keys)",
                        description="REST API on the campaign store; OpenAPI at /openapi.json. Create a key with "
                                    "`adserve advertisers create NAME`.", epilog=PORTS_HELP_SHORT)
    v.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    v.add_argument("--port", type=int, default=8082)
    v.add_argument("--rate-per-s", type=float, help="requests a second each API key may make (default 20; "
                                                    "past it: 429 with Retry-After)")
    v.add_argument("--burst", type=int, help="requests an API key may make at once before --rate-per-s applies "
                                             "(default 40)")
    v.add_argument("--unauthenticated-rate-per-s", type=float,
                   help="requests a second a client address may make without a valid key (default 1)")
    v.add_argument("--unauthenticated-burst", type=int,
                   help="requests without a valid key a client address may make at once (default 20)")
    v.add_argument("--drain-delay-s", type=float, default=5.0, help=DRAIN_HELP)
    v.set_defaults(handler=cmd_serve_advertiser_api)


def _add_dashboard(ssub) -> None:
    d = ssub.add_parser("dashboard", help="the pacing dashboard: pacing API, fleet panels and the page",
                        description="Follows budget.state and serving.campaigns (compacted) into memory and serves "
                                    "GET /v1/pacing/campaigns (rows: state, p, spend against target, forecast, pace, "
                                    "why under-delivering; filter, sort, page), GET /v1/pacing/campaigns/ID (the row "
                                    "and its minute series from Redis pacing:ID), GET /v1/fleet (the fleet panels "
                                    "from Prometheus), the page on / (polls every 2 s), /openapi.json, /metrics, "
                                    "/ready. Rules: docs/dashboard.md.", epilog=PORTS_HELP_SHORT)
    d.add_argument("--host", default="127.0.0.1", help=HOST_HELP)
    d.add_argument("--port", type=int, default=8092, help="HTTP port (default 8092; 0: any free port)")
    d.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the platform's)")
    d.add_argument("--redis-url", help="Redis holding pacing:{campaign} (default: the platform's)")
    d.add_argument("--prometheus-url", help="Prometheus HTTP API the fleet panels query (default: the platform's; "
                                            "'' for none: /v1/fleet then answers no panels and says why)")
    d.add_argument("--state-topic", default=topics.BUDGET_STATE,
                   help=f"budget states to follow (default {topics.BUDGET_STATE}; a simulated day's own topic "
                        "to watch that day)")
    d.add_argument("--campaigns-topic", default=topics.SERVING_CAMPAIGNS,
                   help=f"campaign records to follow (default {topics.SERVING_CAMPAIGNS})")
    d.add_argument("--drain-delay-s", type=float, default=5.0, help=DRAIN_HELP)
    d.add_argument("--dev", action="store_true",
                   help="development mode: without ADSERVE_OPS_TOKEN, serve the API to anyone (also ADSERVE_DEV=1). "
                        "Otherwise the API takes the operators' token (ADSERVE_OPS_TOKEN) and, with "
                        "ADSERVE_POSTGRES_DSN, advertisers' API keys for their own campaigns")
    d.set_defaults(handler=cmd_serve_dashboard)


def cmd_serve_ads(args: argparse.Namespace) -> int:
    from core.errors import AdserveError
    from serving.adserver.main import AdServerDependencies, serve
    from serving.adserver.settings import AdServerSettings
    from serving.adserver.tier import usable_cpus

    if args.workers is None:
        args.workers = usable_cpus()
    try:
        settings = AdServerSettings.from_args(args, platform_environ("adserver"))
        check_endpoints("adserver", kafka=True, redis=True)
        predictor = ads_predictor(args) if args.workers == 0 else None  # a tier loads it in each worker
    except (ValueError, AdserveError) as exc:
        print(f"adserve serve ads: {exc}", file=sys.stderr)
        return 2
    if args.workers < 0:
        print(f"adserve serve ads: --workers must be 0 or more, got {args.workers}", file=sys.stderr)
        return 2
    if args.drain_delay_s < 0:
        print(f"adserve serve ads: --drain-delay-s must be 0 or more, got {args.drain_delay_s}", file=sys.stderr)
        return 2
    say = lambda line: print(line, flush=True)  # noqa: E731
    if args.workers == 0:
        serve(settings, AdServerDependencies(predictor=predictor), log=say, registry=registry_mode(args),
              registry_topic=args.registry_topic, drain_delay_s=args.drain_delay_s)
        return 0
    from infra.adserver_tier import TierSettings, serve_shared_port, serve_tier

    tier = TierSettings(args.workers, registry=registry_mode(args), registry_topic=args.registry_topic,
                        drain_delay_s=args.drain_delay_s, grace_s=args.grace_s)
    run = serve_shared_port if args.reuse_port else serve_tier
    return run(settings, tier, lambda: ads_predictor(args), say)


def registry_mode(args: argparse.Namespace) -> str | None:
    """What the ad server follows in the model registry: everything ("models") by default, only the feature
    snapshot ("features") beside a prediction service, nothing with a fixed --model or --priors."""
    if getattr(args, "model", None) or getattr(args, "priors", False):
        return None
    return "features" if getattr(args, "prediction_url", None) else "models"


def ads_predictor(args: argparse.Namespace):
    """The ad server's predictor: the prediction service, the model in process, or None (the priors)."""
    from core.errors import InvalidSettings

    if getattr(args, "prerank_model", None) and not args.prediction_url:
        raise InvalidSettings("--prerank-model goes with --prediction-url (with --model the student comes from that "
                         "bundle)")
    if args.prediction_url:
        from serving.model.remote import RemotePredictor

        predictor = RemotePredictor(args.prediction_url)
        print(f"ad server: scoring with the prediction service at {predictor.url}", flush=True)
        if args.prerank_model:  # the service's model bundle: its student for the pre-ranker, numpy only
            if not args.ad_features:
                raise InvalidSettings("--prerank-model needs --ad-features (the snapshot folder of its student's ads)")
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
            raise InvalidSettings("--model needs --ad-features (the snapshot folder the model scores against)")
        from serving.model.predictor import ModelPredictor

        predictor = ModelPredictor.load(args.model, args.ad_features)
        print(f"ad server: scoring with {predictor.model.version} in process (ad-feature snapshot "
              f"v{predictor.snapshot_version})", flush=True)
        return predictor
    return None


def cmd_serve_prediction(args: argparse.Namespace) -> int:
    from core.errors import AdserveError, InvalidSettings
    from serving.model.service import load_service, run_prediction_service
    from serving.model.settings import PredictionServiceSettings

    say = lambda line: print(line, flush=True)  # noqa: E731
    follow = None
    try:
        if args.model is None:
            from serving.model.service import service_from_registry
            from serving.model.settings import service_config

            if args.canary_model is not None:
                raise InvalidSettings("--canary-model goes with --model (the registry names its own canary)")
            bootstrap = platform_environ("prediction")["ADSERVE_KAFKA_BOOTSTRAP"]
            check_endpoints("prediction", kafka=True)
            service, follow = service_from_registry(bootstrap,
                                                    service_config(args), log=say)
            host, port = args.host, args.port
        else:
            if args.ad_features is None:
                raise InvalidSettings("--model needs --ad-features (the snapshot folder it scores against)")
            settings = PredictionServiceSettings.from_args(args)
            print(f"prediction service settings: {settings.describe()}", flush=True)
            service = load_service(settings.model_dir, settings.ad_features_dir,
                                   canary_model_dir=settings.canary_model_dir, config=settings.service)
            host, port = settings.host, settings.port
    except (ValueError, AdserveError) as exc:
        print(f"adserve serve prediction: {exc}", file=sys.stderr)
        return 2
    run_prediction_service(service, host=host, port=port, log=say, follow=follow, drain_delay_s=args.drain_delay_s)
    return 0


def cmd_serve_tracker(args: argparse.Namespace) -> int:
    from serving.drain import drain_and_close, until_terminated
    import asyncio

    from core.errors import AdserveError
    from serving.adserver.settings import TrackerSettings
    from serving.tracker import start_tracker

    try:
        settings = dataclasses.replace(TrackerSettings.from_args(args, platform_environ("tracker")), host=args.host)
        check_endpoints("tracker", kafka=True)
    except AdserveError as exc:
        print(f"adserve serve tracker: {exc}", file=sys.stderr)
        return 2
    print(f"tracker settings: {settings.describe()}", flush=True)

    async def main() -> None:
        runner, port, _, _ = await start_tracker(bootstrap=settings.kafka_bootstrap, keys=settings.token_keys,
                                                 host=settings.host, port=settings.port, spool=settings.spool,
                                                 trusted_proxies=settings.trusted_proxies)
        print(f"tracker on {settings.host}:{port}", flush=True)
        try:
            await until_terminated()
        finally:  # sends what it can for 10 s; the rest stays in the spool for the next start
            await drain_and_close(runner, args.drain_delay_s)

    try:
        asyncio.run(main())
    except AdserveError as exc:  # the spool folder is another tracker's
        print(f"adserve serve tracker: {exc}", file=sys.stderr)
        return 2
    return 0


def cmd_serve_advertiser_api(args: argparse.Namespace) -> int:
    from serving.drain import drain_and_close, until_terminated
    import asyncio

    from serving.advertiser.api import AdvertiserApiSettings, start_advertiser_api

    from core.errors import AdserveError

    try:
        settings = dataclasses.replace(AdvertiserApiSettings.from_args(args, platform_environ("advertiser_api")),
                                       host=args.host)
        check_endpoints("advertiser_api", postgres=True, redis=settings.audience_salt is not None)
    except AdserveError as exc:
        print(f"adserve serve advertiser-api: {exc}", file=sys.stderr)
        return 2
    print(f"advertiser API settings: {settings.describe()}", flush=True)

    async def main() -> None:
        runner, port, store = await start_advertiser_api(settings.postgres_dsn, host=settings.host,
                                                         port=settings.port,
                                                         audience_members=settings.audience_members(),
                                                         limits=settings.rate_limits(),
                                                         trusted_proxies=settings.trusted_proxies)
        print(f"advertiser API on {settings.host}:{port}", flush=True)
        try:
            await until_terminated()
        finally:
            await drain_and_close(runner, args.drain_delay_s)
            await store.close()

    asyncio.run(main())
    return 0


def cmd_serve_dashboard(args: argparse.Namespace) -> int:
    from serving.drain import drain_and_close, until_terminated
    import asyncio

    from serving.dashboard.app import DashboardSettings, start_dashboard

    from core.errors import AdserveError

    platform = PlatformSettings.from_env()
    try:
        environ = platform_environ("dashboard")
        check_endpoints("dashboard", kafka=not args.bootstrap, redis=not args.redis_url)
    except AdserveError as exc:
        print(f"adserve serve dashboard: {exc}", file=sys.stderr)
        return 2
    from streams.endpoints import process_endpoints

    from core.client_address import TRUSTED_PROXIES_ENV, parse_trusted_proxies
    from serving.adserver.settings import development_mode
    from serving.ops_auth import ops_token_from

    try:
        ops_token = ops_token_from(environ)
        trusted = parse_trusted_proxies(environ.get(TRUSTED_PROXIES_ENV))
    except AdserveError as exc:
        print(f"adserve serve dashboard: {exc}", file=sys.stderr)
        return 2
    if ops_token is None and not development_mode(environ, args.dev):
        print("adserve serve dashboard: ADSERVE_OPS_TOKEN is not set: the pacing API needs the operators' token "
              "(at least 16 characters); --dev (or ADSERVE_DEV=1) serves it to anyone", file=sys.stderr)
        return 2
    endpoints_redis_url = process_endpoints().redis.url
    settings = DashboardSettings(
        kafka_bootstrap=args.bootstrap or environ["ADSERVE_KAFKA_BOOTSTRAP"],
        redis_url=args.redis_url or endpoints_redis_url,
        prometheus_url=platform.prometheus_url if args.prometheus_url is None else (args.prometheus_url or None),
        state_topic=args.state_topic, campaigns_topic=args.campaigns_topic, host=args.host, port=args.port)
    print(f"dashboard settings: {settings.describe()}", flush=True)

    async def main() -> int:
        from serving.dashboard.auth import store_auth

        auth = None
        if ops_token is not None:
            try:
                auth = await store_auth(ops_token, environ.get("ADSERVE_POSTGRES_DSN", "").strip() or None,
                                        trusted_proxies=trusted)
            except Exception as exc:  # noqa: BLE001 - the campaign store (advertisers' keys) is unreachable
                print(f"adserve serve dashboard: cannot reach the campaign store for advertisers' keys: {exc}",
                      file=sys.stderr)
                return 2
        access = "bearer tokens (operators; advertisers for their own campaigns)" if auth else "open (development mode)"
        print(f"pacing API: {access}", flush=True)
        try:
            runner, port, _, _ = await start_dashboard(settings, auth=auth)
        except OSError as exc:  # the port is taken or not ours to bind
            print(f"adserve serve dashboard: cannot listen on {settings.host}:{settings.port}: {exc.strerror}",
                  file=sys.stderr)
            return 2
        print(f"pacing dashboard on http://{settings.host}:{port}/", flush=True)
        try:
            await until_terminated()
        finally:
            await drain_and_close(runner, args.drain_delay_s)
        return 0

    return asyncio.run(main())
