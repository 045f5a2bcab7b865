"""Running an ad-server tier (`adserve serve ads --workers N`): the index loaded once in this parent process, N
forked workers (serving.adserver.tier), either behind the gateway (infra.gateway) on ports of their own or all
on one port (SO_REUSEPORT) under the tier's Supervisor.

It owns starting, watching and stopping the workers and the gateway. What one worker serves is
serving.adserver.main's; which predictor a worker scores with is its caller's (a factory each worker calls after
the fork). It never parses flags."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from schemas import topics
from serving.drain import DRAIN_DELAY_S

if TYPE_CHECKING:
    from serving.adserver.settings import AdServerSettings
    from serving.adserver.state import ServingState
    from serving.decision.prediction import Predictor

Log = Callable[[str], None]
PredictorFactory = Callable[[], "Predictor | None"]


@dataclass(frozen=True)
class TierSettings:
    """How the workers of a tier run, beside each one's AdServerSettings."""

    workers: int
    registry: str | None = "models"  # what the workers follow in the model registry (serve's `registry`)
    registry_topic: str = topics.MODEL_REGISTRY
    drain_delay_s: float = DRAIN_DELAY_S  # on one shared port: each worker's drain after SIGTERM
    grace_s: float = 25.0  # on one shared port: how long the supervisor waits for the workers to drain


def _load(settings: AdServerSettings, log: Log) -> tuple[ServingState, dict[str, dict[int, int]] | None]:
    from serving.adserver.main import load_for_tier

    state, start_offsets = load_for_tier(settings)
    if start_offsets is None:
        log("no snapshot in --snapshot-dir: each worker reads the state topics into an index of its own "
            "(`adserve snapshots write` makes one the workers share)")
    return state, start_offsets


def serve_shared_port(settings: AdServerSettings, tier: TierSettings, predictor: PredictorFactory, log: Log) -> int:
    """The index loaded once (from the newest snapshot, if any), the workers all listening on the settings' port
    (SO_REUSEPORT) under a supervisor that restarts one that dies and forwards SIGTERM; its exit status."""
    from serving.adserver.main import AdServerDependencies, serve
    from serving.adserver.tier import Supervisor, worker_server_id

    state, start_offsets = _load(settings, log)

    def run_worker(worker: int) -> None:
        worker_settings = dataclasses.replace(settings, server_id=worker_server_id(settings.server_id, worker))
        serve(worker_settings, AdServerDependencies(state, start_offsets, predictor()), log=log,
              registry=tier.registry, registry_topic=tier.registry_topic, reuse_port=True,
              drain_delay_s=tier.drain_delay_s)

    log(f"ad-server tier: {tier.workers} workers sharing {settings.host}:{settings.port} (SO_REUSEPORT)")
    return Supervisor(tier.workers, run_worker, grace_s=tier.grace_s, log=log).run()


def serve_tier(settings: AdServerSettings, tier: TierSettings, predictor: PredictorFactory, log: Log) -> int:
    """The index loaded once (from the newest snapshot, if any), the workers on the ports after the settings'
    port, and the gateway on that port in front of them, until interrupted or terminated; 1 when a worker
    exits on its own."""
    import signal
    import threading

    from infra.gateway import Backend, start_gateway
    from infra.platform import PlatformSettings
    from serving.adserver.main import AdServerDependencies, serve
    from serving.adserver.tier import fork_workers, worker_server_id

    state, start_offsets = _load(settings, log)
    ports = [settings.port + 1 + i for i in range(tier.workers)]

    def run_worker(worker: int) -> None:
        worker_settings = dataclasses.replace(settings, port=ports[worker],
                                              server_id=worker_server_id(settings.server_id, worker))
        serve(worker_settings, AdServerDependencies(state, start_offsets, predictor()), log=log,
              registry=tier.registry, registry_topic=tier.registry_topic,
              drain_delay_s=0.0)  # the gateway in front is stopped first: nothing is left to drain from it

    workers = fork_workers(tier.workers, run_worker)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    gateway = None
    try:
        gateway = start_gateway([Backend(settings.host, port, worker_server_id(settings.server_id, i))
                                 for i, port in enumerate(ports)], settings.port,
                                PlatformSettings.from_env().run_dir / f"gateway-{settings.port}", host=settings.host)
        log(f"gateway on {gateway.url} in front of {tier.workers} workers on ports {ports[0]}-{ports[-1]}")
        while not stop.wait(1.0):
            if len(workers.alive()) < tier.workers:
                log("an ad-server worker exited: stopping the tier")
                return 1
        return 0
    finally:
        if gateway is not None:
            gateway.stop()
        workers.stop()
