"""The endpoints of a process (core.endpoints): layering of the settings file, the process kind's sections and
the environment; the client properties Kafka's two clients get; secrets masked; every error naming the setting.
The loader (streams.endpoints) reads files; its checks fail naming the setting without any server."""
from __future__ import annotations

import socket
import tomllib

import pytest

from core.endpoints import Secret, local_defaults, parse
from core.errors import InvalidSettings
from core.settings import describe
from infra.platform.settings import PlatformSettings
from streams import endpoints as loader

PRODUCTION = tomllib.loads("""
[kafka]
bootstrap = ["b1.kafka.prod:9093", "b2.kafka.prod:9093"]
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
username = "adserve"
password_file = "/etc/adserve/secrets/kafka-password"
ssl_ca_file = "/etc/adserve/secrets/kafka-ca.pem"

[kafka.properties]
"client.dns.lookup" = "use_all_dns_ips"

[redis]
url = "rediss://redis.prod:6379/0"
password_file = "/etc/adserve/secrets/redis-password"
sentinels = ["s1.redis.prod:26379", "s2.redis.prod:26379"]
sentinel_master = "adserve"

[postgres]
dsn_file = "/etc/adserve/secrets/postgres-dsn"

[flink]
rest_url = "https://flink.prod:8081"

[storage]
snapshots = "gs://adserve-prod/snapshots"
curves = "gs://adserve-prod/curves/hourly.json"

[adserver.kafka]
username = "adserve-adserver"

[jobs.storage]
savepoints = "gs://adserve-prod/savepoints"
""")
SECRETS = {("kafka", "password"): "kafka-pw-0a1b2c\n", ("redis", "password"): "redis-pw-3d4e5f",
           ("postgres", "dsn"): "host=pg.prod user=adserve password=pg-pw-6a7b8c dbname=adserve"}


def production(kind: str = "adserver", environ: dict[str, str] | None = None):
    return parse(PRODUCTION, kind, environ or {}, SECRETS)


def test_without_a_settings_file_the_endpoints_are_the_local_platforms():
    platform = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/x"})
    endpoints = parse({}, "adserver", platform.as_env())
    assert endpoints.kafka.bootstrap_servers == platform.kafka_bootstrap
    assert endpoints.kafka.librdkafka_config() == {}
    assert endpoints.redis.url == platform.redis_url
    assert endpoints.postgres.dsn.value == platform.postgres_dsn
    assert endpoints.flink.rest_url == platform.flink_rest_url


def test_the_local_defaults_follow_the_platforms_port_variables():
    platform = PlatformSettings.from_env({"ADSERVE_KAFKA_PORT": "29092", "ADSERVE_REDIS_PORT": "26379",
                                          "ADSERVE_POSTGRES_PORT": "25432", "ADSERVE_FLINK_REST_PORT": "28081"})
    defaults = local_defaults({k: v for k, v in platform.as_env().items() if k != "ADSERVE_KAFKA_BOOTSTRAP"})
    assert defaults["kafka"]["bootstrap"] == platform.kafka_bootstrap
    assert defaults["redis"]["url"] == platform.redis_url
    assert defaults["postgres"]["dsn"] == platform.postgres_dsn
    assert defaults["flink"]["rest_url"] == platform.flink_rest_url


def test_the_process_kinds_section_overrides_the_shared_one():
    assert production("adserver").kafka.username == "adserve-adserver"
    assert production("tracker").kafka.username == "adserve"
    assert production("jobs").storage.savepoints == "gs://adserve-prod/savepoints"
    assert production("adserver").storage.savepoints == ""
    assert production("jobs").storage.snapshots == "gs://adserve-prod/snapshots"


def test_the_environment_overrides_the_file():
    endpoints = production("adserver", {"ADSERVE_KAFKA_BOOTSTRAP": "k1:9093,k2:9093",
                                        "ADSERVE_KAFKA_USERNAME": "from-env", "ADSERVE_REDIS_URL": "redis://r:6379"})
    assert endpoints.kafka.bootstrap == ("k1:9093", "k2:9093")
    assert endpoints.kafka.username == "from-env"
    assert endpoints.redis.url == "redis://r:6379"


def test_a_secret_in_the_environment_wins_over_the_secret_file_of_the_settings_file():
    endpoints = parse(PRODUCTION, "adserver", {"ADSERVE_KAFKA_PASSWORD": "env-pw"},
                      {k: v for k, v in SECRETS.items() if k != ("kafka", "password")})
    assert endpoints.kafka.password == Secret("env-pw")


def test_secret_files_are_read_stripped_and_named_as_their_source():
    endpoints = production()
    assert endpoints.kafka.password.value == "kafka-pw-0a1b2c"
    assert "kafka.password_file=/etc/adserve/secrets/kafka-password" == endpoints.kafka.password.source
    assert endpoints.postgres.dsn.value.startswith("host=pg.prod")


def test_librdkafka_gets_sasl_and_the_ca_file():
    assert production("tracker").kafka.librdkafka_config() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "adserve",
        "sasl.password": "kafka-pw-0a1b2c", "ssl.ca.location": "/etc/adserve/secrets/kafka-ca.pem",
        "client.dns.lookup": "use_all_dns_ips"}


def test_flinks_kafka_connector_gets_java_names_with_the_ca_inline_as_pem():
    options = production("jobs").kafka.flink_options(ca_pem="-----BEGIN CERTIFICATE-----\nMII...\n")
    assert options == {
        "properties.security.protocol": "SASL_SSL",
        "properties.sasl.mechanism": "SCRAM-SHA-512",
        "properties.sasl.jaas.config": 'org.apache.flink.kafka.shaded.org.apache.kafka.common.security.scram.'
                                       'ScramLoginModule required username="adserve" password="kafka-pw-0a1b2c";',
        "properties.ssl.truststore.type": "PEM",
        "properties.ssl.truststore.certificates": "-----BEGIN CERTIFICATE-----\nMII...\n",
        "properties.client.dns.lookup": "use_all_dns_ips"}


def test_without_the_pem_text_the_java_client_reads_the_ca_file_itself():
    props = production("jobs").kafka.java_properties()
    assert props["ssl.truststore.location"] == "/etc/adserve/secrets/kafka-ca.pem"
    assert props["ssl.truststore.type"] == "PEM"


def test_a_quote_in_the_password_cannot_end_the_jaas_string():
    endpoints = parse({"kafka": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                 "username": "u", "password": 'a"b\\c'}}, "jobs", {})
    assert endpoints.kafka.java_properties()["sasl.jaas.config"].endswith('password="a\\"b\\\\c";')


def test_redis_sentinel_addresses_are_parsed():
    redis = production().redis
    assert redis.mode == "sentinel" and redis.tls
    assert redis.sentinels == (("s1.redis.prod", 26379), ("s2.redis.prod", 26379))
    assert redis.password.value == "redis-pw-3d4e5f"


def test_redis_cluster_nodes_from_the_environment():
    redis = parse({}, "adserver", {"ADSERVE_REDIS_CLUSTER_NODES": "n1:7000,n2:7001"}).redis
    assert redis.mode == "cluster" and redis.cluster_nodes == (("n1", 7000), ("n2", 7001))


def test_describe_masks_every_secret():
    text = describe(production()) + repr(production())
    for secret in ("kafka-pw-0a1b2c", "redis-pw-3d4e5f", "pg-pw-6a7b8c"):
        assert secret not in text
    assert "kafka.password=***" in describe(production())
    assert "b1.kafka.prod:9093" in text


@pytest.mark.parametrize("document, environ, setting", [
    ({"kafka": {"security_protocol": "SASL_TLS"}}, {}, "kafka.security_protocol (ADSERVE_KAFKA_SECURITY_PROTOCOL)"),
    ({"kafka": {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "u"}}, {},
     "kafka.password (ADSERVE_KAFKA_PASSWORD)"),
    ({"kafka": {"security_protocol": "SASL_SSL", "username": "u", "password": "p"}}, {},
     "kafka.sasl_mechanism (ADSERVE_KAFKA_SASL_MECHANISM)"),
    ({"kafka": {"username": "u", "password": "p"}}, {}, "kafka.security_protocol"),
    ({"kafka": {"ssl_ca_file": "/ca.pem"}}, {}, "kafka.ssl_ca_file (ADSERVE_KAFKA_SSL_CA_FILE)"),
    ({}, {"ADSERVE_KAFKA_BOOTSTRAP": "no-port-here"}, "kafka.bootstrap (ADSERVE_KAFKA_BOOTSTRAP)"),
    ({"kafka": {"properties": {"ssl.key.password": "x"}}}, {}, "kafka.properties"),
    ({"kafka": {"properties": {"security.protocol": "SSL"}}}, {}, "kafka.properties"),
    ({"redis": {"url": "http://redis:6379"}}, {}, "redis.url (ADSERVE_REDIS_URL)"),
    ({"redis": {"sentinels": ["s:26379"]}}, {}, "redis.sentinel_master (ADSERVE_REDIS_SENTINEL_MASTER)"),
    ({"redis": {"sentinels": ["s:26379"], "sentinel_master": "m", "cluster_nodes": ["n:7000"]}}, {},
     "redis.sentinels"),
    ({"redis": {"sentinels": ["no-port"], "sentinel_master": "m"}}, {}, "redis.sentinels (ADSERVE_REDIS_SENTINELS)"),
    ({"flink": {"rest_url": "flink:8081"}}, {}, "flink.rest_url (ADSERVE_FLINK_REST_URL)"),
    ({"kafka": {"bootstrap": "k:9092", "bootstap": "typo"}}, {}, "[kafka] has unknown keys bootstap"),
    ({"kafak": {}}, {}, "unknown section [kafak]"),
    ({"adserver": {"redis": {"urll": "x"}}}, {}, "[adserver.redis] has unknown keys urll"),
])
def test_a_bad_setting_is_refused_naming_it(document, environ, setting):
    with pytest.raises(InvalidSettings) as raised:
        parse(document, "adserver", environ)
    assert setting in str(raised.value)


def test_a_secret_file_that_was_not_read_is_an_error_not_an_empty_password():
    with pytest.raises(InvalidSettings, match=r"kafka.password"):
        parse(PRODUCTION, "adserver", {}, {})


def test_an_unknown_process_kind_is_refused():
    with pytest.raises(InvalidSettings, match="process kind"):
        parse({}, "adsrever", {})


# The loader -----------------------------------------------------------------------------------------------
def test_the_loader_reads_the_settings_file_and_its_secret_files(tmp_path):
    (tmp_path / "kafka-password").write_text("from-the-secret-file\n")
    path = tmp_path / "settings.toml"
    path.write_text(f"""
[kafka]
bootstrap = "k:9093"
security_protocol = "SASL_PLAINTEXT"
sasl_mechanism = "PLAIN"
username = "u"
password_file = "{tmp_path / 'kafka-password'}"
""")
    endpoints = loader.load("tracker", {"ADSERVE_SETTINGS_FILE": str(path)})
    assert endpoints.kafka.password.value == "from-the-secret-file"
    assert endpoints.kafka.bootstrap == ("k:9093",)


def test_a_missing_secret_file_names_the_setting(tmp_path):
    with pytest.raises(InvalidSettings, match=r"kafka.password_file \(ADSERVE_KAFKA_PASSWORD_FILE\)"):
        loader.load("tracker", {"ADSERVE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL", "ADSERVE_KAFKA_SASL_MECHANISM": "PLAIN",
                                "ADSERVE_KAFKA_USERNAME": "u",
                                "ADSERVE_KAFKA_PASSWORD_FILE": str(tmp_path / "missing")})


def test_a_missing_or_bad_settings_file_names_the_variable(tmp_path):
    with pytest.raises(InvalidSettings, match="ADSERVE_SETTINGS_FILE"):
        loader.load("tracker", {"ADSERVE_SETTINGS_FILE": str(tmp_path / "missing.toml")})
    bad = tmp_path / "bad.toml"
    bad.write_text("[kafka\n")
    with pytest.raises(InvalidSettings, match="not valid TOML"):
        loader.load("tracker", {"ADSERVE_SETTINGS_FILE": str(bad)})


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_missing_or_bad_ca_file_fails_at_load_naming_the_setting(tmp_path, content):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    with pytest.raises(InvalidSettings, match=r"kafka.ssl_ca_file \(ADSERVE_KAFKA_SSL_CA_FILE\)="):
        loader.load("adserver", {"ADSERVE_KAFKA_SECURITY_PROTOCOL": "SSL", "ADSERVE_KAFKA_SSL_CA_FILE": str(ca)})


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_broker_fails_the_check_naming_the_bootstrap_setting():
    kafka = parse({}, "adserver", {"ADSERVE_KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}"}).kafka
    with pytest.raises(InvalidSettings, match=r"kafka.bootstrap \(ADSERVE_KAFKA_BOOTSTRAP\)=127.0.0.1:\d+: no broker "
                                              r"answered in 2 s"):
        loader.check_kafka(kafka, timeout_s=2)


def test_an_unreachable_redis_fails_the_check_naming_the_url_setting():
    redis = parse({}, "adserver", {"ADSERVE_REDIS_URL": f"redis://127.0.0.1:{_closed_port()}/0"}).redis
    with pytest.raises(InvalidSettings, match=r"redis.url \(ADSERVE_REDIS_URL\)"):
        loader.check_redis(redis, timeout_s=1)


def test_an_unreachable_postgres_fails_the_check_without_printing_the_dsn():
    dsn = f"host=127.0.0.1 port={_closed_port()} user=u password=pg-secret-x dbname=d"
    postgres = parse({}, "advertiser_api", {"ADSERVE_POSTGRES_DSN": dsn}).postgres
    with pytest.raises(InvalidSettings, match=r"postgres.dsn \(ADSERVE_POSTGRES_DSN\)") as raised:
        loader.check_postgres(postgres, timeout_s=1)
    assert "pg-secret-x" not in str(raised.value)


@pytest.mark.parametrize("errors, setting", [
    (["SSL handshake failed: error:0A000086:SSL routines::certificate verify failed"], "kafka.ssl_ca_file"),
    (["SASL authentication error: Authentication failed: Invalid username or password"], "kafka.password"),
    (["Connection refused", "1/1 brokers are down"], "kafka.bootstrap"),
])
def test_a_failed_kafka_check_names_the_setting_the_client_error_points_at(errors, setting):
    kafka = production("adserver").kafka
    assert loader.kafka_failure(kafka, errors, 10).startswith(setting)


def test_the_sasl_password_never_appears_in_a_failure_message():
    kafka = production("adserver").kafka
    message = loader.kafka_failure(kafka, ["SASL authentication error"], 10)
    assert "kafka-pw-0a1b2c" not in message


def test_a_redis_sentinel_client_is_built_for_the_primary():
    client = loader.redis_client(production().redis)
    assert type(client).__name__ == "Redis"
    assert client.connection_pool.service_name == "adserve"


def test_a_client_for_the_address_of_the_process_redis_gets_its_sentinel_and_password():
    loader.use(production())
    try:
        client = loader.redis_at("redis.prod", 6379, asyncio=True, socket_timeout=1.0)
        assert client.connection_pool.service_name == "adserve"
        assert client.connection_pool.connection_kwargs["password"] == "redis-pw-3d4e5f"
        other = loader.redis_at("127.0.0.1", 16379, socket_timeout=1.0)
        assert other.connection_pool.connection_kwargs.get("password") is None
    finally:
        loader.forget()


def test_a_server_started_with_a_settings_file_reads_its_endpoints_as_its_variables(tmp_path, monkeypatch):
    from infra.platform.environ import platform_environ

    (tmp_path / "dsn").write_text("host=pg.prod user=adserve password=pg-pw dbname=adserve\n")
    path = tmp_path / "settings.toml"
    path.write_text(f'[kafka]\nbootstrap = ["k1:9092", "k2:9092"]\n[postgres]\ndsn_file = "{tmp_path / "dsn"}"\n'
                    f'[redis]\nurl = "redis://redis.prod:6390/0"\n')
    monkeypatch.setenv("ADSERVE_SETTINGS_FILE", str(path))
    monkeypatch.setenv(loader.PROCESS_KIND_ENV, "tools")  # restored after: platform_environ sets it
    monkeypatch.delenv("ADSERVE_KAFKA_BOOTSTRAP", raising=False)
    monkeypatch.delenv("ADSERVE_POSTGRES_DSN", raising=False)
    try:
        environ = platform_environ("adserver")
        assert environ["ADSERVE_KAFKA_BOOTSTRAP"] == "k1:9092,k2:9092"
        assert environ["ADSERVE_POSTGRES_DSN"] == "host=pg.prod user=adserve password=pg-pw dbname=adserve"
        assert (environ["ADSERVE_HOST"], environ["ADSERVE_REDIS_PORT"]) == ("redis.prod", "6390")
        assert loader.process_endpoints().kind == "adserver"
    finally:
        loader.forget()


def test_a_job_takes_its_kafka_from_the_settings_file_and_prints_it_masked(tmp_path):
    import argparse

    from jobs.common.args import add_common_arguments
    from jobs.common.settings import KafkaJobSettings, kafka_endpoint

    ca = tmp_path / "ca.pem"
    ca.write_text(_any_ca_pem())
    (tmp_path / "pw").write_text("job-secret-pw\n")
    path = tmp_path / "settings.toml"
    path.write_text(f'[kafka]\nbootstrap = "k1:9093"\nsecurity_protocol = "SASL_SSL"\nsasl_mechanism = "PLAIN"\n'
                    f'username = "job"\npassword_file = "{tmp_path / "pw"}"\nssl_ca_file = "{ca}"\n')
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "event_counts")
    endpoint = kafka_endpoint(parser.parse_args(["--settings-file", str(path)]), {})
    assert endpoint.bootstrap == ("k1:9093",)
    settings = KafkaJobSettings("event_counts", endpoint.bootstrap_servers, "g", "connector.jar", endpoint=endpoint)
    options = settings.kafka_client_options()
    assert options["properties.ssl.truststore.certificates"] == ca.read_text()
    assert "job-secret-pw" in options["properties.sasl.jaas.config"]
    assert "job-secret-pw" not in describe(settings) + repr(settings)
    explicit = kafka_endpoint(parser.parse_args(["--settings-file", str(path), "--bootstrap", "a:1,b:2"]), {})
    assert explicit.bootstrap == ("a:1", "b:2") and explicit.username == "job"


def _any_ca_pem() -> str:
    """A CA certificate in PEM from the system's trust store (any will do for parsing)."""
    import ssl

    context = ssl.create_default_context()
    certificates = context.get_ca_certs(binary_form=True)
    if not certificates:
        pytest.skip("no system CA certificate to parse")
    return ssl.DER_cert_to_PEM_cert(certificates[0])


def test_published_contracts_that_differ_from_the_codes_stop_the_process_naming_the_setting(tmp_path):
    import json
    import shutil

    from schemas import SCHEMA_DIR, topics

    for path in SCHEMA_DIR.glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    environ = {"ADSERVE_SCHEMAS_CONTRACTS_DIR": str(tmp_path)}
    assert loader.load("tracker", environ).schemas.contracts_dir == str(tmp_path)
    emptied = {"type": "record", "name": topics.record_type(topics.AD_EVENTS), "fields": []}
    (tmp_path / "ad_event.avsc").write_text(json.dumps(emptied))
    (tmp_path / "ad_served.avsc").unlink()
    with pytest.raises(InvalidSettings, match=r"schemas.contracts_dir \(ADSERVE_SCHEMAS_CONTRACTS_DIR\)=.*different: "
                                              r"ad_event.avsc; missing: ad_served.avsc"):
        loader.load("tracker", environ)


def test_a_job_takes_its_checkpoint_and_savepoint_folders_from_the_jobs_storage_settings(tmp_path):
    import argparse

    from jobs.common.args import add_common_arguments
    from jobs.common.settings import settings_from_args

    path = tmp_path / "settings.toml"
    path.write_text('[storage]\ncheckpoints = "s3://shared/checkpoints"\n'
                    '[jobs.storage]\ncheckpoints = "gs://jobs/checkpoints"\nsavepoints = "gs://jobs/savepoints"\n')
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "event_counts")
    args = parser.parse_args(["--settings-file", str(path), "--connector-jar", "connector.jar"])
    settings = settings_from_args(args, "event_counts")
    assert (settings.checkpoints_dir, settings.savepoints_dir) == ("gs://jobs/checkpoints", "gs://jobs/savepoints")


def test_an_operators_kafka_property_wins_over_a_producer_default_and_a_callers_override_over_both(monkeypatch):
    from streams import kafka

    monkeypatch.setenv("ADSERVE_KAFKA_PROPERTIES", "message.timeout.ms=8000,linger.ms=20")
    loader.forget()
    try:
        config = kafka.producer_config("127.0.0.1:19092", **{"linger.ms": 5})
        assert config["message.timeout.ms"] == "8000"  # the operator's, over the default 30000
        assert config["linger.ms"] == 5  # the caller's, over the operator's
        assert config["enable.idempotence"] is True and config["acks"] == "all"
    finally:
        loader.forget()
    monkeypatch.delenv("ADSERVE_KAFKA_PROPERTIES")
    assert kafka.producer_config("127.0.0.1:19092")["message.timeout.ms"] == 30000
