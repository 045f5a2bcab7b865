"""Prometheus on the platform: servers started in this process announce themselves in the targets folder and
Prometheus scrapes them, beside the Flink JobManager's and TaskManager's reporters; the generated configuration
passes `promtool check config`."""
from __future__ import annotations

import asyncio
import json
import subprocess
import urllib.request


from infra.platform.errors import PlatformError
from infra.platform.process import wait_until
from infra.platform.services import Prometheus
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


def test_prometheus_scrapes_every_server_of_the_platform_and_the_flink_cluster(platform, monkeypatch):
    monkeypatch.setenv(TARGETS_DIR_ENV, str(platform.prometheus_targets_dir))
    model, snapshot = tiny_model("click-prometheus-1")
    host = platform.host

    async def scenario():
        async with Services(platform) as services:
            with ServiceThread(PredictionService(ModelPredictor(model, snapshot))) as prediction:
                wanted = {
                    ("adserver", f"127.0.0.1:{services.server.port}"): "up",
                    ("tracker", f"127.0.0.1:{services.tracker_runner.addresses[0][1]}"): "up",
                    ("prediction", f"127.0.0.1:{prediction._running.port}"): "up",
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


def test_servers_withdraw_their_target_files_when_they_stop(platform, monkeypatch):
    monkeypatch.setenv(TARGETS_DIR_ENV, str(platform.prometheus_targets_dir))

    async def scenario() -> set[str]:
        async with Services(platform) as services:
            ports = {str(services.server.port), str(services.tracker_runner.addresses[0][1])}
            named = {p.name for p in platform.prometheus_targets_dir.glob("*.json") if p.name.split("-")[1] in ports}
            assert len(named) == 2, f"expected the ad server's and the tracker's files, found {named}"
        return named

    named = asyncio.run(scenario())
    assert not any((platform.prometheus_targets_dir / name).exists() for name in named)


def test_the_running_configuration_passes_promtool(platform):
    done = subprocess.run(["promtool", "check", "config", str(Prometheus(platform).config_path)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
