"""The archiver's settings and wiring, on a recording stand-in for the table environment (no cluster)."""
from __future__ import annotations

import pytest

from core.errors import InvalidArgument
from jobs.archiver.main import parse_settings
from jobs.archiver.topology import build, folder_name
from schemas import topics


class _Config:
    def __init__(self) -> None:
        self.options: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.options[key] = value


class _Statements:
    def __init__(self) -> None:
        self.inserts: list[str] = []

    def add_insert_sql(self, sql: str) -> None:
        self.inserts.append(sql)

    def attach_as_datastream(self) -> None:
        pass


class _TableEnv:
    def __init__(self) -> None:
        self.sql: list[str] = []
        self.config, self.statements = _Config(), _Statements()

    def execute_sql(self, sql: str) -> None:
        self.sql.append(sql)

    def get_config(self) -> _Config:
        return self.config

    def create_statement_set(self) -> _Statements:
        return self.statements


def _settings(*flags: str):
    return parse_settings(["--connector-jar", "kafka.jar", "--avro-jar", "avro.jar", *flags])


def test_a_local_archive_folder_becomes_a_file_uri_and_topics_are_listed(tmp_path):
    settings = _settings("--archive-dir", str(tmp_path), "--topics", f"{topics.AD_EVENTS}, {topics.AD_SERVED}")
    assert settings.archive_uri == tmp_path.resolve().as_uri()
    assert settings.topics == (topics.AD_EVENTS, topics.AD_SERVED)


def test_each_topic_gets_its_own_folder_committed_an_hour_plus_the_delay_after_its_hour(tmp_path):
    t_env = _TableEnv()
    build(t_env, _settings("--archive-dir", "s3://bucket/archive/", "--topics", topics.AD_EVENTS,
                           "--commit-delay-s", "30"))
    sink = next(sql for sql in t_env.sql if "'connector' = 'filesystem'" in sql)
    assert f"'path' = 's3://bucket/archive/{topics.AD_EVENTS}'" in sink
    assert "'sink.partition-commit.delay' = '3630 s'" in sink
    assert len(t_env.statements.inserts) == 1 and t_env.config.options["table.local-time-zone"] == "UTC"


def test_a_topic_name_that_is_not_a_safe_folder_is_refused():
    with pytest.raises(InvalidArgument):
        folder_name("../etc")
