"""`adserve bench live-loop`: the platform learning from its own traffic, measured against a world whose true
click rates are known (sim.live_world).

The world's campaigns and ads are published as the index builder would compile them; its users' model features
are their profiles in Redis. Then everything is the platform's: requests over HTTP to a real ad server process
(following its own registry topic), impressions and clicks through a real tracker process (a user clicks with
the world's true probability), the `features` job deployed on the Flink cluster publishing a snapshot every 5
minutes of event time, `training_join` labelling the traffic (bounded runs over the bench's period: a label
waits an hour of event time, which a streaming join would only reach an hour later) and `adserve model retrain
--once` training, canarying and judging. The budget job runs too: an ad server that hears nothing from it for
60 s meters every campaign, and a metered campaign without a slice fills nothing; the bench deploys
`budget_pacing` with the platform's defaults (as `adserve jobs deploy budget_pacing` does) when none runs, and
stops it again at the end. Three phases of the --requests:

  priors   (40 %): no model exists, the server ranks on priors (learned ctr_prior once a snapshot exists);
  canary   (35 %): the first trained model on --canary-share of requests (default half: a bench needs its
           verdict within the run, production canaries 1-5 %), judged by the promotion rule over at least 400
           of its clicks with the calibration band 0.9-1.1 (+-2/sqrt(n) is +-10 % at 400 clicks), overall and in
           each (placement, country, billing type) with at least 400 of its clicks (canary_clicks,
           canary_calibration, canary_segments_judged: each judged segment's clicks and ratio; the model's
           calibration against the truth is reported on its own below);
  learned  (25 %): after the promotion.

Some of the world's ads (--new-ad-share) join part-way through the priors phase: new ads.

The simulated users run in --processes client processes (bench.live_traffic), --concurrency requests in flight
each; every impression is appended to the client's file in the run's folder (`work_dir`) as it happens, and the
figures read those files and the served log once, streaming, at the end.

Figures (--json names):
  ne_served_priors, ne_served_learned, ne_oracle: normalised entropy of the served top-slot pCTR (the served
    log's) against the clicks, in the priors phase, the learned phase, and of the true probabilities of the
    learned phase's impressions; targets ne_served_learned <= 1.05 x ne_oracle and < 0.9 x ne_served_priors;
  calibration_min, calibration_max: the learned phase's predicted over true expected clicks per segment
    (placement, country) of its top-slot impressions, over segments with at least 100 expected clicks
    (calibration_segments says how many);
  feature_snapshot_age_p99_s: request time minus the version (event-time cut) of the snapshot it was served
    with, p99 over requests served with one; target <= 600;
  hot_swap_failed_requests: answers other than 200 over the whole run (snapshot, canary and model swaps
    included); target 0;
  new_ad_impressions_to_20pct: median over new ads of their impressions when their snapshot estimate
    (ctr_prior) first came within 20 % of their true top-slot rate and stayed (None when none did;
    new_ads_within_20pct says how many did);
  reserve_revenue_per_mille_gain_pct: the auction replay's recommended reserve (core.replay.recommend_reserves)
    against none, over the run's newest 10,000 served records;
  and the run's requests, impressions, clicks, verdict, model version, snapshots, phase seconds, requests/s.
Same-run baseline: ne_served_priors (the platform before it learned)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

import numpy as np

from bench.live_traffic import Clients, Tally, WorldSpec, impressions

from core.errors import RunFailed
from infra.platform import PlatformSettings

PHASES = (("priors", 0.4), ("canary", 0.35), ("learned", 0.25))
MIN_SEGMENT_EXPECTED_CLICKS = 100  # a segment's calibration is judged on at least this many expected clicks


def _ne(p: np.ndarray, y: np.ndarray) -> float | None:
    """Normalised entropy (learning.metrics) of predictions p against clicks y; None without a click."""
    from learning.metrics import normalised_entropy

    if len(y) == 0 or y.sum() == 0:
        return None
    return round(float(normalised_entropy(y, np.clip(p, 1e-6, 1 - 1e-6))), 4)


class Processes:
    """The ad server and tracker processes of the run, stopped at the end."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def start(self, args: list[str], log_path: Path, env: dict[str, str]) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-m", "adserve", *args], stdout=open(log_path, "w"),
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def _publish_world(bootstrap: str, records: list[tuple[str, dict]]) -> None:
    from schemas import topics
    from schemas.codec import AvroCodec
    from streams import kafka

    codec, now = AvroCodec(), int(time.time() * 1000)
    keys = {topics.SERVING_CAMPAIGNS: "campaign_id", topics.SERVING_ADS: "ad_id"}
    for topic, key in keys.items():
        name = topics.record_type(topic)
        kafka.produce_all(bootstrap, topic, [(str(r[key]).encode(), codec.encode(name, r), now)
                                             for t, r in records if t == topic])


def _write_profiles(settings: PlatformSettings, world) -> None:
    import redis

    from streams import redis_keys

    client = redis.Redis(host=settings.host, port=settings.redis_port)
    pipe = client.pipeline(transaction=False)
    for user in range(world.users):
        pipe.hset(redis_keys.user_profile(f"live-u{user}"), mapping={"features": json.dumps(world.user_features(user))})
        if user % 2000 == 1999:
            pipe.execute()
    pipe.execute()


async def _wait_http(url: str, check: Callable[[dict], bool], timeout_s: float, what: str) -> dict:
    import aiohttp

    began = time.monotonic()
    async with aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as r:
                    body = await r.json(content_type=None)
                    if check(body):
                        return body
            except (aiohttp.ClientError, ValueError):
                pass
            if time.monotonic() - began > timeout_s:
                raise TimeoutError(f"{what}: not within {timeout_s:.0f} s")
            await asyncio.sleep(0.5)


def _job(job: str, settings: PlatformSettings, since_ms: int, work: Path, *extra: str) -> None:
    """Run `job` bounded over the run's records in a local Flink mini-cluster. Its checkpoints go to a folder of
    the run (storage.checkpoints): without one a local cluster keeps them in the JobManager's memory, which
    refuses a snapshot over 5 MB, and the join's state of a long run's pending labels is larger."""
    checkpoints = work / "checkpoints" / job
    checkpoints.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, "-m", f"jobs.{job}", "--bounded", "--startup-mode", "timestamp",
                           "--start-timestamp-ms", str(since_ms), "--bootstrap", settings.kafka_bootstrap,
                           "--group-id", f"bench-live-{job}-{uuid.uuid4().hex[:6]}",
                           "--checkpoint-interval-ms", "30000", *extra],
                          capture_output=True, text=True,
                          env=os.environ | settings.as_env() | {"ADSERVE_STORAGE_CHECKPOINTS": checkpoints.as_uri()})
    if done.returncode != 0:
        causes = [line for line in done.stderr.splitlines() if "Caused by" in line or "Exception:" in line]
        raise RunFailed(f"{job} failed: {' | '.join(causes[-6:])[-3000:]}")


def _ensure_budget_job(settings: PlatformSettings, log: Callable[[str], None]) -> str | None:
    """Deploy `budget_pacing` with the platform's defaults unless one runs; the id of the job started, or None
    when one was already running (that one is left as it is)."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    if any(j.name == "budget_pacing" and j.state not in deploy.ENDED_STATES
           for j in deploy.list_jobs(settings.flink_rest_url)):
        log("budget_pacing already runs on the platform: the bench uses it")
        return None
    job_id = deploy.deploy("budget_pacing", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                           conf_dir=Flink(settings).conf_dir,
                           job_args=["--bootstrap", settings.kafka_bootstrap,
                                     "--connector-jar", str(flink_connector_jar(settings))])
    deploy.wait_running(settings.flink_rest_url, job_id)
    log(f"budget_pacing deployed for the run ({job_id})")
    return job_id


def _retrain(settings: PlatformSettings, models: Path, registry: str, examples: str, args: list[str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "adserve", "model", "retrain", "--once", "--json", "--models",
                           str(models), "--registry-topic", registry, "--examples-topic", examples, *args],
                          capture_output=True, text=True, env=os.environ | settings.as_env())
    if done.returncode != 0:
        raise RunFailed(f"retrain failed: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _served(settings: PlatformSettings, server_id: str, since_ms: int) -> Iterator[dict]:
    """The run's served records, one at a time (a 200 k-request run's log is not held)."""
    from schemas import topics
    from streams.kafka import iter_records

    served = iter_records(settings.kafka_bootstrap, topics.AD_SERVED, topics.record_type(topics.AD_SERVED), since_ms)
    return (r for r in served if r["server_id"] == server_id)


def _new_ad_figures(world, features_dir: Path, users: np.ndarray) -> dict[str, Any]:
    """Impressions each new ad had in the first snapshot whose estimate came within 20 % of its true top-slot rate
    and stayed there in every later snapshot."""
    from serving.model import ad_features

    new_rows = np.flatnonzero(world.joins_at > 0)
    truth = world.top_ctr(new_rows, users)
    versions = ad_features.versions(features_dir)
    history: dict[int, list[tuple[float, float]]] = {int(world.ad_id[r]): [] for r in new_rows}
    for v in versions:
        snap = ad_features.load(features_dir, v)
        rows = snap.rows(world.ad_id[new_rows])
        for ad, row in zip(world.ad_id[new_rows].tolist(), rows.tolist()):
            if row >= 0:
                history[ad].append((float(snap.impressions[row]), float(snap.ctr_prior[row])))
    reached = []
    for ad, true_rate in zip(world.ad_id[new_rows].tolist(), truth.tolist()):
        seq = history[ad]
        within = [abs(est / true_rate - 1) <= 0.2 for _, est in seq]
        for i in range(len(seq)):
            if all(within[i:]) and seq[i][0] > 0:
                reached.append(seq[i][0])
                break
    return {"new_ads": len(new_rows), "new_ads_within_20pct": len(reached),
            "new_ad_impressions_to_20pct": float(np.median(reached)) if reached else None}


class LiveLoopOptions(NamedTuple):
    """What a run is (the command's flags): requests over the three phases; the world's seed, advertisers, users
    and share of ads joining part-way; the client processes and the requests each has in flight; the share the
    first model scores as a canary; the features job's snapshot period in event time."""

    requests: int = 200_000
    seed: int = 5
    advertisers: int = 20
    users: int = 20_000
    concurrency: int = 3
    processes: int = 2
    canary_share: float = 0.5
    new_ad_share: float = 0.1
    feature_tick_ms: int = 300_000


def run(options: LiveLoopOptions = LiveLoopOptions(), log: Callable[[str], None] = print) -> dict[str, Any]:
    from bench.common import machine
    from infra.platform import control
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from infra.platform.topics import ensure_topics
    from jobs import deploy
    from schemas.topics import TopicSpec
    from sim.live_world import make_live_world
    from sim.progress import Progress

    requests, seed, advertisers, users = options.requests, options.seed, options.advertisers, options.users
    concurrency, processes, canary_share = options.concurrency, options.processes, options.canary_share
    new_ad_share, feature_tick_ms = options.new_ad_share, options.feature_tick_ms
    settings = PlatformSettings.from_env()
    control.up(settings, log=lambda line: None)
    spec = WorldSpec(seed, advertisers, users, new_ad_share, id_base=7_000_000 + (int(time.time()) % 1000) * 10_000)
    world, placement_of = make_live_world(spec.seed, advertisers=advertisers, users=users,
                                          new_ad_share=new_ad_share, id_base=spec.id_base)
    suffix = uuid.uuid4().hex[:6]
    registry, examples_a, examples_b = (f"bench.live.{n}.{suffix}" for n in ("registry", "examples-a", "examples-b"))
    ensure_topics(settings.kafka_bootstrap, (TopicSpec(registry, key="role", schema="", partitions=1),
                                             TopicSpec(examples_a, key="impression id", schema=""),
                                             TopicSpec(examples_b, key="impression id", schema="")))
    work = Path(tempfile.mkdtemp(prefix="adserve-live-loop-"))
    features_dir, models = work / "features", work / "models"
    since_ms = int(time.time() * 1000) - 1000
    initial = np.flatnonzero(world.joins_at == 0)
    placement_suffix = f".live-{suffix}"
    _publish_world(settings.kafka_bootstrap, world.serving_records(placement_of, since_ms, initial,
                                                                    suffix=placement_suffix))
    _write_profiles(settings, world)
    log(f"world: {world.ads} ads of {advertisers} advertisers ({len(initial)} from the start), {world.users:,} users")

    env = os.environ | settings.as_env() | {"ADSERVE_DEV": "1"}
    procs = Processes()
    server_port, tracker_port = 18_580, 18_581
    server_id = f"live-{suffix}"
    job_id = budget_job_id = None
    tally = Tally({}, {})
    clients = Clients(processes, work)
    figures: dict[str, Any] = {"machine": machine(), "requests": requests, "ads": world.ads, "users": world.users,
                               "feature_tick_s": feature_tick_ms / 1000, "client_processes": processes,
                               "concurrency_per_process": concurrency}
    try:
        procs.start(["serve", "tracker", "--dev", "--port", str(tracker_port)], work / "tracker.log", env)
        procs.start(["serve", "ads", "--dev", "--workers", "0", "--port", str(server_port), "--server-id", server_id,
                     "--tracker-url", f"http://127.0.0.1:{tracker_port}", "--registry-topic", registry],
                    work / "adserver.log", env)
        server = f"http://127.0.0.1:{server_port}"
        job_id = deploy.deploy("features", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                               conf_dir=Flink(settings).conf_dir,
                               job_args=["--bootstrap", settings.kafka_bootstrap, "--connector-jar",
                                         str(flink_connector_jar(settings)), "--group-id", f"bench-live-{suffix}",
                                         "--startup-mode", "timestamp", "--start-timestamp-ms", str(since_ms),
                                         "--snapshot-dir", str(features_dir), "--registry-topic", registry,
                                         "--tick-ms", str(feature_tick_ms)])
        deploy.wait_running(settings.flink_rest_url, job_id)
        budget_job_id = _ensure_budget_job(settings, log)
        asyncio.run(_wait_http(f"{server}/ready", lambda b: b.get("ready") and b.get("ads", 0) >= len(initial),
                               300, "the ad server is ready with the world's ads"))
        pending_new = sorted(set(np.flatnonzero(world.joins_at > 0).tolist()), key=lambda r: world.joins_at[r])

        def joined(sent: int) -> None:
            """Publish the new ads whose time has come (their share of the run's requests)."""
            due = [r for r in pending_new if world.joins_at[r] <= sent / requests]
            if due:
                for r in due:
                    pending_new.remove(r)
                _publish_world(settings.kafka_bootstrap,
                               world.serving_records(placement_of, int(time.time() * 1000), np.array(due),
                                                     suffix=placement_suffix))

        phase_s: dict[str, float] = {}
        verdict, candidate = None, None
        for index, (phase, share) in enumerate(PHASES):
            n = int(requests * share)
            began = time.monotonic()
            bar = Progress(f"{phase} phase", n)
            before = clients.sent.value

            def tick(sent: int, bar=bar, before=before) -> None:
                bar.update(sent - before)
                joined(sent)

            tally.add(clients.phase(spec, server, placement_suffix, phase, n, concurrency, seed + 1 + index, tick))
            bar.close()
            phase_s[phase] = round(time.monotonic() - began, 1)
            if phase == "priors":
                _job("training_join", settings, since_ms, work, "--examples-topic", examples_a)
                trained = _retrain(settings, models, registry, examples_a,
                                   ["--canary-share", str(canary_share), "--min-clicks", "400",
                                    "--min-examples", "1000"])
                log(f"retrain: {json.dumps({k: trained[k] for k in ('action', 'model_version', 'examples', 'reason')})}")
                candidate = trained.get("model_version")
                if candidate:
                    asyncio.run(_wait_http(f"{server}/ready",
                                           lambda b: (b.get("scoring") or {}).get("canary_version") == candidate,
                                           600, "the ad server canaries the model"))
            elif phase == "canary" and candidate:
                _job("training_join", settings, since_ms, work, "--examples-topic", examples_b)
                judged = _retrain(settings, models, registry, examples_b,
                                  ["--min-clicks", "400", "--min-segment-clicks", "400",
                                   "--calibration-band", "0.9,1.1"])
                verdict = judged.get("verdict")
                report = (judged.get("figures") or {}).get("canary_report") or {}
                arm = (report.get("versions") or {}).get(candidate) or {}
                figures.update(canary_clicks=arm.get("clicks"), canary_calibration=arm.get("calibration"),
                               canary_segments_judged=report.get("segments_judged"),
                               canary_reasons=report.get("reasons"))
                log(f"canary verdict: {verdict} {judged.get('reason', '')}")
                if verdict == "promote":
                    asyncio.run(_wait_http(f"{server}/ready",
                                           lambda b: (b.get("scoring") or {}).get("model_version") == candidate,
                                           600, "the ad server promotes the model"))
        figures.update(phase_seconds=phase_s, verdict=verdict, model_version=candidate)
    finally:
        clients.close()
        procs.stop()
        _publish_world(settings.kafka_bootstrap, world.serving_records(  # the run's ads retired again
            placement_of, int(time.time() * 1000), suffix=placement_suffix, removed=True))
        for name, started in (("features", job_id), ("budget_pacing", budget_job_id)):
            if started is None:
                continue
            try:
                deploy.stop(settings.flink_rest_url, started)
            except Exception as exc:  # noqa: BLE001 - the figures still come out; the job is named
                log(f"could not stop the {name} job {started}: {exc}")

    newest: deque = deque(maxlen=RESERVE_SAMPLE)
    figures.update(_figures(impressions(clients.files()), tally, _served(settings, server_id, since_ms), candidate,
                            newest))
    figures.update(_new_ad_figures(world, features_dir, np.random.default_rng(seed).choice(world.users, 2000)))
    figures["reserve_revenue_per_mille_gain_pct"] = _reserve_gain(list(newest))
    figures["snapshots"] = len(list(features_dir.glob("ad-features-v*.npz")))
    figures["work_dir"] = str(work)
    return figures


def _figures(impression_rows: Iterable[tuple], tally: Tally, served: Iterable[dict], candidate: str | None,
             newest: deque | None = None) -> dict[str, Any]:
    """The run's figures from its impression lines (bench.live_traffic.impressions), its answers and its served
    records, each read once; `newest` keeps the newest served records for the reserve replay."""
    by_impression = {}
    ages = []
    served_records = 0
    for r in served:
        served_records += 1
        if newest is not None:
            newest.append(r)
        if r["ad_snapshot_version"]:
            ages.append((r["event_time"] - r["ad_snapshot_version"]) / 1000)
        for w in r["winners"]:
            by_impression[w["impression_id"]] = (w["pctr"], r.get("model_version"))
    rows = []
    impressions_seen = clicks = 0
    for impression_id, phase, _ad, placement, country, position, true_p, clicked in impression_rows:
        impressions_seen += 1
        clicks += clicked
        if position != 1 or impression_id not in by_impression:
            continue
        pctr, version = by_impression[impression_id]
        rows.append((phase, version, pctr, true_p, clicked, placement, country))

    def pick(phase: str, version: str | None):
        chosen = [r for r in rows if r[0] == phase and (version is None or r[1] == version)]
        return (np.array([r[2] for r in chosen]), np.array([r[3] for r in chosen]),
                np.array([r[4] for r in chosen], dtype=float), chosen)
    p0, t0, y0, _ = pick("priors", "prior-baseline-1")
    p1, t1, y1, chosen = pick("learned", candidate) if candidate else (np.zeros(0),) * 3 + ([],)
    segments: dict[tuple[str, str], list[float]] = {}
    for (_, _, p, t, _, placement, country) in chosen:
        seg = segments.setdefault((placement, country), [0.0, 0.0])
        seg[0] += p
        seg[1] += t
    ratios = [a / b for a, b in segments.values() if b >= MIN_SEGMENT_EXPECTED_CLICKS]
    return {"impressions": impressions_seen, "clicks": clicks,
            "hot_swap_failed_requests": sum(n for status, n in tally.statuses.items() if status != 200),
            "statuses": {str(k): v for k, v in tally.statuses.items()},
            "failures": dict(sorted(tally.failures.items(), key=lambda kv: -kv[1])[:5]),
            "ne_served_priors": _ne(p0, y0), "ne_served_learned": _ne(p1, y1) if len(y1) else None,
            "ne_oracle": _ne(t1, y1) if len(y1) else _ne(t0, y0),
            "ne_oracle_priors_phase": _ne(t0, y0),
            "calibration_min": round(min(ratios), 3) if ratios else None,
            "calibration_max": round(max(ratios), 3) if ratios else None,
            "calibration_segments": len(ratios),
            "feature_snapshot_age_p99_s": round(float(np.percentile(ages, 99)), 1) if ages else None,
            "requests_served_with_a_snapshot": len(ages), "served_records": served_records}


RESERVE_SAMPLE = 10_000  # the newest served records the reserve replay reads (it replays each one per candidate)


def _reserve_gain(served: list[dict]) -> float | None:
    if not served:
        return None
    from core.replay import overall_gain_pct, recommend_reserves

    gain = overall_gain_pct(recommend_reserves(served[-RESERVE_SAMPLE:]))
    return None if gain is None else round(gain, 2)


def render(f: dict[str, Any]) -> str:
    m = f["machine"]
    lines = [f"live loop on {m['cpu']} ({m['cores']} cores): {f['requests']:,} requests, {f['ads']} ads, "
             f"{f['users']:,} users; {f['impressions']:,} impressions, {f['clicks']:,} clicks",
             f"  NE of the served pCTR: priors {f['ne_served_priors']}  learned {f['ne_served_learned']}  "
             f"oracle {f['ne_oracle']}  (model {f['model_version']}, canary verdict {f['verdict']})",
             f"  calibration against the truth per segment: {f['calibration_min']} - {f['calibration_max']} "
             f"({f['calibration_segments']} segments)",
             f"  feature snapshot age p99 {f['feature_snapshot_age_p99_s']} s; failed requests "
             f"{f['hot_swap_failed_requests']}; snapshots {f['snapshots']}",
             f"  new ads: {f['new_ads_within_20pct']} of {f['new_ads']} within 20 % of their true rate, after "
             f"{f['new_ad_impressions_to_20pct']} impressions (median)",
             f"  recommended reserve vs none: {f['reserve_revenue_per_mille_gain_pct']} % revenue per mille",
             f"  phases (s): {f['phase_seconds']}"]
    return "\n".join(lines)
