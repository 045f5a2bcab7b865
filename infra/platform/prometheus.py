"""The platform's Prometheus configuration, generated from the platform settings.

What it scrapes:
* `adserver`, `tracker`, `prediction`, `dashboard`: every such server that runs with ADSERVE_SCRAPE_TARGETS_DIR
  set, found through file-based discovery over `<kind>-*.json` in the settings' targets folder (each server writes its
  file at start and removes it at stop: serving.scrape_targets), so servers on any port are scraped.
* `flink`: the JobManager's and the TaskManager's Prometheus reporters on their ports from the settings.
* `prometheus`: itself.
It evaluates the alert rules of infra/prometheus/rules.yml.

`config` is pure (settings in, a dict out); `write_config` only writes it to the platform home."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from infra.platform.settings import REPO_ROOT, PlatformSettings
from serving.scrape_targets import KINDS

RULES_PATH = REPO_ROOT / "infra" / "prometheus" / "rules.yml"
SERVER_JOBS = KINDS  # one scrape job per kind of server
SCRAPE_INTERVAL = "5s"  # a local platform: short, so a new server is seen within seconds
EVALUATION_INTERVAL = "15s"
DISCOVERY_REFRESH = "5s"  # file discovery also watches the folder; this is the fallback re-read


def config(settings: PlatformSettings, rules_path: Path = RULES_PATH) -> dict[str, Any]:
    """prometheus.yml of this platform as a dict."""
    host = settings.host
    targets_dir = settings.prometheus_targets_dir
    scrape_configs: list[dict[str, Any]] = [
        {"job_name": "prometheus", "static_configs": [{"targets": [f"{host}:{settings.prometheus_port}"]}]},
    ]
    for job in SERVER_JOBS:
        scrape_configs.append({
            "job_name": job,
            "file_sd_configs": [{"files": [str(targets_dir / f"{job}-*.json")],
                                 "refresh_interval": DISCOVERY_REFRESH}],
        })
    scrape_configs.append({
        "job_name": "flink",
        "static_configs": [
            {"targets": [f"{host}:{settings.flink_jobmanager_metrics_port}"], "labels": {"component": "jobmanager"}},
            {"targets": [f"{host}:{settings.flink_taskmanager_metrics_port}"],
             "labels": {"component": "taskmanager"}},
        ],
    })
    scrape_configs.append({
        "job_name": "connect",  # the Kafka Connect worker's JMX exporter: the CDC connector's task states
        "static_configs": [{"targets": [f"{host}:{settings.connect_metrics_port}"]}],
    })
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(rules_path)],
        "scrape_configs": scrape_configs,
    }


def render(settings: PlatformSettings, rules_path: Path = RULES_PATH) -> str:
    return yaml.safe_dump(config(settings, rules_path), default_flow_style=False, sort_keys=False)


def write_config(settings: PlatformSettings, path: Path, rules_path: Path = RULES_PATH) -> Path:
    """Write the configuration to `path` and create the targets folder it watches."""
    path.parent.mkdir(parents=True, exist_ok=True)
    settings.prometheus_targets_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(render(settings, rules_path))
    return path
