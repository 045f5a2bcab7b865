"""`adserve topics create`, `adserve cdc register` and `adserve advertisers migrate` against the local platform,
reached only through a settings file (its DSN in a secret file), as the bootstrap Job reaches a production
cluster: each creates what is missing, a second run creates nothing, and a topic with fewer partitions than
specified is reported and left as it is."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid

import pytest

from adserve.cli import main
from infra.platform import cdc, topics
from schemas.topics import TOPICS, TopicSpec
from streams import endpoints, kafka

pytestmark = pytest.mark.integration


@pytest.fixture
def settings_env(platform, tmp_path):
    """The environment of a process that knows the platform only from a settings file."""
    dsn = tmp_path / "postgres-dsn"
    dsn.write_text(platform.postgres_dsn + "\n")
    path = tmp_path / "settings.toml"
    path.write_text(f'[kafka]\nbootstrap = ["{platform.kafka_bootstrap}"]\n\n[postgres]\ndsn_file = "{dsn}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ADSERVE_KAFKA_", "ADSERVE_POSTGRES_"))}
    return env | {"ADSERVE_SETTINGS_FILE": str(path), "ADSERVE_PROCESS_KIND": "tools"}


def adserve(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "adserve", *args], env=env, capture_output=True, text=True,
                          timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_the_bootstrap_commands_are_idempotent_on_the_platform(platform, settings_env):
    assert "campaign store: every migration applied" in adserve(settings_env, "advertisers", "migrate")
    out = adserve(settings_env, "topics", "create", "--replication-factor", "1")
    assert f"0 created, {len(TOPICS)} present on {platform.kafka_bootstrap}" in out  # `adserve up` made them
    out = adserve(settings_env, "cdc", "register", "--connect-url", platform.connect_url)
    assert f"connector {cdc.CONNECTOR} RUNNING" in out
    with urllib.request.urlopen(f"{platform.connect_url}/connectors/{cdc.CONNECTOR}/config", timeout=15) as answer:
        registered = json.loads(answer.read())
    assert {k: v for k, v in registered.items() if k != "name"} == cdc.connector_config(platform.postgres_dsn)
    assert f"connector {cdc.CONNECTOR} RUNNING" in adserve(settings_env, "cdc", "register", "--connect-url",
                                                            platform.connect_url)


def test_topics_create_makes_the_missing_ones_once_and_reports_short_ones(platform, settings_env, monkeypatch,
                                                                         capsys):
    suffix = uuid.uuid4().hex[:8]
    specs = (TopicSpec(f"test.provision.new.{suffix}", key="k", schema="", partitions=3),
             TopicSpec(f"test.provision.short.{suffix}", key="k", schema="", partitions=4, compacted=True))
    topics.ensure_topics(platform.kafka_bootstrap, (TopicSpec(specs[1].name, key="k", schema="", partitions=1),))
    monkeypatch.setattr(topics, "TOPICS", specs)
    for name, value in settings_env.items():
        monkeypatch.setenv(name, value)
    for name in [n for n in os.environ if n.startswith(("ADSERVE_KAFKA_", "ADSERVE_POSTGRES_"))]:
        monkeypatch.delenv(name)
    endpoints.forget()
    try:
        assert main(["topics", "create", "--replication-factor", "1", "--dry-run"]) == 0
        dry = capsys.readouterr().out
        assert f"would create {specs[0].name}: 3 partitions, replication factor 1, delete" in dry
        assert f"topic {specs[1].name}: 1 partitions, specified 4" in dry
        assert topics.read_plan(platform.kafka_bootstrap, specs).create == (specs[0],)  # the dry run made nothing

        assert main(["topics", "create", "--replication-factor", "1"]) == 0
        assert f"created {specs[0].name}\n1 created, 1 present" in capsys.readouterr().out
        assert main(["topics", "create", "--replication-factor", "1"]) == 0
        again = capsys.readouterr().out
        assert "0 created, 2 present" in again and f"topic {specs[1].name}: 1 partitions, specified 4" in again
    finally:
        endpoints.forget()
    metadata = kafka.admin(platform.kafka_bootstrap).list_topics(timeout=15).topics
    assert (len(metadata[specs[0].name].partitions), len(metadata[specs[1].name].partitions)) == (3, 1)
    admin = kafka.admin(platform.kafka_bootstrap)
    for future in admin.delete_topics([s.name for s in specs], operation_timeout=15).values():
        future.result(timeout=30)
