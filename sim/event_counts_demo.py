"""A smoke check of the platform: simulated ad events through the real smoke
job, checked against the Beam pipeline and a count made here, with a report.

Steps: start the platform (`adserve up`); simulate a stream of impression and
click events for many campaigns (deterministic for a seed) with a few corrupt
records mixed in; produce them to ad.events and archive them as an Avro
container file; deploy the Flink job event_counts to the standalone cluster
with `flink run`, bounded to exactly these records; run the Beam pipeline
event_counts over the archive; compare the three and print what happened."""
from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import fastavro

from core import event_counts as rules
from core.errors import RunFailed
from infra.platform import PlatformSettings, control
from pipelines.avro_files import normalise, schema_json
from schemas.codec import AvroCodec
from schemas.topics import AD_EVENTS, DEAD_LETTERS, EVENT_COUNTS, record_type
from sim.synthetic import DAY_START_MS, ad_events
from streams import kafka

AD_EVENT, EVENT_COUNT, DEAD_LETTER = (record_type(topic) for topic in (AD_EVENTS, EVENT_COUNTS, DEAD_LETTERS))


def count_directly(events: list[dict[str, Any]]) -> dict[tuple[int, int], rules.Counts]:
    windows: dict[tuple[int, int], rules.Counts] = {}
    for e in events:
        key = (e["campaign_id"], rules.window_start(e["event_time"]))
        windows[key] = windows.get(key, rules.Counts()).add(e)
    return windows


@dataclass
class DemoReport:
    run_id: str
    events: int
    corrupt: int
    produce_s: float = 0.0
    job_id: str = ""
    job_s: float = 0.0
    flink_windows: dict = field(default_factory=dict)
    beam_windows: dict = field(default_factory=dict)
    direct_windows: dict = field(default_factory=dict)
    dead_letters: list = field(default_factory=list)
    archive: str = ""
    serving: Any = None  # sim.serving_demo.ServingReport

    def totals(self, windows) -> tuple[int, int, int]:
        return (sum(c.impressions for c in windows.values()), sum(c.clicks for c in windows.values()),
                sum(c.billable_micros for c in windows.values()))

    @property
    def counts_agree(self) -> bool:
        return (self.flink_windows == self.direct_windows == self.beam_windows
                and len(self.dead_letters) == self.corrupt)

    @property
    def agrees(self) -> bool:
        return self.counts_agree and (self.serving is None or self.serving.ok)

    def render(self) -> str:
        imp, clk, billable = self.totals(self.flink_windows)
        lines = [
            "",
            f"== adserve demo report (run {self.run_id}) ==",
            f"simulated events      {self.events:>12,}  (+{self.corrupt} corrupt records mixed in)",
            f"produced to ad.events in {self.produce_s:.1f} s; archived to {self.archive}",
            f"Flink job event_counts {self.job_id} ran bounded on the standalone cluster in {self.job_s:.1f} s",
            f"windows (campaign x minute): Flink {len(self.flink_windows):,}, Beam {len(self.beam_windows):,}, "
            f"direct count {len(self.direct_windows):,}",
            f"impressions {imp:,}  clicks {clk:,}  billable {billable / 1e6:,.2f} (currency units, "
            f"{billable:,} micros)",
            f"dead letters: {len(self.dead_letters)} (expected {self.corrupt}); first reason: "
            f"{self.dead_letters[0]['reason'] if self.dead_letters else '-'}",
            "counting: " + ("OK - Flink, Beam and the direct count agree exactly; every corrupt record is in "
                            "dead.letters" if self.counts_agree else "MISMATCH - see the differences below"),
        ]
        if self.serving is not None:
            lines += ["", "-- serving: simulated users through the ad server and the tracker --", *self.serving.render(),
                      "serving: " + ("OK - every answer logged, every beacon and click an event, forged tokens "
                                     "rejected, spend reported exactly once, caps held" if self.serving.ok
                                     else "MISMATCH - see the figures above")]
        lines.append("result: " + ("OK" if self.agrees else "MISMATCH"))
        if not self.counts_agree:
            for name, windows in (("flink", self.flink_windows), ("beam", self.beam_windows)):
                diff = set(windows.items()) ^ set(self.direct_windows.items())
                lines.append(f"  {name} differs from the direct count in {len(diff)} windows")
        return "\n".join(lines)


def run(settings: PlatformSettings, *, events: int = 50_000, corrupt: int = 5, seed: int = 7,
        requests: int = 3_000, log=print) -> DemoReport:
    control.up(settings, log=log)
    run_id = uuid.uuid4().hex[:8]
    report = DemoReport(run_id, events, corrupt)
    simulated = ad_events(seed, events=events)
    report.direct_windows = count_directly(simulated)
    bootstrap = settings.kafka_bootstrap
    start_events = kafka.end_offsets(bootstrap, AD_EVENTS)
    start_counts = kafka.end_offsets(bootstrap, EVENT_COUNTS)
    start_dead = kafka.end_offsets(bootstrap, DEAD_LETTERS)
    report.produce_s = _produce(bootstrap, simulated, corrupt)
    archive = settings.state_dir / "archive" / f"demo-{run_id}"
    archive.mkdir(parents=True, exist_ok=True)
    with open(archive / f"{AD_EVENTS}-000.avro", "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema_json("ad_event.avsc")), simulated)
    report.archive = str(archive)
    _run_flink_job(settings, report, start_events, log)
    _read_flink_outputs(bootstrap, report, start_counts, start_dead)
    log("running the Beam pipeline event_counts over the archive (DirectRunner) ...")
    report.beam_windows = _beam_windows(archive)
    if requests:
        from sim.serving_demo import run_serving

        log(f"serving {requests:,} simulated ad requests through the ad server and the tracker ...")
        report.serving = run_serving(settings, requests=requests, seed=seed, log=log)
    return report


def _produce(bootstrap: str, simulated: list[dict[str, Any]], corrupt: int) -> float:
    """The events to ad.events with `corrupt` undecodable records spread among them; seconds it took."""
    from sim.progress import Progress

    codec = AvroCodec()
    records = [(str(e["campaign_id"]).encode(), codec.encode(AD_EVENT, e), e["event_time"]) for e in simulated]
    step = max(1, len(records) // (corrupt + 1))
    for k in range(corrupt):
        records.insert((k + 1) * step, (b"0", b"\x00corrupt-" + str(k).encode(), DAY_START_MS))
    progress = Progress("producing to ad.events", len(records))
    began = time.monotonic()
    chunk = 5_000
    for i in range(0, len(records), chunk):
        kafka.produce_all(bootstrap, AD_EVENTS, records[i:i + chunk], timeout_s=60)
        progress.update(min(i + chunk, len(records)))
    progress.close()
    return time.monotonic() - began


def _run_flink_job(settings: PlatformSettings, report: DemoReport, start_events: dict[int, int], log) -> None:
    """event_counts bounded to this run's records, until it FINISHED (raises otherwise)."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink
    from jobs import deploy

    log("deploying event_counts (bounded to this run's records) with flink run ...")
    offsets = ",".join(f"{p}:{o}" for p, o in sorted(start_events.items()))
    job_args = ["--bootstrap", settings.kafka_bootstrap, "--connector-jar", str(flink_connector_jar(settings)),
                "--bounded", "--startup-mode", "specific-offsets", "--start-offsets", offsets,
                "--group-id", f"adserve-demo-{report.run_id}", "--checkpoint-interval-ms", "2000"]
    began = time.monotonic()
    report.job_id = deploy.deploy("event_counts", jobmanager=f"{settings.host}:{settings.flink_rest_port}",
                                  conf_dir=Flink(settings).conf_dir, job_args=job_args)
    state = _wait_finished(settings.flink_rest_url, report.job_id, timeout_s=900, log=log)
    report.job_s = time.monotonic() - began
    if state != "FINISHED":
        raise RunFailed(f"job {report.job_id} ended {state}; see the Flink UI at {settings.flink_rest_url}")


def _read_flink_outputs(bootstrap: str, report: DemoReport, start_counts: dict[int, int],
                        start_dead: dict[int, int]) -> None:
    """The job's windows from ops.event_counts and its dead letters, since the run began."""
    codec = AvroCodec()
    counts = kafka.read_all(bootstrap, EVENT_COUNTS, start_offsets=start_counts, timeout_s=60, idle_s=2)
    for m in counts:
        r = codec.decode(m.value(), EVENT_COUNT, topic=m.topic(), partition=m.partition(), offset=m.offset())
        report.flink_windows[(r["campaign_id"], r["window_start"])] = rules.Counts(
            r["impressions"], r["clicks"], r["billable_micros"])
    dead = kafka.read_all(bootstrap, DEAD_LETTERS, start_offsets=start_dead, timeout_s=30, idle_s=2)
    report.dead_letters = [d for d in (codec.decode(m.value(), DEAD_LETTER) for m in dead)
                           if d["job"] == "event_counts"]


def _beam_windows(archive) -> dict[tuple[int, int], rules.Counts]:
    """The Beam pipeline event_counts over the archive (DirectRunner), its windows read back."""
    from pipelines import event_counts as beam_event_counts

    out_prefix = archive / "beam" / "event_counts"
    beam_event_counts.run([f"--input={archive}/{AD_EVENTS}-*.avro", f"--output={out_prefix}",
                           "--runner=DirectRunner"], save_main_session=False)
    windows: dict[tuple[int, int], rules.Counts] = {}
    for path in sorted(out_prefix.parent.glob("event_counts*.avro")):
        with open(path, "rb") as f:
            for r in map(normalise, fastavro.reader(f)):
                windows[(r["campaign_id"], r["window_start"])] = rules.Counts(
                    r["impressions"], r["clicks"], r["billable_micros"])
    return windows


def _wait_finished(rest_url: str, job_id: str, timeout_s: float, log) -> str:
    from jobs import deploy

    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        state, _ = deploy.job_state(rest_url, job_id)
        if state != last:
            log(f"job {job_id}: {state}")
            last = state
        if state in ("FINISHED", "FAILED", "CANCELED"):
            return state
        time.sleep(1)
    raise RunFailed(f"job {job_id} still {last} after {timeout_s:.0f} s")

