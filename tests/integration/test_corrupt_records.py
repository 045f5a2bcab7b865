"""Every streaming job against corrupt records on every topic it reads, deployed on the platform's cluster: each
corrupt record (tests/corrupt_records.py: random bytes, truncated, another schema, empty, null value, null key,
wrong marker, unknown fingerprint, trailing bytes) is dead-lettered once and counted, the valid records around it
are read and checkpointed past, and the job never restarts.

The jobs run all at once on fresh one-partition topics and are stopped afterwards. `index_builder` reads the
platform's own change topics (cdc.public.*), which other tests share, so its corrupt changes are checked on its
function (tests/unit/test_corrupt_records.py); `archiver` keeps every record's bytes as they came (it decodes
nothing, so a corrupt record is archived like any other)."""
from __future__ import annotations

import json
import random
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from jobs import deploy
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka
from tests import features_records as records
from tests.billed_feed import campaign_version
from tests.corrupt_records import Produced, avro_corrupt, interleave

CODEC = AvroCodec()
T0 = records.T0
VALID_PER_TOPIC = 12
SEED = 33
EVENT_TYPE = topics.record_type(topics.AD_EVENTS)
SERVED_TYPE = topics.record_type(topics.AD_SERVED)
CONVERSION_TYPE = topics.record_type(topics.AD_CONVERSIONS)
FEEDBACK_TYPE = topics.record_type(topics.AD_FEEDBACK)
AD_TYPE = topics.record_type(topics.SERVING_ADS)
CAMPAIGN_TYPE = topics.record_type(topics.SERVING_CAMPAIGNS)
SPEND_TYPE = topics.record_type(topics.BUDGET_SPEND)
BILLED_TYPE = topics.record_type(topics.BILLED_SPEND)
DELETION_TYPE = topics.record_type(topics.PRIVACY_DELETIONS)
DEAD_LETTER_TYPE = topics.record_type(topics.DEAD_LETTERS)


def _event(i: int, at_ms: int) -> dict:
    return records.beacon(f"imp-{i}", 10 + i % 3, 1 + i % 2, at_ms, "CLICK" if i % 4 == 3 else "IMPRESSION", n=i)


def _spend(i: int, at_ms: int) -> dict:
    return {"server_id": "s1", "sequence": i + 1, "campaign_id": 1 + i % 2, "event_time": at_ms,
            "interval_start": at_ms - 1000, "expected_spend_micros": 1000 + i, "served_ads": 1,
            "eligible_requests": 5, "lease_id": None, "max_price_micros": 2_000_000, "wants_slice": False,
            "campaigns": None}


def _billed(i: int, at_ms: int) -> dict:
    return {"campaign_id": 1 + i % 2, "event_time": at_ms, "budget_day": "2027-01-15",
            "billed_spend_micros": 1000 * (i + 1), "billed_impressions": i + 1, "billed_clicks": 0,
            "absorbed_overspend_micros": 0, "invalid_credit_micros": 0, "joined_clicks": 0}


# record type -> (its valid record number i at at_ms, its key)
VALID: dict[str, tuple[Callable[[int, int], dict], Callable[[dict], str]]] = {
    EVENT_TYPE: (_event, lambda r: str(r["campaign_id"])),
    SERVED_TYPE: (lambda i, at: records.served(f"req-{i}", at, [records.winner(f"imp-{i}", 10 + i % 3, 1 + i % 2)]),
                  lambda r: r["request_id"]),
    CONVERSION_TYPE: (lambda i, at: records.conversion(f"imp-{i}", 10 + i % 3, 1 + i % 2, at),
                      lambda r: r["impression_id"]),
    FEEDBACK_TYPE: (lambda i, at: records.feedback(f"imp-{i}", 10 + i % 3, 1 + i % 2, at),
                    lambda r: r["impression_id"]),
    AD_TYPE: (lambda i, at: records.serving_ad(10 + i % 3, 1 + i % 2, 1, at, version=i + 1),
              lambda r: str(r["ad_id"])),
    CAMPAIGN_TYPE: (lambda i, at: dict(campaign_version(1 + i % 2, 100_000_000, at_ms=at), version=i + 1),
                    lambda r: str(r["campaign_id"])),
    SPEND_TYPE: (_spend, lambda r: str(r["campaign_id"])),
    BILLED_TYPE: (_billed, lambda r: str(r["campaign_id"])),
    DELETION_TYPE: (lambda i, at: {"user_id": f"u-{i}", "event_time": at, "request_id": f"del-{i}", "reason": None},
                    lambda r: r["user_id"]),
}


@dataclass(frozen=True)
class JobUnderTest:
    """A job, the record type of each topic it reads (by its flag's name), the topics it writes, and flags."""

    name: str
    inputs: dict[str, str]
    outputs: tuple[str, ...]
    flags: tuple[str, ...] = ()


JOBS = (
    JobUnderTest("event_counts", {"input": EVENT_TYPE}, ("output",)),
    JobUnderTest("training_join", {"served": SERVED_TYPE, "events": EVENT_TYPE, "conversions": CONVERSION_TYPE,
                                   "deletions": DELETION_TYPE}, ("examples",)),
    JobUnderTest("click_aggregator", {"events": EVENT_TYPE, "campaigns": CAMPAIGN_TYPE}, ("billed",),
                 ("--shards", "2", "--idle-timeout-ms", "60000")),
    JobUnderTest("budget_pacing", {"spend": SPEND_TYPE, "campaigns": CAMPAIGN_TYPE, "ads": AD_TYPE,
                                   "billed": BILLED_TYPE}, ("state", "leases"), ("--shards", "2")),
    JobUnderTest("features", {"served": SERVED_TYPE, "events": EVENT_TYPE, "conversions": CONVERSION_TYPE,
                              "feedback": FEEDBACK_TYPE, "ads": AD_TYPE, "campaigns": CAMPAIGN_TYPE,
                              "deletions": DELETION_TYPE},
                 ("features", "registry")),
)


@dataclass
class Run:
    """One job's run: its topics, what was produced on each input, and what the cluster said."""

    job: JobUnderTest
    topics: dict[str, str]
    group_id: str
    produced: dict[str, list[Produced]] = field(default_factory=dict)
    job_id: str = ""

    def corrupt(self) -> set[tuple[str, int]]:
        """(topic, offset) of every corrupt record produced: one partition, so the offset is its index."""
        return {(self.topics[flag], offset) for flag, rows in self.produced.items()
                for offset, row in enumerate(rows) if row.corrupt}


def _rest(platform, path: str):
    return json.loads(urllib.request.urlopen(f"{platform.flink_rest_url}{path}", timeout=5).read())


def _restarts(platform, job_id: str) -> int:
    """Flink's numRestarts job metric: how many times the job restarted since it was submitted."""
    values = _rest(platform, f"/jobs/{job_id}/metrics?get=numRestarts")
    return int(float(values[0]["value"])) if values else -1


def _exceptions(platform, job_id: str) -> list:
    """The job's exception history: every failure that restarted (or failed) it."""
    return _rest(platform, f"/jobs/{job_id}/exceptions").get("exceptionHistory", {}).get("entries", [])


def _counted(platform, job_id: str, metric: str = "corrupt_records") -> int:
    """A counter summed over every operator and subtask of the job."""
    total = 0
    for vertex in _rest(platform, f"/jobs/{job_id}")["vertices"]:
        path = f"/jobs/{job_id}/vertices/{vertex['id']}/metrics"
        names = [m["id"] for m in _rest(platform, path) if m["id"].endswith(f".{metric}")]
        if names:
            total += sum(int(float(v["value"])) for v in _rest(platform, f"{path}?get={','.join(names)}"))
    return total


def _committed_behind(platform, run: Run) -> dict[str, int]:
    """Per input topic, how many records its end offset is ahead of the job's committed offset (the job commits
    at each completed checkpoint, so 0 means every record was read and checkpointed past)."""
    from confluent_kafka import TopicPartition

    consumer = kafka.consumer(platform.kafka_bootstrap, run.group_id)
    try:
        topics = [run.topics[flag] for flag in run.job.inputs]
        committed = consumer.committed([TopicPartition(t, 0) for t in topics], timeout=10)
        return {tp.topic: len(run.produced[_flag(run, tp.topic)]) - max(tp.offset, 0) for tp in committed}
    finally:
        consumer.close()


def _flag(run: Run, topic: str) -> str:
    return next(flag for flag, name in run.topics.items() if name == topic)


def _start(platform, tmp_path, job: JobUnderTest) -> Run:
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    flags = [*job.inputs, *job.outputs, "dead-letter"]
    topics = {flag: f"test.corrupt.{job.name}.{flag}.{suffix}" for flag in flags}
    ensure_topics(platform.kafka_bootstrap, tuple(TopicSpec(t, key="test", schema="", partitions=1)
                                                  for t in topics.values()))
    run = Run(job, topics, f"adserve-corrupt-{job.name}-{suffix}")
    extra = {"features": ["--snapshot-dir", str(tmp_path / f"features-{suffix}"), "--redis-url", platform.redis_url],
             "budget_pacing": ["--redis-url", platform.redis_url]}.get(job.name, [])
    run.job_id = deploy.deploy(job.name, jobmanager=f"{platform.host}:{platform.flink_rest_port}",
                               conf_dir=Flink(platform).conf_dir,
                               job_args=["--bootstrap", platform.kafka_bootstrap,
                                         "--connector-jar", str(flink_connector_jar(platform)),
                                         "--group-id", run.group_id, "--startup-mode", "earliest-offset",
                                         "--checkpoint-interval-ms", "1000", *job.flags, *extra,
                                         *[arg for flag, topic in topics.items() for arg in (f"--{flag}-topic", topic)]])
    deploy.wait_running(platform.flink_rest_url, run.job_id, timeout_s=180)
    return run


def _inject(platform, run: Run, rng: random.Random) -> None:
    """Valid records of each input's type with one corrupt record of every kind between them."""
    for index, (flag, record_type) in enumerate(run.job.inputs.items()):
        make, key = VALID[record_type]
        valid = []
        for i in range(VALID_PER_TOPIC):
            record = make(i, T0 + index * 10 + i * 500)
            valid.append((key(record).encode(), CODEC.encode(record_type, record), int(record["event_time"])))
        rows = interleave(valid, avro_corrupt(valid[0][1], rng), rng)
        kafka.produce_all(platform.kafka_bootstrap, run.topics[flag],
                          [(r.key, r.value, r.timestamp_ms) for r in rows])
        run.produced[flag] = rows


def _settle(platform, run: Run, timeout_s: float = 90) -> tuple[list[dict], int]:
    """Wait until every record is checkpointed past, the dead letters are in and the counter agrees; returns the
    dead letters and the counter's value."""
    deadline = time.monotonic() + timeout_s
    expected = run.corrupt()
    letters: list[dict] = []
    counted = -1
    while time.monotonic() < deadline:
        behind = _committed_behind(platform, run)
        letters = [CODEC.decode(m.value(), DEAD_LETTER_TYPE) for m in
                   kafka.read_all(platform.kafka_bootstrap, run.topics["dead-letter"], timeout_s=30, idle_s=1)]
        counted = _counted(platform, run.job_id)
        if not any(behind.values()) and len(letters) >= len(expected) and counted >= len(expected):
            break
        time.sleep(2)
    return letters, counted


def _check(platform, run: Run, letters: list[dict], counted: int) -> list[str]:
    """What went wrong with one job's run (empty: every corrupt record dead-lettered once, counted, nothing else
    dead-lettered, every record checkpointed past, no restart)."""
    problems = []
    expected = run.corrupt()
    got = sorted((letter["source_topic"], letter["source_offset"]) for letter in letters)
    kinds = {(run.topics[flag], offset): row.kind for flag, rows in run.produced.items()
             for offset, row in enumerate(rows)}
    missing = sorted(expected - set(got))
    if missing:
        problems.append(f"not dead-lettered: {[(t, o, kinds[(t, o)]) for t, o in missing]}")
    if len(got) != len(set(got)):
        problems.append(f"dead-lettered more than once: {[x for x in set(got) if got.count(x) > 1]}")
    extra = sorted(set(got) - expected)
    if extra:
        problems.append(f"valid records dead-lettered: {[(t, o, kinds.get((t, o))) for t, o in extra]}")
    if any(letter["job"] != run.job.name for letter in letters):
        problems.append(f"dead letters of another job: {sorted({letter['job'] for letter in letters})}")
    if counted != len(expected):
        problems.append(f"corrupt_records counted {counted}, injected {len(expected)}")
    behind = {topic: n for topic, n in _committed_behind(platform, run).items() if n}
    if behind:
        problems.append(f"records not checkpointed past (topic: records behind): {behind}")
    state, _ = deploy.job_state(platform.flink_rest_url, run.job_id)
    restarts, exceptions = _restarts(platform, run.job_id), _exceptions(platform, run.job_id)
    if state != "RUNNING" or restarts != 0 or exceptions:
        causes = [str(e.get("exceptionName", "")) + ": " + str(e.get("stacktrace", ""))[:400] for e in exceptions]
        problems.append(f"job {state}, numRestarts {restarts}, exceptions {causes}")
    return [f"{run.job.name}: {p}" for p in problems]


def _exercise(platform, tmp_path, job: JobUnderTest, seed: int) -> list[str]:
    run = _start(platform, tmp_path, job)
    try:
        _inject(platform, run, random.Random(seed))
        letters, counted = _settle(platform, run)
        return _check(platform, run, letters, counted)
    finally:
        try:
            deploy.stop(platform.flink_rest_url, run.job_id)
        except deploy.DeployError:  # a job that failed cannot take a savepoint: cancel it
            deploy.cancel(platform.flink_rest_url, run.job_id)


def test_every_corrupt_record_is_dead_lettered_and_counted_and_no_job_restarts(platform, tmp_path):
    with ThreadPoolExecutor(max_workers=len(JOBS)) as pool:
        found = pool.map(lambda job: _exercise(platform, tmp_path, job, SEED + JOBS.index(job)), JOBS)
        problems = [p for job_problems in found for p in job_problems]
    assert problems == []
