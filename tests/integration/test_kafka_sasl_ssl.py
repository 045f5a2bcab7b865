"""A Flink job and the ad server against a Kafka that takes only SASL_SSL, their settings from a settings file
with the password in a secret file; and a wrong CA, a wrong password or an unreachable broker stopping the ad
server at start with the setting named (an unreachable Redis or PostgreSQL too, for the ad server and the
advertiser API).

The test makes its own CA and broker certificate (the openssl command), and starts a second, separate local
broker (the platform's Kafka distribution, own home folder and ports) whose only client listener is SASL_SSL
with SASL/PLAIN users; it is stopped at the end. The platform's Flink cluster runs the job; the platform's
Redis serves the ad server's profiles."""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from infra.platform.process import wait_until
from infra.platform.services import Flink, Kafka
from infra.platform.topics import TOPICS, TopicSpec, ensure_topics
from schemas import topics
from schemas.codec import AvroCodec
from streams import endpoints, kafka
from tests.factories import SMOKE_EVENTS, expected_event_counts

CODEC = AvroCodec()
USER, PASSWORD = "adserve-app", "sasl-test-password-91c2"
ADMIN_PASSWORD = "sasl-test-admin-3f7e"
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: Path, name: str) -> Path:
    """A self-signed CA: folder/<name>.key, folder/<name>.pem."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "2", "-subj", f"/CN={name}", cwd=folder)
    return folder / f"{name}.pem"


def make_broker_keystore(folder: Path, ca: str) -> Path:
    """The broker's PKCS#8 key and its certificate for 127.0.0.1 / localhost signed by `ca`, in one PEM file
    (a PEM key store: no keytool)."""
    (folder / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
            "-subj", "/CN=localhost", cwd=folder)
    openssl("x509", "-req", "-in", "broker.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", "broker.crt", "-days", "2", "-extfile", "san.ext", cwd=folder)
    openssl("pkcs8", "-topk8", "-nocrypt", "-in", "broker.key", "-out", "broker.pk8", cwd=folder)
    keystore = folder / "broker-keystore.pem"
    keystore.write_text((folder / "broker.pk8").read_text() + (folder / "broker.crt").read_text())
    return keystore


@pytest.fixture(scope="module")
def sasl_broker(platform, tmp_path_factory):
    """(settings of the second broker, folder with ca.pem / wrong-ca.pem / kafka-password): a KRaft broker with a
    SASL_SSL listener on a port of its own, the platform's topics created on it."""
    folder = tmp_path_factory.mktemp("sasl-ssl")
    make_ca(folder, "ca")
    make_ca(folder, "wrong-ca")
    keystore = make_broker_keystore(folder, "ca")
    (folder / "kafka-password").write_text(PASSWORD + "\n")
    home = folder / "home"
    home.mkdir()
    (home / "jars").symlink_to(platform.jars_dir)  # the platform's Kafka distribution, not a copy
    settings = dataclasses.replace(platform, home=home, kafka_port=free_port(), kafka_controller_port=free_port())
    jaas = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{ADMIN_PASSWORD}" '
            f'user_admin="{ADMIN_PASSWORD}" user_{USER}="{PASSWORD}";')
    broker = Kafka(settings, listener="SASL_SSL", broker_properties={
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas,
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",  # the broker checks its own listener with it at start
        "ssl.truststore.location": str(folder / "ca.pem"),
    }, client_properties={"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
                          "sasl.password": ADMIN_PASSWORD, "ssl.ca.location": str(folder / "ca.pem")})
    broker.launch()
    try:
        wait_until(broker.healthy, timeout_s=120, what="the SASL_SSL broker did not come up", failed=broker.died)
        yield settings, folder
    finally:
        broker.stop()


def settings_file(folder: Path, bootstrap: str, *, ca: str = "ca.pem", password_file: str = "kafka-password") -> Path:
    """A production-style settings file: the brokers over SASL_SSL, the password in a secret file."""
    path = folder / f"settings-{uuid.uuid4().hex[:6]}.toml"
    path.write_text(f"""
[kafka]
bootstrap = ["{bootstrap}"]
security_protocol = "SASL_SSL"
sasl_mechanism = "PLAIN"
username = "{USER}"
password_file = "{folder / password_file}"
ssl_ca_file = "{folder / ca}"
""")
    return path


@pytest.fixture
def on_sasl_broker(sasl_broker, monkeypatch):
    """This test process's Kafka clients (streams.kafka) use the SASL_SSL broker's settings file."""
    settings, folder = sasl_broker
    path = settings_file(folder, settings.kafka_bootstrap)
    monkeypatch.setenv("ADSERVE_SETTINGS_FILE", str(path))
    monkeypatch.delenv("ADSERVE_KAFKA_BOOTSTRAP", raising=False)
    endpoints.use(endpoints.load("tools"))
    yield settings.kafka_bootstrap, path
    endpoints.forget()


def server_environ(platform, settings_path: Path, **extra: str) -> dict[str, str]:
    """The ad server's environment: the platform's (Redis), with Kafka from the settings file only."""
    env = os.environ | platform.as_env() | {"ADSERVE_SETTINGS_FILE": str(settings_path), **extra}
    env.pop("ADSERVE_KAFKA_BOOTSTRAP")
    return env


def start_ad_server(platform, settings_path: Path, port: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "adserve", "serve", "ads", "--workers", "0", "--dev",
                             "--port", str(port), "--server-id", f"sasl-{uuid.uuid4().hex[:6]}"],
                            env=server_environ(platform, settings_path), cwd=REPO_ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def ask(port: int, placement: str) -> dict | None:
    body = json.dumps({"request_id": uuid.uuid4().hex, "user_id": "sasl-user", "placement": placement,
                       "slots": [{"position": 1}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/ads", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return json.loads(answer.read())
    except OSError:  # not listening yet, or 503 while it catches up
        return None


def publish_campaign(bootstrap: str, placement: str, campaign_id: int) -> None:
    now = int(time.time() * 1000)
    campaign = CODEC.encode(topics.record_type(topics.SERVING_CAMPAIGNS), {
        "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1, "event_time": now,
        "status": "ACTIVE", "bid_type": "CPM", "daily_budget_micros": 100_000_000, "currency": "USD",
        "timezone": "UTC", "flight_start": None, "flight_end": None, "dayparts": [], "cap_per_day": None,
        "cap_per_week": None, "cpa_target_micros": None})
    kafka.produce_all(bootstrap, topics.SERVING_CAMPAIGNS, [(str(campaign_id).encode(), campaign, now)])
    ad = CODEC.encode(topics.record_type(topics.SERVING_ADS), {
        "ad_id": campaign_id + 1, "campaign_id": campaign_id, "advertiser_id": campaign_id, "version": 1,
        "event_time": now, "removed": False, "bid_type": "CPM", "bid_micros": 5_000_000, "quality_prior": 0.0,
        "creative_ref": "sasl", "landing_url": "https://shop.example/", "static_score": 1.0,
        "targeting": [{"attribute": "placement", "values": [placement], "excluded": False}]})
    kafka.produce_all(bootstrap, topics.SERVING_ADS, [(str(campaign_id + 1).encode(), ad, now)])


def test_the_ad_server_serves_and_logs_over_sasl_ssl(platform, sasl_broker, on_sasl_broker):
    bootstrap, path = on_sasl_broker
    ensure_topics(bootstrap, TOPICS)
    placement, campaign_id = f"sasl-{uuid.uuid4().hex[:8]}", (time.time_ns() // 1000) % 10**12 * 10
    publish_campaign(bootstrap, placement, campaign_id)
    port = free_port()
    server = start_ad_server(platform, path, port)
    try:
        answers: list[dict] = []

        def served() -> bool:
            answer = ask(port, placement)
            if answer and any(slot.get("ad_id") for slot in answer["slots"]):
                answers.append(answer)
                return True
            return False

        wait_until(served, timeout_s=120, what="the ad server never served the campaign over SASL_SSL",
                   failed=lambda: None if server.poll() is None else server.stdout.read()[-3000:], interval_s=1.0)
        request_id = answers[0]["request_id"]
        logged = [CODEC.decode(m.value()) for m in kafka.read_all(bootstrap, topics.AD_SERVED, timeout_s=60)]
        assert request_id in {record["request_id"] for record in logged}
    finally:
        server.terminate()
        output = server.communicate(timeout=60)[0]
    assert "adserver endpoints: kind=adserver, kafka.bootstrap=" in output and "kafka.password=***" in output
    assert PASSWORD not in output and ADMIN_PASSWORD not in output  # printed settings mask the secret


def test_a_flink_job_reads_and_writes_over_sasl_ssl(platform, sasl_broker, on_sasl_broker):
    from jobs import deploy
    from infra.platform.jars import flink_connector_jar
    from tests.integration.test_event_counts_job import produce_events

    bootstrap, path = on_sasl_broker
    suffix = uuid.uuid4().hex[:8]
    source, output, dead = (f"test.sasl.{name}.{suffix}" for name in ("events", "counts", "dead"))
    ensure_topics(bootstrap, tuple(TopicSpec(name, key="test", schema="", partitions=1)
                                   for name in (source, output, dead)))
    produce_events(bootstrap, source, SMOKE_EVENTS)
    job_id = deploy.deploy("event_counts", jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                           conf_dir=Flink(platform).conf_dir,
                           job_args=["--settings-file", str(path), "--connector-jar",
                                     str(flink_connector_jar(platform)), "--bounded",
                                     "--startup-mode", "earliest-offset", "--input-topic", source, "--output-topic", output, "--dead-letter-topic",
                                     dead, "--group-id", f"sasl-{suffix}", "--checkpoint-interval-ms", "1000"])
    try:
        counts = [CODEC.decode(m.value()) for m in kafka.read_all(bootstrap, output, expected=5, timeout_s=120)]
    finally:
        state, _ = deploy.job_state(platform.flink_rest_url, job_id)
        if state == "RUNNING":
            deploy.cancel(platform.flink_rest_url, job_id)
    key = lambda r: (r["campaign_id"], r["window_start"])  # noqa: E731
    assert sorted(counts, key=key) == sorted(expected_event_counts(), key=key)


def run_ad_server_until_exit(platform, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adserve", "serve", "ads", "--workers", "0", "--dev",
                           "--port", str(free_port())], env=server_environ(platform, path), cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("mistake, setting", [
    ("wrong-ca", "kafka.ssl_ca_file (ADSERVE_KAFKA_SSL_CA_FILE)"),
    ("wrong-password", "kafka.password (ADSERVE_KAFKA_PASSWORD)"),
    ("unreachable", "kafka.bootstrap (ADSERVE_KAFKA_BOOTSTRAP)"),
    ("missing-ca", "kafka.ssl_ca_file (ADSERVE_KAFKA_SSL_CA_FILE)"),
])
def test_a_wrong_kafka_setting_stops_the_ad_server_at_start_naming_it(platform, sasl_broker, mistake, setting):
    settings, folder = sasl_broker
    (folder / "wrong-password").write_text("not-the-password\n")
    bootstrap = f"127.0.0.1:{free_port()}" if mistake == "unreachable" else settings.kafka_bootstrap
    path = settings_file(folder, bootstrap,
                         ca={"wrong-ca": "wrong-ca.pem", "missing-ca": "no-such-ca.pem"}.get(mistake, "ca.pem"),
                         password_file="wrong-password" if mistake == "wrong-password" else "kafka-password")
    done = run_ad_server_until_exit(platform, path)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert setting in done.stderr
    assert "not-the-password" not in done.stdout + done.stderr and PASSWORD not in done.stdout + done.stderr


def test_an_unreachable_redis_or_postgresql_stops_its_server_at_start_naming_the_setting(platform):
    closed = free_port()
    env = os.environ | platform.as_env() | {"ADSERVE_REDIS_URL": f"redis://127.0.0.1:{closed}/0"}
    ads = subprocess.run([sys.executable, "-m", "adserve", "serve", "ads", "--workers", "0", "--dev",
                          "--port", str(free_port())], env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                         timeout=120)
    assert ads.returncode == 2 and "redis.url (ADSERVE_REDIS_URL)" in ads.stderr, ads.stderr[-2000:]

    dsn = f"host=127.0.0.1 port={closed} user=adserve password=pg-start-check-secret dbname=adserve"
    env = os.environ | platform.as_env() | {"ADSERVE_POSTGRES_DSN": dsn}
    api = subprocess.run([sys.executable, "-m", "adserve", "serve", "advertiser-api", "--port", str(free_port())],
                         env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert api.returncode == 2 and "postgres.dsn (ADSERVE_POSTGRES_DSN)" in api.stderr, api.stderr[-2000:]
    assert "pg-start-check-secret" not in api.stdout + api.stderr
