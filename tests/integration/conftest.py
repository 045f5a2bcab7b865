"""The real platform for integration tests, started through the project's own
`adserve up` machinery and stopped at the end of the session (unless it was
already running before the tests, or ADSERVE_KEEP_PLATFORM=1)."""
from __future__ import annotations

import os
import uuid

import pytest

from infra.platform import PlatformSettings, control
from infra.platform.topics import TopicSpec, ensure_topics


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def platform() -> PlatformSettings:
    settings = PlatformSettings.from_env()
    was_running = all(row.state == "running" for row in control.status(settings))
    control.up(settings, log=lambda line: print(f"[platform] {line}"))
    yield settings
    if not was_running and os.environ.get("ADSERVE_KEEP_PLATFORM") != "1":
        control.down(settings, log=lambda line: print(f"[platform] {line}"))


@pytest.fixture
def fresh_topics(platform):
    """Create uniquely named topics for one test: fresh_topics("in", "out", partitions=1)."""

    def make(*names: str, partitions: int = 1) -> list[str]:
        suffix = uuid.uuid4().hex[:8]
        specs = tuple(TopicSpec(f"test.{n}.{suffix}", key="test", schema="", partitions=partitions) for n in names)
        ensure_topics(platform.kafka_bootstrap, specs)
        return [s.name for s in specs]

    return make


@pytest.fixture(scope="module")
def snapshot_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("index-builder-snapshots")


@pytest.fixture(scope="module")
def index_builder(platform, snapshot_folder):
    """The index builder deployed to the platform's Flink cluster for one test module (stopped after it, so the
    cluster's slots are free again for the next), with the snapshot writer process beside it cutting a
    snapshot every 3 s into snapshot_folder."""
    import subprocess
    import sys

    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    job_id = deploy.deploy("index_builder", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--bootstrap", platform.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(platform)),
                                     "--group-id", f"adserve-index-builder-test-{uuid.uuid4().hex[:6]}",
                                     "--checkpoint-interval-ms", "1000"])
    writer = subprocess.Popen([sys.executable, "-m", "serving.snapshots", "--bootstrap", platform.kafka_bootstrap,
                               "--dir", str(snapshot_folder), "--every-s", "3"])
    deploy.wait_running(platform.flink_rest_url, job_id)
    yield job_id
    writer.terminate()
    writer.wait(timeout=60)
    deploy.stop(platform.flink_rest_url, job_id)
