"""The real platform for integration tests, started through the project's own
`adserve up` machinery and stopped at the end of the session (unless it was
already running before the tests, or ADSERVE_KEEP_PLATFORM=1)."""
from __future__ import annotations

import os
import uuid

import pytest

from infra.platform import PlatformSettings, control
from infra.platform.topics import TopicSpec, ensure_topics
from tests.integration.budget_toggles import ApiBudgetToggles


# Modules that use the index builder run one after another, where the first of them would, so that one
# deployment (a `flink run` and its start, ~15 s) serves them all; it is stopped once the last of them is done.
_INDEX_BUILDER_MODULES: set = set()


def pytest_collection_modifyitems(items):
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    _INDEX_BUILDER_MODULES.clear()
    _INDEX_BUILDER_MODULES.update(i.path for i in items if "index_builder" in getattr(i, "fixturenames", ()))
    if _INDEX_BUILDER_MODULES:
        first = next(k for k, i in enumerate(items) if i.path in _INDEX_BUILDER_MODULES)
        rest = [i for i in items if i.path not in _INDEX_BUILDER_MODULES]
        items[:] = rest[:first] + [i for i in items if i.path in _INDEX_BUILDER_MODULES] + rest[first:]


def pytest_runtest_teardown(item, nextitem):
    if _SHARED_INDEX_BUILDER.job_id is not None and (
            nextitem is None or nextitem.path not in _INDEX_BUILDER_MODULES):
        _SHARED_INDEX_BUILDER.stop()


def pytest_sessionfinish(session):
    _SHARED_INDEX_BUILDER.stop()  # a session cut short (a failure with -x, an interrupt) leaves no job behind


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


class SharedIndexBuilder:
    """The index builder on the platform's Flink cluster with the snapshot writer process beside it (a snapshot
    every 3 s into `folder`), deployed on first use and stopped after the last module that uses it."""

    def __init__(self) -> None:
        self.job_id: str | None = None
        self.writer = None
        self.platform = None

    def start(self, platform, folder) -> str:
        import subprocess
        import sys

        from infra.platform.jars import flink_connector_jar
        from infra.platform.services import Flink
        from jobs import deploy

        if self.job_id is not None:
            return self.job_id
        job_id = deploy.deploy("index_builder", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                               conf_dir=Flink(platform).conf_dir,
                               job_args=["--bootstrap", platform.kafka_bootstrap,
                                         "--connector-jar", str(flink_connector_jar(platform)),
                                         "--group-id", f"adserve-index-builder-test-{uuid.uuid4().hex[:6]}",
                                         "--checkpoint-interval-ms", "1000",
                                         # the click aggregator's module in this group kills the TaskManager
                                         "--restart-attempts", "50"])
        self.platform, self.job_id = platform, job_id
        self.writer = subprocess.Popen([sys.executable, "-m", "serving.snapshots", "--bootstrap",
                                        platform.kafka_bootstrap, "--dir", str(folder), "--every-s", "3"])
        deploy.wait_running(platform.flink_rest_url, job_id)
        return job_id

    def stop(self) -> None:
        from jobs import deploy

        if self.job_id is None:
            return
        job_id, self.job_id = self.job_id, None
        self.writer.terminate()
        self.writer.wait(timeout=60)
        deploy.stop(self.platform.flink_rest_url, job_id)


_SHARED_INDEX_BUILDER = SharedIndexBuilder()


@pytest.fixture(scope="session")
def snapshot_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("index-builder-snapshots")


_API_BUDGET_TOGGLES = ApiBudgetToggles()


@pytest.fixture
def index_builder(platform, snapshot_folder):
    """The index builder's job id: one deployment shared by the modules that use it (they run one after
    another, see pytest_collection_modifyitems), stopped after the last of them so the cluster's slots are free
    again for the next modules.

    Its first use also starts the advertiser API's budget toggles (tests/integration/budget_toggles.py) in the
    background: they take 2 minutes of real time, which pass while the group's modules run."""
    job_id = _SHARED_INDEX_BUILDER.start(platform, snapshot_folder)
    _API_BUDGET_TOGGLES.start(platform)
    yield job_id


@pytest.fixture
def api_budget_toggles(index_builder) -> ApiBudgetToggles:
    """The budget toggles started with the index builder; `.result()` waits for them and their versions."""
    return _API_BUDGET_TOGGLES
