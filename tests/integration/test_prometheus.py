"""Prometheus on the platform: servers started in this process (ad server, tracker, prediction service, pacing
dashboard) announce themselves in the targets folder and Prometheus scrapes them, beside the Flink JobManager's
and TaskManager's reporters; the generated configuration passes `promtool check config`."""
from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request
from contextlib import asynccontextmanager

from infra.platform.errors import PlatformError
from infra.platform.process import wait_until
from infra.platform.services import Prometheus
from serving.advertiser.api import start_advertiser_api
from serving.dashboard.app import DashboardSettings, start_dashboard
from serving.model.predictor import ModelPredictor
from serving.model.service import PredictionService, ServiceThread
from serving.scrape_targets import TARGETS_DIR_ENV
from tests.integration.test_ad_server import Services
from tests.tiny_model import tiny_model


def _targets(platform) -> list[dict]:
    with urllib.request.urlopen(f"{platform.prometheus_url}/api/v1/targets?state=active", timeout=5) as resp:
        return json.loads(resp.read().decode())["data"]["activeTargets"]


def _health(platform, wanted: dict[tuple[str, str], str]) -> dict[tuple[str, str], str]:
    """(job, instance) -> health ("up", "down", "unknown") of each wanted target; "absent" when not discovered."""
    seen = {(t["labels"]["job"], t["labels"]["instance"]): t["health"] for t in _targets(platform)}
    return {key: seen.get(key, "absent") for key in wanted}


@asynccontextmanager
async def dashboard(platform, fresh_topics):
    """The pacing dashboard on a test's own (empty) topics, any free port; yields its port."""
    state_topic, campaigns_topic = fresh_topics("prometheus-budget-state", "prometheus-campaigns")
    runner, port, _, _ = await start_dashboard(DashboardSettings(platform.kafka_bootstrap, platform.redis_url,
                                                                 state_topic=state_topic,
                                                                 campaigns_topic=campaigns_topic, port=0))
    try:
        yield port
    finally:
        await runner.cleanup()


@asynccontextmanager
async def advertiser_api(platform):
    """The advertiser API on the platform's PostgreSQL, any free port; yields its port."""
    runner, port, store = await start_advertiser_api(platform.postgres_dsn, port=0)
    try:
        yield port
    finally:
        await runner.cleanup()
        await store.close()


def test_prometheus_scrapes_every_server_of_the_platform_and_the_flink_cluster(platform, fresh_topics, monkeypatch):
    monkeypatch.setenv(TARGETS_DIR_ENV, str(platform.prometheus_targets_dir))
    model, snapshot = tiny_model("click-prometheus-1")
    host = platform.host

    async def scenario():
        async with Services(platform) as services, dashboard(platform, fresh_topics) as dashboard_port, \
                advertiser_api(platform) as advertiser_port:
            with ServiceThread(PredictionService(ModelPredictor(model, snapshot))) as prediction:
                wanted = {
                    ("adserver", f"127.0.0.1:{services.server.port}"): "up",
                    ("tracker", f"127.0.0.1:{services.tracker_runner.addresses[0][1]}"): "up",
                    ("prediction", f"127.0.0.1:{prediction._running.port}"): "up",
                    ("dashboard", f"127.0.0.1:{dashboard_port}"): "up",
                    ("advertiser", f"127.0.0.1:{advertiser_port}"): "up",
                    ("flink", f"{host}:{platform.flink_jobmanager_metrics_port}"): "up",
                    ("flink", f"{host}:{platform.flink_taskmanager_metrics_port}"): "up",
                }
                announced = sorted(p.name for p in platform.prometheus_targets_dir.glob("*.json"))
                last: dict = {}

                def all_up() -> bool:
                    last.update(_health(platform, wanted))
                    return last == wanted

                try:
                    await asyncio.to_thread(wait_until, all_up, timeout_s=90, interval_s=1.0,
                                            what="every target up in Prometheus")
                except PlatformError:
                    pass  # the assertion below names the targets that were not up
                return announced, dict(last)

    announced, health = asyncio.run(scenario())
    assert health and set(health.values()) == {"up"}, f"targets not up: {health}"
    assert any(name.startswith("adserver-") for name in announced)
    assert any(name.startswith("tracker-") for name in announced)
    assert any(name.startswith("prediction-") for name in announced)
    assert any(name.startswith("dashboard-") for name in announced)
    assert any(name.startswith("advertiser-") for name in announced)


def test_servers_withdraw_their_target_files_when_they_stop(platform, fresh_topics, monkeypatch):
    monkeypatch.setenv(TARGETS_DIR_ENV, str(platform.prometheus_targets_dir))

    async def scenario() -> set[str]:
        async with Services(platform) as services, dashboard(platform, fresh_topics) as dashboard_port:
            ports = {str(services.server.port), str(services.tracker_runner.addresses[0][1]), str(dashboard_port)}
            named = {p.name for p in platform.prometheus_targets_dir.glob("*.json") if p.name.split("-")[1] in ports}
            assert len(named) == 3, f"expected the ad server's, the tracker's and the dashboard's files, found {named}"
        return named

    named = asyncio.run(scenario())
    assert not any((platform.prometheus_targets_dir / name).exists() for name in named)


def test_the_running_configuration_passes_promtool(platform):
    done = subprocess.run(["promtool", "check", "config", str(Prometheus(platform).config_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
