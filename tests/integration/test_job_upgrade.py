"""`adserve jobs upgrade` on the real platform, mid-stream: budget_pacing and click_aggregator are stopped with a
savepoint and started again from it (jobs.deploy.upgrade, the command's own code path) while spend reports and
beacons keep coming. No spend is lost or counted twice across the upgrade, and no event is billed twice: the
billed totals equal the nightly recount of the archived events (pipelines/nightly_recount)."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from core import clicks
from jobs import deploy
from schemas.codec import AvroCodec
from streams import kafka
from tests.factories import archived_rows
from tests.integration.test_budget_pacing_job import PARTITIONS, Feed
from tests.integration.test_budget_pacing_job import _campaign as _pacing_campaign
from tests.integration.test_budget_pacing_job import _cut, _records, _report, _wait_for_state
from tests.integration.test_click_aggregator_job import CAMPAIGNS, Beacons, _wait_billed

T0 = 1_767_614_400_000  # 2026-01-05 12:00:00 UTC
DOLLAR = 1_000_000
BEFORE, UNTIL = 40, 90  # seconds of event time sent before the upgrade starts, and in all


def _submission(platform) -> dict:
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink

    return {"jobmanager": f"{platform.host}:{platform.flink_rest_port}", "conf_dir": Flink(platform).conf_dir,
            "common": ["--bootstrap", platform.kafka_bootstrap, "--connector-jar", str(flink_connector_jar(platform)),
                       "--checkpoint-interval-ms", "1000", "--restart-attempts", "50", "--shards", "2"]}


def _upgrade(platform, name: str, job_args: list[str]) -> deploy.Upgrade:
    """What `adserve jobs upgrade NAME -- ARGS` does, and the new job running."""
    submission = _submission(platform)
    done = deploy.upgrade(name, rest_url=platform.flink_rest_url, jobmanager=submission["jobmanager"],
                          conf_dir=submission["conf_dir"], job_args=job_args)
    deploy.wait_running(platform.flink_rest_url, done.job_id)
    return done


def _runs_cleanly(platform, job_id: str, timeout_s: float = 120) -> None:
    """The job restored from the savepoint completes checkpoints of its own and never failed over (a restore
    that cannot checkpoint would restart from the savepoint again and again, counting nothing new)."""
    from infra.platform.services import http_json

    deadline = time.monotonic() + timeout_s
    while http_json(f"{platform.flink_rest_url}/jobs/{job_id}/checkpoints")["counts"]["completed"] < 2:
        assert time.monotonic() < deadline, f"the upgraded job {job_id} completed no checkpoint"
        time.sleep(1)
    history = http_json(f"{platform.flink_rest_url}/jobs/{job_id}/exceptions")["exceptionHistory"]["entries"]
    assert history == [], history[0]["exceptionName"] if history else None


def _end(platform, names: set[str], job_ids: set[str] = frozenset()) -> None:
    """Stop the jobs this module started (by name or id) with a savepoint; cancel one that cannot take it."""
    for job in deploy.list_jobs(platform.flink_rest_url):
        if job.state not in deploy.ENDED_STATES and (job.name in names or job.job_id in job_ids):
            try:
                deploy.stop(platform.flink_rest_url, job.job_id)
            except deploy.DeployError:
                deploy.cancel(platform.flink_rest_url, job.job_id)


class Stream(threading.Thread):
    """Sends one second of event time after another (`send(second)`) at a few seconds of event time per wall
    second, so records keep coming while a job is stopped and started again."""

    def __init__(self, send, seconds: range, flush):
        super().__init__(daemon=True)
        self.send, self.seconds, self.flush, self.failure = send, seconds, flush, None

    def run(self) -> None:
        try:
            for second in self.seconds:
                self.send(second)
                if second % 5 == 0:
                    self.flush()
                    time.sleep(0.5)
            self.flush()
        except Exception as exc:  # noqa: BLE001 - kept and raised in the test's own thread by finish()
            self.failure = exc

    def finish(self, timeout_s: float = 120) -> None:
        self.join(timeout_s)
        assert not self.is_alive(), "the stream of records did not finish"
        if self.failure is not None:
            raise self.failure


@pytest.fixture(scope="module")
def pacing_job(platform):
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"test.upgrade.pacing.{name}.{suffix}"
              for name in ("spend", "campaigns", "ads", "billed", "state", "leases", "dead")}
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="test", schema="", partitions=PARTITIONS if n == "spend" else 1) for n, t in topics.items()))
    args = [*_submission(platform)["common"], "--group-id", f"adserve-upgrade-pacing-{suffix}",
            "--spend-topic", topics["spend"], "--campaigns-topic", topics["campaigns"], "--ads-topic", topics["ads"],
            "--billed-topic", topics["billed"], "--state-topic", topics["state"], "--leases-topic", topics["leases"],
            "--dead-letter-topic", topics["dead"], "--redis-url", "", "--heartbeat-ms", "10000"]
    submission = _submission(platform)
    job_id = deploy.deploy("budget_pacing", jobmanager=submission["jobmanager"], conf_dir=submission["conf_dir"],
                           job_args=args)
    deploy.wait_running(platform.flink_rest_url, job_id)
    yield {"topics": topics, "args": args}
    _end(platform, {"budget_pacing"})


def test_an_upgraded_budget_job_keeps_every_campaigns_committed_spend(platform, pacing_job):
    """301 spends only before the upgrade: its committed spend is the same in the new job's states. 302 spends
    throughout (single reports, some sent twice) and 303 through batches: their final committed spend is the
    total of the reports, each counted once."""
    topics = pacing_job["topics"]
    feed = Feed(platform.kafka_bootstrap, topics)
    for campaign_id in (301, 302, 303):
        feed.campaign(_pacing_campaign(campaign_id, 10_000 * DOLLAR))
    expected = {301: 0, 302: 0, 303: 0}

    def send(second: int) -> None:
        now = T0 + second * 1000
        if second <= 20:
            feed.spend(_report("s1", second, 301, now, 2000 + second))
            expected[301] += 2000 + second
        if second <= UNTIL - 15:
            feed.spend(_report("s2", second, 302, now, 1000 + second), times=2 if second % 4 == 0 else 1)
            expected[302] += 1000 + second
            feed.batches(_cut("b1", second, now, {303: 3000 + second}))
            expected[303] += 3000 + second
        feed.heartbeat(now)

    for second in range(1, BEFORE + 1):
        send(second)
    feed.flush()
    before = _wait_for_state(platform, topics["state"], 301, T0 + 30_000)  # its last window closed at +30 s
    assert before["committed_spend_micros"] == expected[301]
    old_states = len(_records(platform, topics["state"]))

    stream = Stream(send, range(BEFORE + 1, UNTIL + 1), feed.flush)
    stream.start()
    upgrade = _upgrade(platform, "budget_pacing", pacing_job["args"])
    stream.finish()
    assert upgrade.savepoint and upgrade.job_id != upgrade.stopped_job_id
    _runs_cleanly(platform, upgrade.job_id)

    _wait_for_state(platform, topics["state"], 302, T0 + (UNTIL - 10) * 1000)  # the last spend's step
    states = [r for _, r in _records(platform, topics["state"])]
    new_states = states[old_states:]
    after_301 = [s for s in new_states if s["campaign_id"] == 301 and s["event_time"] > before["event_time"]]
    assert after_301, "the new job sent no state of 301"
    assert {s["committed_spend_micros"] for s in after_301} == {expected[301]}  # unchanged across the upgrade
    for campaign_id in (302, 303):
        latest = max((s for s in states if s["campaign_id"] == campaign_id), key=lambda s: s["event_time"])
        assert latest["committed_spend_micros"] == expected[campaign_id], campaign_id
        series = [s["committed_spend_micros"] for s in sorted(
            (s for s in states if s["campaign_id"] == campaign_id), key=lambda s: s["event_time"])]
        assert series == sorted(series), f"{campaign_id}'s committed spend went back: state lost in the upgrade"


@pytest.fixture(scope="module")
def billing_jobs(platform, tmp_path_factory):
    from infra.platform.topics import TopicSpec, ensure_topics

    suffix = uuid.uuid4().hex[:8]
    topics = {name: f"test.upgrade.clicks.{name}.{suffix}" for name in ("events", "campaigns", "billed", "dead")}
    ensure_topics(platform.kafka_bootstrap, tuple(
        TopicSpec(t, key="test", schema="", partitions=2 if n == "events" else 1) for n, t in topics.items()))
    submission = _submission(platform)
    args = [*submission["common"], "--group-id", f"adserve-upgrade-clicks-{suffix}", "--idle-timeout-ms", "60000",
            "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
            "--billed-topic", topics["billed"], "--dead-letter-topic", topics["dead"]]
    job_id = deploy.deploy("click_aggregator", jobmanager=submission["jobmanager"], conf_dir=submission["conf_dir"],
                           job_args=args)
    archive = tmp_path_factory.mktemp("archive")
    archiver_id = deploy.deploy(
        "archiver", jobmanager=submission["jobmanager"], conf_dir=submission["conf_dir"],
        job_args=[*submission["common"][:4], "--group-id", f"adserve-upgrade-archive-{suffix}",
                  "--checkpoint-interval-ms", "1000", "--archive-dir", str(archive),
                  "--topics", ",".join(topics[n] for n in ("events", "campaigns", "billed"))])
    deploy.wait_running(platform.flink_rest_url, job_id)
    deploy.wait_running(platform.flink_rest_url, archiver_id)
    yield {"topics": topics, "args": args, "archive": archive}
    _end(platform, {"click_aggregator"}, {archiver_id})


def test_an_upgraded_click_aggregator_bills_every_event_once_as_the_nightly_recount_does(platform, billing_jobs,
                                                                                         tmp_path):
    from pipelines import nightly_recount

    topics, archive = billing_jobs["topics"], billing_jobs["archive"]
    feed = Beacons(platform.kafka_bootstrap, topics)
    for campaign in CAMPAIGNS:
        feed.campaign(campaign)
    feed.flush()

    def send(second: int) -> None:
        now = T0 + second * 1000
        if second <= UNTIL - 15:
            first = feed.event(201, f"imp-201-{second}", "IMPRESSION", now, price=20_000, billing="IMPRESSION")
            if second % 5 == 0:  # a beacon fired again: billed once, whichever job sees which copy
                feed.resend(dict(first, event_id=uuid.uuid4().hex, event_time=now + 300))
            if second % 3 == 0:
                feed.event(203, f"imp-203-{second}", "CLICK", now, price=DOLLAR, billing="CLICK",
                           ip=f"10.4.{second}.1")
        feed.clock(now)

    for second in range(1, BEFORE + 1):
        send(second)
    feed.flush()
    _wait_billed(platform, topics["billed"], 999, T0 + 30_000)

    stream = Stream(send, range(BEFORE + 1, UNTIL + 1), feed.flush)
    stream.start()
    upgrade = _upgrade(platform, "click_aggregator", billing_jobs["args"])
    stream.finish()
    assert upgrade.savepoint and upgrade.job_id != upgrade.stopped_job_id
    _runs_cleanly(platform, upgrade.job_id)

    totals = _wait_billed(platform, topics["billed"], 999, T0 + (UNTIL - 10) * 1000)
    recounted = clicks.recount(feed.sent, CAMPAIGNS)
    for campaign_id in (201, 203):
        for name in ("billed_spend_micros", "billed_impressions", "billed_clicks", "invalid_credit_micros"):
            assert totals[campaign_id][name] == recounted[(campaign_id, "2026-01-05")][name], (campaign_id, name)

    deadline = time.monotonic() + 120
    while True:  # the archive commits at checkpoints: wait for the last billed totals to be in one
        billed = [AvroCodec().decode(r["v"]) for r in archived_rows(archive, topics["billed"])]
        if any(b["campaign_id"] == 999 and b["event_time"] >= T0 + (UNTIL - 10) * 1000 for b in billed):
            break
        assert time.monotonic() < deadline, "the archive never caught up with the billed totals"
        time.sleep(2)
    summary = nightly_recount.run([
        "--archive", str(archive), "--day", "2026-01-05", "--output", str(tmp_path / "recount"),
        "--events-topic", topics["events"], "--campaigns-topic", topics["campaigns"],
        "--billed-topic", topics["billed"]], save_main_session=False)
    assert summary["differences"] == 0, (tmp_path / "recount" / "differences.jsonl").read_text()
    assert summary["recount"]["201"]["billed_impressions"] == UNTIL - 15
    dead = list(kafka.read_all(platform.kafka_bootstrap, topics["dead"]))
    assert dead == []


def test_a_budget_job_given_a_curves_file_that_is_missing_is_never_submitted(platform):
    """A wrong --curves fails `flink run` on the submitting host, naming the setting; no job reaches the cluster."""
    submission = _submission(platform)
    before = {j.job_id for j in deploy.list_jobs(platform.flink_rest_url)}
    with pytest.raises(deploy.DeployError, match="--curves / ADSERVE_CURVES: /nonexistent/curves.json does not"):
        deploy.deploy("budget_pacing", jobmanager=submission["jobmanager"], conf_dir=submission["conf_dir"],
                      job_args=[*submission["common"], "--curves", "/nonexistent/curves.json"])
    assert {j.job_id for j in deploy.list_jobs(platform.flink_rest_url)} == before
