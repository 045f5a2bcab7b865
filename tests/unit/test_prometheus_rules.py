"""The alert rules (infra/prometheus/rules.yml), checked and unit-tested by promtool (a local binary, no server);
the generated Prometheus configuration; the servers' scrape-target files."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from core.errors import InvalidSettings
from core.monitoring import LIMITS
from infra.platform import prometheus
from infra.platform.settings import PlatformSettings
from serving.scrape_targets import KINDS, ScrapeTarget, target_document

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "infra" / "prometheus" / "rules.yml"
RULES_TEST = Path(__file__).resolve().parent / "prometheus" / "rules_test.yml"
FLINK_OPERATOR_PREFIX = "flink_taskmanager_job_task_operator_"
FLINK_BUILTIN = {"currentEmitEventTimeLag"}  # Flink's own source metric, not one of the jobs'

def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_the_rules_file_passes_promtool_check():
    done = promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_fire_on_a_miscalibrated_segment_and_stay_quiet_on_healthy_series():
    done = promtool("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_generated_configuration_passes_promtool_check(tmp_path):
    settings = PlatformSettings(home=tmp_path)
    path = prometheus.write_config(settings, tmp_path / "prometheus.yml")
    done = promtool("check", "config", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_configuration_discovers_each_server_kind_from_the_targets_folder_and_scrapes_both_flink_reporters():
    settings = PlatformSettings(home=Path("/srv/adserve"), flink_jobmanager_metrics_port=29249,
                                flink_taskmanager_metrics_port=29250)
    jobs = {job["job_name"]: job for job in prometheus.config(settings)["scrape_configs"]}
    for kind in KINDS:
        assert jobs[kind]["file_sd_configs"][0]["files"] == [str(settings.prometheus_targets_dir / f"{kind}-*.json")]
    flink = [target for group in jobs["flink"]["static_configs"] for target in group["targets"]]
    assert flink == ["127.0.0.1:29249", "127.0.0.1:29250"]
    assert prometheus.config(settings)["rule_files"] == [str(RULES)]


def _metric_names(expr: str) -> set[str]:
    return set(re.findall(r"\b((?:adserve|flink)_[A-Za-z0-9_]+)", expr))


def test_every_metric_the_rules_read_is_one_the_project_exports():
    rules = yaml.safe_load(RULES.read_text())
    names = {name for group in rules["groups"] for rule in group["rules"] for name in _metric_names(rule["expr"])}
    serving = "".join(p.read_text() for p in (ROOT / "serving").rglob("*.py"))
    jobs = "".join(p.read_text() for p in (ROOT / "jobs").rglob("*.py"))
    jobs += "".join(f'"campaigns_limited_by_{limit.lower()}_for_an_hour"' for limit in LIMITS)  # budget_pacing's gauges
    for name in sorted(names):
        if name.startswith("adserve_"):
            assert f'"{name}"' in serving, f"{name}: no server declares it"
        else:
            # key groups (placement, country, billing_type) come before the metric's own name
            leaf = name.removeprefix(FLINK_OPERATOR_PREFIX).rsplit("billing_type_", 1)[-1]
            assert leaf in FLINK_BUILTIN or f'"{leaf}"' in jobs, f"{name}: no job counts {leaf!r}"


def test_a_target_file_names_the_server_address_and_kind(tmp_path):
    target = ScrapeTarget("tracker", tmp_path)
    path = target.publish("0.0.0.0", 8081)
    assert path is not None and path.name.startswith("tracker-8081-") and path.suffix == ".json"
    assert json.loads(path.read_text()) == [{"targets": ["127.0.0.1:8081"], "labels": {"kind": "tracker"}}]
    target.withdraw()
    assert not path.exists()


def test_without_a_targets_folder_nothing_is_written(tmp_path):
    target = ScrapeTarget.from_env("adserver", {})
    assert target.publish("127.0.0.1", 8080) is None
    target.withdraw()


def test_an_unknown_server_kind_is_refused():
    with pytest.raises(InvalidSettings, match="kind"):
        target_document("gateway", "127.0.0.1", 80)


def test_the_files_of_servers_that_no_longer_run_are_removed(tmp_path):
    import os

    from serving.scrape_targets import remove_stale

    live = ScrapeTarget("adserver", tmp_path).publish("127.0.0.1", 8080)
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f"tracker-8081-{dead.pid}.json"
    stale.write_text(json.dumps(target_document("tracker", "127.0.0.1", 8081)))
    assert remove_stale(tmp_path) == [stale]
    assert live is not None and live.exists() and live.name.endswith(f"-{os.getpid()}.json")


def test_the_dashboard_announces_itself_as_a_dashboard_target_and_withdraws_at_cleanup(tmp_path, monkeypatch):
    import asyncio

    from serving.dashboard.app import DashboardSettings, start_dashboard
    from serving.scrape_targets import TARGETS_DIR_ENV

    monkeypatch.setenv(TARGETS_DIR_ENV, str(tmp_path))

    async def scenario() -> tuple[int, dict[str, object], list[Path]]:
        # nothing listens on port 9: the follower and the store only fail in the background, unread here
        runner, port, _, _ = await start_dashboard(DashboardSettings("127.0.0.1:9", "redis://127.0.0.1:9/0", port=0))
        announced = {p.name: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
        await runner.cleanup()
        return port, announced, sorted(tmp_path.glob("*.json"))

    port, announced, left = asyncio.run(scenario())
    assert [name.split("-")[:2] for name in announced] == [["dashboard", str(port)]]
    assert list(announced.values()) == [[{"targets": [f"127.0.0.1:{port}"], "labels": {"kind": "dashboard"}}]]
    assert left == []
    assert "dashboard" in prometheus.SERVER_JOBS
