"""Running the ad server: Kafka, Redis, the topic follower, the spend reporter and the HTTP listener.

`adserve serve ads` calls `serve` with its AdServerSettings; tests call `start_ad_server` and get a handle to
stop it."""
from __future__ import annotations

import asyncio
import logging
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

from schemas import topics
from serving.adserver.app import AdServer, RequestPathParts, ServerConfig
from serving.adserver.learned import RegistryFollower
from serving.adserver.offloop import ServedLog, SpendReporter
from serving.adserver.request import GeoResolver
from serving.adserver.settings import AdServerSettings
from serving.adserver.state import ServingState, TopicFollower
from serving.drain import DRAIN_DELAY_S, begin_drain, close_listener
from serving.decision.engine import DecisionEngine
from serving.decision.prediction import Predictor
from serving.snapshots import latest_snapshot, read_snapshot
from serving.frequency_store import UserStore
from serving.scrape_targets import announce
from streams import kafka

LOG = logging.getLogger("adserve.adserver")
SPEND_INTERVAL_S = 1.0
COMMIT_LAG_READY_S = 60.0
IN_FLIGHT_TIMEOUT_S = 10.0  # how long requests in flight may take to finish once the listener is closed


@dataclass
class RunningAdServer:
    server: AdServer
    follower: TopicFollower
    reporter: SpendReporter
    runner: web.AppRunner
    port: int
    tasks: list[asyncio.Task]
    served_log: ServedLog
    boot: dict[str, Any] = field(default_factory=dict)  # snapshot loaded, records, seconds
    registry: RegistryFollower | None = None  # the model registry's follower (None: scoring fixed at start)

    async def stop(self) -> None:
        """Stop at once: the drain without its delay."""
        await self.drain(0.0)

    async def drain(self, delay_s: float = DRAIN_DELAY_S) -> None:
        """The drain on SIGTERM, in order: /ready answers 503 at once (and answers close their connections);
        requests are still served for `delay_s`, while the load balancer takes the server out of rotation;
        then the listener closes, the requests in flight finish (at most IN_FLIGHT_TIMEOUT_S) with their
        post-response work, the last spend report is sent and acknowledged, the served log flushed, and the
        budget slices dropped. The last report names each slice's final spend and hands the slices back
        (`released`), so the budget job gives their unspent part back to their campaigns at once. Nothing is
        served after the last spend report is cut."""
        await begin_drain(self.runner.app, delay_s)
        await close_listener(self.runner)
        await self.runner.cleanup()
        await self.server.drain()
        for task in self.tasks:
            task.cancel()
        self.follower.stop()
        if self.follower.is_alive():
            self.follower.join(10)
        if self.registry is not None:
            self.registry.stop()
        self.reporter.flush()
        now_ms = int(time.time() * 1000)
        self.server.spend.release(self.server.state.lease_ids(now_ms), now_ms)
        self.reporter.tick(now_ms)
        reported = self.reporter.flush()
        self.reporter.close()
        self.served_log.close()
        released = self.server.state.release_leases()
        await self.server.store.close()
        LOG.info("drained: last spend report %s, %d budget slices released%s",
                 "acknowledged" if reported else "NOT acknowledged", len(released),
                 "" if reported else " (the budget job counts them as spent until billing settles them)")


@dataclass(frozen=True)
class AdServerDependencies:
    """What an ad server is handed rather than built from its settings; each one left None is built.

    `state`: a serving state to serve. A worker of a tier passes the one its parent loaded from a snapshot, with
    that snapshot's `start_offsets`: it follows the topics from there without loading anything itself; with
    follow=False a prepared state is served as is (benchmarks load synthetic ads that way). `predictor` scores
    the pre-ranked candidates (serving.model.remote.RemotePredictor: the prediction service; ModelPredictor: the
    model in process; default the priors) unless a whole `engine` is given. `geo`: default from the settings'
    geo table. `producer_overrides`: Kafka producer options over the defaults."""

    state: ServingState | None = None
    start_offsets: dict[str, dict[int, int]] | None = None
    predictor: Predictor | None = None
    engine: DecisionEngine | None = None
    geo: GeoResolver | None = None
    producer_overrides: dict[str, Any] | None = None


async def start_ad_server(settings: AdServerSettings, dependencies: AdServerDependencies | None = None, *,
                          config: ServerConfig | None = None, follow: bool = True, wait_ready_s: float = 60.0,
                          registry: str | None = None, registry_topic: str = topics.MODEL_REGISTRY,
                          reuse_port: bool = False) -> RunningAdServer:
    """Start the ad server its settings describe, with `config` in place of settings.server_config() when given.
    With the settings' snapshot folder, the newest snapshot there is loaded first and the topics are replayed
    from its offsets. `follow=False` serves the dependencies' state as is, ready at once, without reading the
    state topics. `registry` follows the model registry (serving.adserver.learned): "models" swaps the model and
    the feature snapshot it names, "features" only the snapshot's learned columns (the model is the prediction
    service's); None scores with what was given at start. The settings' audience salt turns custom-audience
    matching on (core.audiences). `reuse_port` binds with SO_REUSEPORT, so the workers of a tier share one port
    and the kernel spreads connections over them."""
    dependencies = dependencies or AdServerDependencies()
    bootstrap, host, port = settings.kafka_bootstrap, settings.host, settings.port
    producer_overrides, engine = dependencies.producer_overrides, dependencies.engine
    boot_began = time.monotonic()
    config = config or settings.server_config()
    loop = asyncio.get_running_loop()
    state = dependencies.state or ServingState(config.server_id)
    state.serve_as(config.server_id)
    start_offsets = dependencies.start_offsets
    if start_offsets is None:
        start_offsets, boot = _load_snapshot(state, settings.snapshot_dir if follow else None)
    else:
        boot = {"snapshot": "loaded by the tier's parent", "snapshot_records": 0, "snapshot_load_s": 0.0}
    if engine is None and dependencies.predictor is not None:  # on the index as loaded: updated in place later
        engine = DecisionEngine(state.index, state.campaigns, dependencies.predictor, config=config.engine,
                                reserves=state.reserves)
    geo = dependencies.geo or (GeoResolver.from_csv(str(settings.geo_table)) if settings.geo_table else None)
    served_log = ServedLog(kafka.producer(bootstrap, **{"linger.ms": 20, **(producer_overrides or {})}))

    def deliver(batch) -> None:
        def apply() -> None:
            now_ms = int(time.time() * 1000)
            for topic, record, _ in batch:
                state.apply(topic, record, now_ms)
        loop.call_soon_threadsafe(apply)

    follower = TopicFollower(bootstrap, deliver, start_offsets=start_offsets)

    def ready() -> bool:
        # a follower that stopped on an error leaves the state to go stale (a pause never arrives): never ready
        return follower.error is None and (
            follower.ready() or (follower.loaded.is_set() and state.commit_lag_s <= COMMIT_LAG_READY_S))

    store = UserStore(settings.redis_host, settings.redis_port, read_timeout_s=config.user_read_timeout_ms / 1000)
    server = AdServer(config, state, store, settings.token_keys, served_log=served_log,
                      ready=ready if follow else lambda: True, lag_s=follower.lag_s if follow else lambda: 0.0,
                      parts=RequestPathParts(geo=geo, engine=engine, audience_salt=settings.audience_salt))
    reporter = SpendReporter(server.spend, bootstrap, state.lease_ids, producer_overrides)
    if follow:
        follower.start()
    registry_follower = None
    if registry is not None:
        registry_follower = RegistryFollower(
            bootstrap, lambda scoring: loop.call_soon_threadsafe(server.install_scoring, scoring),
            models=registry == "models", topic=registry_topic)
        registry_follower.start()
    served_log.on_error = lambda what: server.metrics.after_errors.labels(what).inc()
    tasks = [loop.create_task(_every_second(reporter, state, server))]
    runner = web.AppRunner(server.app(), access_log=None, shutdown_timeout=IN_FLIGHT_TIMEOUT_S)
    target = announce(runner.app, "adserver")
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=256, reuse_port=reuse_port or None)
    await site.start()
    bound = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    target.publish(host, bound)
    if follow:
        await _wait_caught_up(follower, wait_ready_s)
    LOG.info("ad server %s on %s:%d, %d ads, ready=%s", config.server_id, host, bound, len(state.index),
             server.is_ready())
    boot["ready_s"] = time.monotonic() - boot_began  # snapshot load + catching up with the topics
    return RunningAdServer(server, follower, reporter, runner, bound, tasks, served_log, boot, registry_follower)


def _load_snapshot(state: ServingState, snapshot_dir: Path | None) -> tuple[Any, dict[str, Any]]:
    """(start offsets, boot figures): the newest snapshot in `snapshot_dir` loaded into `state`, or nothing."""
    boot: dict[str, Any] = {"snapshot": None, "snapshot_records": 0, "snapshot_load_s": 0.0}
    snapshot = latest_snapshot(snapshot_dir) if snapshot_dir is not None else None
    if snapshot is None:
        return None, boot
    began = time.monotonic()
    start_offsets, records = read_snapshot(snapshot)
    boot["snapshot_records"] = state.load_snapshot(records, int(time.time() * 1000))
    boot.update(snapshot=str(snapshot), snapshot_load_s=time.monotonic() - began)
    LOG.info("loaded snapshot %s: %d records in %.1f s", snapshot, boot["snapshot_records"],
             boot["snapshot_load_s"])
    return start_offsets, boot


async def _every_second(reporter: SpendReporter, state: ServingState, server: AdServer) -> None:
    """The server's periodic work: spend reports, lease expiry, budget silence, the just-served sweep."""
    while True:
        await asyncio.sleep(SPEND_INTERVAL_S)
        now_ms = int(time.time() * 1000)
        try:
            reporter.tick(now_ms)
            state.expire_leases(now_ms)
            state.check_budget_silence(now_ms)
            server.just_served.sweep(now_ms)
        except Exception:  # noqa: BLE001 - keep reporting; the failure is logged
            LOG.exception("periodic work failed")


async def _wait_caught_up(follower: TopicFollower, wait_ready_s: float) -> None:
    """Until the follower has caught up with the state topics, at most `wait_ready_s`; its error is raised."""
    began = time.monotonic()
    while not follower.ready() and time.monotonic() - began < wait_ready_s:
        if follower.error is not None:
            raise follower.error
        await asyncio.sleep(0.05)


def serve(settings: AdServerSettings, dependencies: AdServerDependencies | None = None, *,
          log: Callable[[str], None] = print, registry: str | None = None,
          registry_topic: str = topics.MODEL_REGISTRY, reuse_port: bool = False,
          drain_delay_s: float = DRAIN_DELAY_S) -> None:
    """One ad server (`adserve serve ads --workers 0`, or one worker of a tier, whose dependencies carry the
    `state` its parent loaded and the snapshot's `start_offsets`): the settings printed once (secrets masked),
    then the server until interrupted or terminated, then its drain (RunningAdServer.drain)."""
    log(f"ad server settings: {settings.describe()}")
    run_ad_server(settings, dependencies, drain_delay_s=drain_delay_s, registry=registry,
                  registry_topic=registry_topic, reuse_port=reuse_port)


def load_for_tier(settings: AdServerSettings) -> tuple[ServingState, dict[str, dict[int, int]] | None]:
    """What a tier's parent loads before it forks: the newest snapshot in --snapshot-dir and its offsets, or an
    empty state and None (each worker then reads the topics from the beginning into memory of its own)."""
    state = ServingState(settings.server_id)
    start_offsets, _ = _load_snapshot(state, settings.snapshot_dir)
    return state, start_offsets


def run_ad_server(settings: AdServerSettings, dependencies: AdServerDependencies | None, *,
                  drain_delay_s: float = DRAIN_DELAY_S, **options: Any) -> None:
    """An ad server (start_ad_server with these options) until interrupted or terminated (SIGINT, SIGTERM);
    either drains it (RunningAdServer.drain: /ready 503, `drain_delay_s` more of serving, the listener closed,
    the requests in flight answered, the last spend reported, the served log flushed, the slices released) and
    returns."""
    async def main() -> None:
        running = await start_ad_server(settings, dependencies, **options)
        stopped = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            asyncio.get_running_loop().add_signal_handler(sig, stopped.set)
        try:
            await stopped.wait()
        finally:
            await running.drain(drain_delay_s)
    asyncio.run(main())
