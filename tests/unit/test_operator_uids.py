"""Every operator of every job has a stable uid, so a savepoint of one build restores into the next: each job's
real entry point builds its graph in a child process (tests.stream_graphs: execution stopped at env.execute, no
cluster, no broker), and the stream graph Flink would submit is read back."""
from __future__ import annotations

from pathlib import Path

import pytest

from jobs.uids import base_uid, numbered

pytest.importorskip("pyflink")

# The uids the jobs pin in code on their stateful DataStream operators (never change one once deployed).
PINNED = {
    "budget_pacing": {"spend-windows", "pace-campaigns"},
    "click_aggregator": {"first-seen", "bill-campaigns"},
    "event_counts": {"count-per-campaign-minute"},
    "index_builder": {"compile-serving-records"},
    "training_join": {"label-impressions"},
    "features": {"window-per-ad", "publish-snapshot", "window-per-user"},
    "archiver": set(),
}
# Sources and sinks are named by their tables: their offsets and transactions follow the table, not its place.
TABLES = {
    "budget_pacing": {"source:spend_in", "source:campaigns_in", "source:billed_in", "source:ads_in",
                      "sink:state_out", "sink:leases_out", "sink:dead_letters_out"},
    "click_aggregator": {"source:events_in", "source:campaigns_in", "sink:billed_out", "sink:dead_letters_out"},
    "archiver": {"source:archive_in_ad.served", "op:archive_in_ad.served/StreamingFileWriter",
                 "op:archive_in_ad.served/PartitionCommitter"},
}


def _stream_graph_uids(*jobs: str) -> list[list[tuple[str | None, str]]]:
    """(uid, operator name) of each node of each job's stream graph, the jobs built one after another in one child
    process (tests.stream_graphs)."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "tests.stream_graphs", *jobs], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return [[(uid, name) for uid, name in graph] for graph in json.loads(done.stdout.splitlines()[-1])]


@pytest.fixture(scope="module")
def connector_jar():
    from jobs.common.jars import MissingJar, fetched_jar

    try:
        return fetched_jar("kafka")
    except MissingJar as exc:
        pytest.skip(f"the Kafka connector jar is not fetched here: {exc}")


@pytest.mark.parametrize("job", sorted(PINNED))
def test_every_operator_of_every_job_has_a_unique_uid_and_its_stateful_ones_are_pinned(job, connector_jar):
    [nodes] = _stream_graph_uids(job)
    without = [name for uid, name in nodes if uid is None]
    assert without == [], f"{job}: operators without a uid: {without}"
    uids = [uid for uid, _ in nodes]
    assert len(uids) == len(set(uids))
    assert PINNED[job] <= set(uids)
    assert TABLES.get(job, set()) <= set(uids)


def test_a_jobs_uids_do_not_depend_on_what_was_built_before_it_in_the_same_process(connector_jar):
    # click_aggregator built between the two moves the planner's node counter on
    first, _, again = _stream_graph_uids("budget_pacing", "click_aggregator", "budget_pacing")
    assert sorted(uid for uid, _ in again) == sorted(uid for uid, _ in first)


def test_a_planner_operator_is_named_without_its_node_number():
    assert base_uid("OneInputTransformation", "Calc[12]") == "op:Calc"
    assert base_uid("SourceTransformation", "spend_in[1]") == "source:spend_in"
    assert base_uid("SinkTransformation", "billed_out[30]") == "sink:billed_out"
    assert base_uid("LegacySourceTransformation", "*anonymous_datastream_source$5*[18]") == \
        "source:anonymous_datastream_source"


def test_a_repeated_name_is_told_apart_by_the_sources_it_reads():
    from jobs.uids import qualified

    assert qualified(["op:Calc", "op:Calc", "sink:end", "sink:state_out"], ["a", "b", "a", "a+b"]) == \
        ["op:a/Calc", "op:b/Calc", "sink:end", "sink:state_out"]


def test_repeated_names_are_numbered_in_build_order_and_unique_ones_are_not():
    assert numbered(["op:Calc", "source:a", "op:Calc", "op:Map"]) == ["op:Calc#1", "source:a", "op:Calc#2",
                                                                       "op:Map"]
