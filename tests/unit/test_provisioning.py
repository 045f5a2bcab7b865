"""What `adserve topics create` and `adserve cdc register` would do, decided without a cluster: the topic plan
(missing topics created, present ones left, under-partitioned ones reported) and the Debezium connector's config
from a production DSN, printed with the password masked."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adserve.cli import build_parser, main
from infra.platform import cdc
from infra.platform.errors import PlatformError
from infra.platform.topics import TopicPlan, UnderPartitioned, plan_topics
from schemas import topics as topics_module
from schemas.topics import TOPICS, TopicSpec

SPECS = (TopicSpec("a", key="k", schema="", partitions=4), TopicSpec("b", key="k", schema="", partitions=1),
         TopicSpec("c", key="k", schema="", partitions=8))
PROD_DSN = "host=pg.prod port=6543 user=adserve password='s3cr et' dbname=campaigns sslmode=verify-full " \
           "sslrootcert=/etc/pg/ca.pem"


def test_an_empty_cluster_gets_every_topic() -> None:
    plan = plan_topics({}, TOPICS)
    assert [t.name for t in plan.create] == [t.name for t in TOPICS]
    assert plan.present == () and plan.under_partitioned == ()


def test_each_avro_topic_names_the_record_type_of_its_schema() -> None:
    for spec in TOPICS:
        if spec.schema:
            schema = json.loads((Path(topics_module.__file__).parent / spec.schema).read_text())
            assert spec.record_type == schema["name"], spec.name
        else:
            assert spec.record_type == "", spec.name


def test_present_topics_are_left_and_under_partitioned_ones_reported() -> None:
    plan = plan_topics({"a": 4, "c": 2, "other": 3}, SPECS)
    assert plan == TopicPlan(create=(SPECS[1],), present=("a", "c"),
                             under_partitioned=(UnderPartitioned("c", partitions=2, wanted=8),))


def test_more_partitions_than_specified_is_not_reported() -> None:
    assert plan_topics({"a": 12, "b": 1, "c": 8}, SPECS) == TopicPlan((), ("a", "b", "c"), ())


def test_the_connector_takes_the_dsn_parts() -> None:
    config = cdc.connector_config(PROD_DSN)
    assert {k: config[k] for k in ("database.hostname", "database.port", "database.user", "database.password",
                                   "database.dbname", "database.sslmode", "database.sslrootcert")} == {
        "database.hostname": "pg.prod", "database.port": "6543", "database.user": "adserve",
        "database.password": "s3cr et", "database.dbname": "campaigns", "database.sslmode": "verify-full",
        "database.sslrootcert": "/etc/pg/ca.pem"}
    assert config["table.include.list"] == "public.campaigns,public.ads,public.reserves"


def test_no_record_the_api_can_make_reaches_the_dead_letter_limit_and_the_producer_takes_twice_it() -> None:
    from schemas.topics import TOPICS_BY_NAME
    from serving.body_limits import ADVERTISER_API_MAX_BODY_BYTES as MAX_BODY_BYTES

    config = cdc.connector_config(PROD_DSN)
    assert config["transforms.oversized.type"] == cdc.TRANSFORM
    assert int(config["transforms.oversized.max.bytes"]) == cdc.DEAD_LETTER_ABOVE_BYTES
    assert config["transforms.oversized.topic"] == topics_module.CDC_DEAD_LETTERS
    assert topics_module.CDC_DEAD_LETTERS in TOPICS_BY_NAME
    # Debezium's JSON escapes a row's jsonb text once more: at most twice the API's largest body, plus envelope
    assert 2 * MAX_BODY_BYTES + 64 * 1024 < cdc.DEAD_LETTER_ABOVE_BYTES
    assert int(config["producer.override.max.request.size"]) == cdc.MAX_RECORD_BYTES == 2 * cdc.DEAD_LETTER_ABOVE_BYTES
    for topic in cdc.CDC_TOPICS:
        assert int(TOPICS_BY_NAME[topic].kafka_config()["max.message.bytes"]) == cdc.MAX_RECORD_BYTES
    assert config["errors.tolerance"] == "all" and config["errors.log.include.messages"] == "false"


def test_a_url_dsn_without_a_port_gets_postgres_port() -> None:
    config = cdc.connector_config("postgresql://adserve:pw@pg.prod/campaigns")
    assert (config["database.hostname"], config["database.port"], config["database.password"]) == (
        "pg.prod", "5432", "pw")


def test_the_local_platform_dsn_gives_the_connector_it_always_had() -> None:
    config = cdc.connector_config("host=127.0.0.1 port=15432 user=adserve dbname=adserve")
    assert (config["database.hostname"], config["database.port"], config["database.password"]) == (
        "127.0.0.1", "15432", "")
    assert "database.sslmode" not in config


def test_the_password_is_masked_and_a_reference_is_not() -> None:
    assert cdc.masked_config(cdc.connector_config(PROD_DSN))["database.password"] == "***"
    assert "s3cr et" not in json.dumps(cdc.masked_config(cdc.connector_config(PROD_DSN)))
    ref = "${file:/opt/kafka/secrets/pg.properties:password}"
    config = cdc.connector_config(PROD_DSN, password_ref=ref)
    assert config["database.password"] == ref and cdc.masked_config(config)["database.password"] == ref
    assert cdc.masked_config(cdc.connector_config("host=h user=u dbname=d"))["database.password"] == ""


@pytest.mark.parametrize("dsn, named", [("host=/var/run/postgresql user=u dbname=d", "socket"),
                                        ("user=u dbname=d password=hidden", "host"),
                                        ("host=h user=u password=hidden port", "not a libpq DSN")])
def test_a_dsn_debezium_cannot_use_is_refused_without_its_password(dsn: str, named: str) -> None:
    with pytest.raises(PlatformError, match=named) as caught:
        cdc.connector_config(dsn)
    assert "postgres.dsn" in str(caught.value) and "hidden" not in str(caught.value)


def test_cdc_register_dry_run_prints_the_config_masked(monkeypatch, capsys, tmp_path) -> None:
    secret = tmp_path / "postgres-dsn"
    secret.write_text(PROD_DSN)
    settings = tmp_path / "settings.toml"
    settings.write_text(f'[postgres]\ndsn_file = "{secret}"\n')
    monkeypatch.setenv("ADSERVE_SETTINGS_FILE", str(settings))
    monkeypatch.delenv("ADSERVE_POSTGRES_DSN", raising=False)
    from streams import endpoints

    endpoints.forget()
    try:
        assert main(["cdc", "register", "--dry-run"]) == 0
    finally:
        endpoints.forget()
    out = capsys.readouterr().out
    assert "pg.prod" in out and '"database.password": "***"' in out and "s3cr et" not in out


def test_the_commands_parse() -> None:
    parser = build_parser()
    assert parser.parse_args(["topics", "create"]).replication_factor == 3
    assert parser.parse_args(["topics", "create", "--replication-factor", "1", "--dry-run"]).dry_run
    assert parser.parse_args(["cdc", "register", "--connect-url", "http://c:8083"]).connect_url == "http://c:8083"
    assert parser.parse_args(["advertisers", "migrate"]).handler.__name__ == "cmd_migrate"


def test_a_replication_factor_below_one_is_refused(capsys) -> None:
    assert main(["topics", "create", "--replication-factor", "0"]) == 2
    assert "--replication-factor 0" in capsys.readouterr().err
