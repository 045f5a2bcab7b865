"""adserve up / status / down on a second, isolated platform instance (own home, own ports),
plus the faults the platform must name: a port in use, a missing Java, a stopped broker."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from infra.platform import PlatformSettings
from infra.platform.process import group_alive
from schemas import topics
from streams import kafka

PORT_SHIFT = 200


def isolated_env(home: Path, shift: int = PORT_SHIFT) -> dict[str, str]:
    base = PlatformSettings(home=home)
    env = {"ADSERVE_HOME": str(home)}
    for name in ("kafka_port", "kafka_controller_port", "connect_port", "connect_metrics_port", "postgres_port",
                 "redis_port", "flink_rest_port", "flink_rpc_port", "flink_jobmanager_metrics_port",
                 "flink_taskmanager_metrics_port", "prometheus_port"):
        env[f"ADSERVE_{name.upper()}"] = str(getattr(base, name) + shift)
    env["ADSERVE_FLINK_TASK_SLOTS"] = "2"
    # the jars are shared with the main instance so the test does not fetch them again
    return env


def adserve(env: dict[str, str], *args: str, timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adserve", *args], capture_output=True, text=True,
                          timeout=timeout, env=os.environ | env)


def link_jars(platform: PlatformSettings, home: Path) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "jars").symlink_to(platform.jars_dir)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_twice_then_status_then_down_leaves_no_process(platform, tmp_path):
    home = tmp_path / "platform"
    link_jars(platform, home)
    env = isolated_env(home)
    first = adserve(env, "up")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    try:
        second = adserve(env, "up")
        assert second.returncode == 0, second.stderr
        assert "started: nothing (already running)" in second.stdout
        status = adserve(env, "status", "--json")
        assert status.returncode == 0, status.stdout
        rows = json.loads(status.stdout)
        assert {r["name"]: r["state"] for r in rows} == {
            "redis": "running", "postgres": "running", "kafka": "running", "connect": "running", "flink": "running",
            "prometheus": "running"}
        pids = [pid for r in rows for pid in r["pids"]]
        assert len(pids) == 7
    finally:
        down = adserve(env, "down", "--purge")
    assert down.returncode == 0, down.stderr
    assert not [pid for pid in pids if group_alive(pid)]
    ports = [int(v) for k, v in env.items() if k.endswith("_PORT")]
    assert not [p for p in ports if port_open(p)]
    after = json.loads(adserve(env, "status", "--json").stdout)
    assert {r["state"] for r in after} == {"stopped"}


def test_a_port_in_use_is_named_and_nothing_is_left_started(platform, tmp_path):
    home = tmp_path / "platform"
    link_jars(platform, home)
    env = isolated_env(home, shift=300)
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", int(env["ADSERVE_KAFKA_PORT"])))
    squatter.listen()
    try:
        result = adserve(env, "up")
    finally:
        squatter.close()
    assert result.returncode == 2
    assert f"kafka: port 127.0.0.1:{env['ADSERVE_KAFKA_PORT']} is already in use" in result.stderr
    # Redis and PostgreSQL had started before Kafka failed: they were stopped again.
    after = json.loads(adserve(env, "status", "--json").stdout)
    assert {r["state"] for r in after} == {"stopped"}
    adserve(env, "down", "--purge")
    assert not port_open(int(env["ADSERVE_REDIS_PORT"]))
    assert not port_open(int(env["ADSERVE_POSTGRES_PORT"]))


def test_a_missing_java_is_a_clear_error(tmp_path):
    env = {"ADSERVE_HOME": str(tmp_path / "platform"), "PATH": "/nonexistent", "JAVA_HOME": ""}
    result = subprocess.run([sys.executable, "-m", "adserve", "up"], capture_output=True, text=True,
                            timeout=60, env={k: v for k, v in (os.environ | env).items() if v != ""})
    assert result.returncode == 2
    assert "Java is not installed" in result.stderr


def test_every_topic_exists_with_its_config(platform):
    from confluent_kafka.admin import ConfigResource

    from schemas.topics import TOPICS

    compacted = {topics.SERVING_ADS, topics.SERVING_CAMPAIGNS, topics.SERVING_RESERVES, topics.BUDGET_STATE,
                 topics.CDC_CAMPAIGNS, topics.CDC_ADS, topics.CDC_RESERVES, topics.FEATURES_ADS, topics.MODEL_REGISTRY,
                 topics.PRIVACY_DELETIONS}
    assert {t.name for t in TOPICS if t.compacted} == compacted
    admin = kafka.admin(platform.kafka_bootstrap)
    existing = admin.list_topics(timeout=10).topics
    for spec in TOPICS:
        assert spec.name in existing
        assert len(existing[spec.name].partitions) == spec.partitions
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t.name) for t in TOPICS]
    for resource, future in admin.describe_configs(resources, request_timeout=10).items():
        config = future.result(timeout=10)
        expected = "compact" if resource.name in compacted else "delete"
        assert config["cleanup.policy"].value == expected, resource.name


def test_a_stopped_broker_fails_a_client_call_instead_of_hanging():
    dead = "127.0.0.1:1"  # nothing listens on port 1
    began = time.monotonic()
    with pytest.raises(Exception):
        kafka.read_all(dead, topics.AD_EVENTS, timeout_s=3)
    with pytest.raises(kafka.KafkaCallTimeout):
        kafka.produce_all(dead, topics.AD_EVENTS, [(b"k", b"v", None)], timeout_s=3)
    assert time.monotonic() - began < 30


def test_redis_and_postgres_answer_on_loopback(platform):
    import psycopg
    import redis

    client = redis.Redis.from_url(platform.redis_url, socket_timeout=2)
    assert client.ping()
    with psycopg.connect(platform.postgres_dsn, connect_timeout=5) as conn:
        assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"


def test_the_flink_cluster_loads_the_python_bridge_and_kafka_connector_once_for_every_job(platform):
    """Both jars in the cluster's lib/ and their packages parent-first: classes loaded and JIT-compiled once
    per TaskManager, not again for each submitted job (docs/platform.md)."""
    import urllib.request

    with urllib.request.urlopen(f"{platform.flink_rest_url}/jobmanager/environment", timeout=10) as reply:
        classpath = [Path(entry).name for entry in json.load(reply)["classpath"]]
    assert any(name.startswith("flink-python-") for name in classpath), classpath
    assert any(name.startswith("flink-sql-connector-kafka-") for name in classpath), classpath
    with urllib.request.urlopen(f"{platform.flink_rest_url}/jobmanager/config", timeout=10) as reply:
        config = {item["key"]: item["value"] for item in json.load(reply)}
    patterns = config["classloader.parent-first-patterns.additional"].split(";")
    assert "org.apache.kafka." in patterns and "org.apache.beam." in patterns
