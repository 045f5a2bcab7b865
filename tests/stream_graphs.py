"""The stream graph each job's real entry point would submit, built in a child process: `python -m
tests.stream_graphs JOB [JOB ...]` prints, as one JSON list, the (uid, operator name) of every node of each named
job's graph, the jobs built one after another in that one process (execution stops at env.execute; no cluster,
no broker). A child process keeps PyFlink's Beam operation factories, which building a job registers, out of the
test process: there they would take over the Beam pipelines' DirectRunner bundles in later tests."""
from __future__ import annotations

import importlib
import json
import sys

from schemas import topics

ARGS = {"archiver": ["--archive-dir", "/tmp/archive", "--topics", f"{topics.AD_SERVED},{topics.AD_EVENTS}"],
        "features": ["--redis-url", "redis://127.0.0.1:1/0"]}


def stream_graph_uids(job: str) -> list[tuple[str | None, str]]:
    """(uid, operator name) of each node of the stream graph `job`'s entry point would submit."""
    from pyflink.datastream import StreamExecutionEnvironment

    from jobs.common import environment
    from jobs.common.jars import fetched_jar

    graphs = []
    StreamExecutionEnvironment.execute = lambda env, job_name=None: graphs.append(env._generate_stream_graph(False))
    environment.check_kafka = lambda endpoint: None
    main = importlib.import_module(f"jobs.{job}.main").main
    main(["--bootstrap", "127.0.0.1:1", "--connector-jar", str(fetched_jar("kafka")), *ARGS.get(job, [])])
    [graph] = graphs
    return [(node.getTransformationUID(), node.getOperatorName()) for node in graph.getStreamNodes().toArray()]


if __name__ == "__main__":
    print(json.dumps([stream_graph_uids(job) for job in sys.argv[1:]]))
