"""The jobs' shared settings plumbing: jar defaults follow the platform's layout, secrets never printed, the
restart strategy a job runs with."""
from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

import pytest

from core.settings import describe
from infra.platform.jars import FLINK_CONNECTORS, FLINK_FORMATS
from core.errors import InvalidSettings
from jobs.common.args import add_common_arguments, job_parser, settings_of
from jobs.common.environment import restart_options
from jobs.common.jars import FETCHED_JARS, MissingJar, fetched_jar, jars_dir
from jobs.common.settings import JobSettings, KafkaJobSettings, option
from schemas import topics


def test_the_jobs_look_for_fetched_jars_where_the_platform_fetches_them():
    assert FETCHED_JARS["kafka"] == (FLINK_CONNECTORS.relative_dir, FLINK_CONNECTORS.marker)
    assert FETCHED_JARS["avro"] == (FLINK_FORMATS.relative_dir, FLINK_FORMATS.marker)


def test_the_newest_fetched_jar_under_adserve_home_is_the_default(tmp_path):
    folder = tmp_path / "jars" / "flink"
    folder.mkdir(parents=True)
    for version in ("3.3.0", "3.4.0"):
        (folder / f"flink-sql-connector-kafka-{version}.jar").touch()
    environ = {"ADSERVE_HOME": str(tmp_path)}
    assert jars_dir(environ) == tmp_path / "jars"
    assert fetched_jar("kafka", environ).endswith("flink-sql-connector-kafka-3.4.0.jar")


def test_a_missing_jar_says_how_to_get_it(tmp_path):
    with pytest.raises(MissingJar, match="adserve up"):
        fetched_jar("avro", {"ADSERVE_HOME": str(tmp_path)})


@dataclass(frozen=True)
class _Inner:
    redis_url: str
    token_key: str


@dataclass(frozen=True)
class _Outer:
    inner: _Inner
    topic: str


def test_printed_settings_mask_secrets_and_url_passwords():
    text = describe(_Outer(_Inner("redis://user:hunter2@db:6379/0", "s3cr3t"), topics.AD_EVENTS))
    assert "hunter2" not in text and "s3cr3t" not in text
    assert "redis://user:***@db:6379/0" in text and f"topic={topics.AD_EVENTS}" in text


def _kafka_settings(**changes) -> KafkaJobSettings:
    return dataclasses.replace(KafkaJobSettings(job_name="j", bootstrap="b", group_id="g", connector_jar="c.jar"),
                               **changes)


def test_a_job_fails_after_its_fixed_restarts_by_default():
    assert restart_options(_kafka_settings(restart_attempts=5)) == {
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": "5",
        "restart-strategy.fixed-delay.delay": "2 s"}


def test_a_job_on_a_cluster_restarts_without_limit_its_delay_bounded():
    options = restart_options(_kafka_settings(restart_strategy="exponential-delay", restart_attempts=5))
    assert options["restart-strategy.type"] == "exponential-delay"
    assert int(options["restart-strategy.exponential-delay.attempts-before-reset-backoff"]) == 2**31 - 1
    assert options["restart-strategy.exponential-delay.max-backoff"] == "2 min"
    assert not any("fixed-delay" in key for key in options)


def test_the_restart_strategy_flag_reaches_the_settings_and_refuses_others():
    parser = argparse.ArgumentParser()
    add_common_arguments(parser, "j")
    assert parser.parse_args([]).restart_strategy == "fixed-delay"
    assert parser.parse_args(["--restart-strategy", "exponential-delay"]).restart_strategy == "exponential-delay"
    with pytest.raises(SystemExit):
        parser.parse_args(["--restart-strategy", "forever"])
    with pytest.raises(InvalidSettings, match="restart strategy 'forever'"):
        restart_options(_kafka_settings(restart_strategy="forever"))


@dataclass(frozen=True, kw_only=True)
class _Settings(JobSettings):
    events_topic: str = option(topics.AD_EVENTS, "the events read")
    window_ms: int = option(60_000)
    computed: str = ""


def test_a_jobs_settings_declare_their_flags_once_and_come_back_from_them():
    parser = job_parser("j", None, _Settings)
    defaults = parser.parse_args(["--connector-jar", "c.jar"])
    assert (defaults.events_topic, defaults.window_ms, defaults.dead_letter_topic) == (topics.AD_EVENTS, 60_000,
                                                                                        topics.DEAD_LETTERS)
    assert not hasattr(defaults, "computed")  # a field without option() has no flag
    args = parser.parse_args(["--connector-jar", "c.jar", "--window-ms", "5000", "--events-topic", "e"])
    settings = settings_of(_Settings, args, "j", computed="x")
    assert (settings.events_topic, settings.window_ms, settings.computed) == ("e", 5000, "x")
    assert settings.kafka.job_name == "j" and settings.kafka.connector_jar == "c.jar"
