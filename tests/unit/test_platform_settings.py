"""Platform settings and topic definitions (no servers)."""
import re
from pathlib import Path

import pytest

from infra.platform.settings import PlatformSettings
from schemas import topics
from schemas.topics import TOPICS_BY_NAME

PLATFORM_DOC = Path(__file__).resolve().parents[2] / "docs" / "platform.md"


def test_every_port_can_be_overridden_from_the_environment():
    settings = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/x", "ADSERVE_KAFKA_PORT": "29092",
                                          "ADSERVE_FLINK_TASK_SLOTS": "12"})
    assert settings.kafka_bootstrap == "127.0.0.1:29092"
    assert settings.flink_task_slots == 12
    assert settings.home == Path("/tmp/x")


def test_the_pacing_dashboard_of_the_simulated_day_has_a_platform_port_of_its_own():
    settings = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/x"})
    assert settings.dashboard_port == 18092
    assert PlatformSettings.from_env({"ADSERVE_DASHBOARD_PORT": "28092"}).dashboard_port == 28092
    assert settings.as_env()["ADSERVE_DASHBOARD_PORT"] == "18092"


def test_a_bad_port_value_names_the_variable():
    with pytest.raises(ValueError, match="ADSERVE_REDIS_PORT"):
        PlatformSettings.from_env({"ADSERVE_REDIS_PORT": "six"})


def test_settings_round_trip_through_the_environment():
    settings = PlatformSettings.from_env({"ADSERVE_HOME": "/tmp/y", "ADSERVE_CONNECT_PORT": "28083"})
    assert PlatformSettings.from_env(settings.as_env()) == settings


@pytest.mark.parametrize("name", [topics.SERVING_ADS, topics.SERVING_CAMPAIGNS, topics.BUDGET_STATE])
def test_state_topics_are_compacted(name):
    assert TOPICS_BY_NAME[name].kafka_config()["cleanup.policy"] == "compact"


@pytest.mark.parametrize("name", [topics.AD_SERVED, topics.AD_EVENTS, topics.BUDGET_SPEND, topics.BUDGET_LEASES,
                                  topics.BILLED_SPEND, topics.TRAINING_EXAMPLES])
def test_log_topics_are_not_compacted(name):
    assert TOPICS_BY_NAME[name].kafka_config()["cleanup.policy"] == "delete"


def _documented_topics() -> dict[str, tuple[str, str, str, str]]:
    """docs/platform.md's topic table: name -> (key, schema, compacted, partitions), as written."""
    section = PLATFORM_DOC.read_text().split("## Topics", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = tuple(cells[1:])
    return rows


def test_every_topic_of_the_architecture_table_is_defined():
    from schemas.topics import TOPICS

    documented = _documented_topics()
    defined = {topic.name: (topic.key, f"`{topic.schema}`" if topic.schema else "Debezium JSON",
                            "yes" if topic.compacted else "no", str(topic.partitions)) for topic in TOPICS}
    assert not set(documented) - set(defined), f"not in schemas/topics.py: {set(documented) - set(defined)}"
    assert not set(defined) - set(documented), f"not in docs/platform.md: {set(defined) - set(documented)}"
    assert documented == defined


def test_a_kafka_cluster_id_never_starts_with_a_dash():
    from infra.platform.services import kafka_cluster_id

    draws = iter([b"\xfb" + bytes(15), bytes(16)])  # the first encodes to "-wAA...": drawn again
    assert kafka_cluster_id(lambda: next(draws)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(kafka_cluster_id()) == 22


def test_the_change_translation_reads_and_writes_the_topics_the_platform_creates():
    from schemas.cdc import CDC_ROUTES

    assert {cdc: serving for cdc, (serving, _) in CDC_ROUTES.items()} == {
        topics.CDC_CAMPAIGNS: topics.SERVING_CAMPAIGNS, topics.CDC_ADS: topics.SERVING_ADS,
        topics.CDC_RESERVES: topics.SERVING_RESERVES}


def test_every_port_is_documented_with_its_environment_variable_and_default():
    from dataclasses import fields

    from adserve.cli import PORTS_HELP

    doc = PLATFORM_DOC.read_text()
    for f in fields(PlatformSettings):
        if f.name.endswith("_port"):
            variable = f"ADSERVE_{f.name.upper()}"
            assert variable in doc, f"{variable}: not in docs/platform.md"
            assert f"{variable} ({f.default})" in PORTS_HELP, f"{variable}: not in `adserve --help`"
            assert str(f.default) in doc, f"{f.name}'s default {f.default}: not in docs/platform.md's table"
