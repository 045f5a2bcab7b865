"""Flink job `index_builder`: the campaign store's change streams -> the flat serving records.

Reads Debezium's cdc.public.campaigns, cdc.public.ads and cdc.public.reserves
(committed changes only, in commit order per row), keeps per row the newest
version it emitted (keyed state), and compiles each newer change into one flat
serving record (core.campaigns: ids, bid type and amount, the platform's
quality adjustment, creative, landing URL, compiled targeting, static score,
and servable only when active and approved by review; or the campaign's status,
schedule, budget, caps and time zone; or an operator's reserve rule,
core.reserves), written with its version and commit time to the compacted
serving.ads / serving.campaigns / serving.reserves through at-least-once sinks (every
consumer keeps only newer versions, so a repeat after a restart is harmless,
and records are visible at once rather than at the next checkpoint). Pausing a
campaign is one campaign record; a targeting or creative change recompiles the
ad's record. A change that cannot be compiled goes to dead.letters, counted
(`bad_changes`); an older or repeated version is dropped (`stale_changes`).
With --snapshot-dir it also writes a full snapshot every --snapshot-every-s
seconds (default hourly) with the topic offsets it matches (serving.snapshots),
from which ad servers boot.

Deploy: adserve jobs deploy index_builder"""
from __future__ import annotations

import argparse
import logging
import os
import threading
from pathlib import Path
from typing import Sequence

from core.campaigns import BadChange, serving_record_from_change
from core.dead_letters import dead_letter
from jobs.flink_io import (KafkaJobSettings, add_common_arguments, bytes_row_type, create_environment, parse,
                           kafka_sink_table, kafka_source_table, settings_from_args)

JOB_NAME = "index_builder"
LOG = logging.getLogger(f"adserve.jobs.{JOB_NAME}")
SOURCES = ("cdc.public.campaigns", "cdc.public.ads", "cdc.public.reserves")


def build(env, t_env, settings: KafkaJobSettings, *, dead_letter_topic: str = "dead.letters",
          ads_topic: str = "serving.ads", campaigns_topic: str = "serving.campaigns",
          reserves_topic: str = "serving.reserves", snapshot_dir: str = "", snapshot_every_s: float = 3600.0) -> None:
    from pyflink.common import Row, Types
    from pyflink.datastream import KeyedProcessFunction, OutputTag, RuntimeContext
    from pyflink.datastream.state import ValueStateDescriptor

    from schemas.codec import AvroCodec

    dead_letters = OutputTag("dead-letters", bytes_row_type())
    campaigns_out = OutputTag("campaigns", bytes_row_type())
    reserves_out = OutputTag("reserves", bytes_row_type())
    side_outputs = {"serving.campaigns": campaigns_out, "serving.reserves": reserves_out}

    class Compile(KeyedProcessFunction):
        """Per row (topic, key): compile the change; emit only versions newer than the last emitted."""

        def open(self, runtime_context: RuntimeContext):
            self.codec = AvroCodec()
            self.emitted = runtime_context.get_state(ValueStateDescriptor("emitted_version", Types.LONG()))
            metrics = runtime_context.get_metrics_group()
            self.bad, self.stale = metrics.counter("bad_changes"), metrics.counter("stale_changes")
            self.snapshots = None
            if snapshot_dir and snapshot_every_s > 0 and runtime_context.get_index_of_this_subtask() == 0:
                self.snapshots = SnapshotSchedule(settings.bootstrap, snapshot_dir, snapshot_every_s,
                                                  metrics.counter("snapshots_written"))
                self.snapshots.start()

        def close(self):
            if self.snapshots is not None:
                self.snapshots.stop()

        def process_element(self, row, ctx):
            try:
                change = serving_record_from_change(row.topic, row.v)
            except BadChange as e:
                self.bad.inc()
                yield dead_letters, Row(JOB_NAME.encode(), self.codec.encode("DeadLetter", dead_letter(
                    JOB_NAME, topic=row.topic, partition=row.partition, offset=row.offset, timestamp_ms=None,
                    key=row.k, value=row.v, reason=str(e), error_type="BadChange")))
                return
            if change is None:
                return
            serving_topic, key, record_type, record = change
            last = self.emitted.value()
            if last is not None and record["version"] <= last:
                self.stale.inc()
                return
            self.emitted.update(record["version"])
            out = Row(key.encode(), self.codec.encode(record_type, record))
            if serving_topic in side_outputs:
                yield side_outputs[serving_topic], out
            else:
                yield out

    kafka_source_table(t_env, "changes_in", ";".join(SOURCES), settings)
    # At-least-once: every consumer applies a serving record only if its version is newer, so a repeat
    # after a restart is harmless, and a record is visible at once instead of at the next checkpoint
    # (with exactly-once sinks the checkpoint duration, seconds under load, was most of the lag).
    kafka_sink_table(t_env, "ads_out", ads_topic, settings, exactly_once=False)
    kafka_sink_table(t_env, "campaigns_out", campaigns_topic, settings, exactly_once=False)
    kafka_sink_table(t_env, "reserves_out", reserves_topic, settings, exactly_once=False)
    kafka_sink_table(t_env, "dead_letters_out", dead_letter_topic, settings)

    raw = t_env.to_data_stream(t_env.from_path("changes_in"))
    compiled = (raw.key_by(lambda r: f"{r.topic}|{bytes(r.k or b'').decode('utf-8', 'replace')}",
                           key_type=Types.STRING())
                .process(Compile(), output_type=bytes_row_type()).name("compile serving records"))
    statements = t_env.create_statement_set()
    statements.add_insert("ads_out", t_env.from_data_stream(compiled))
    statements.add_insert("campaigns_out", t_env.from_data_stream(compiled.get_side_output(campaigns_out)))
    statements.add_insert("reserves_out", t_env.from_data_stream(compiled.get_side_output(reserves_out)))
    statements.add_insert("dead_letters_out", t_env.from_data_stream(compiled.get_side_output(dead_letters)))
    statements.attach_as_datastream()


class SnapshotSchedule(threading.Thread):
    """Every `every_s` seconds, a full snapshot of the serving topics with the offsets it matches
    (serving.snapshots.write_snapshot: it reads what is committed, so it never holds a record of an open
    transaction). Runs beside the first subtask; the folder must be shared with the ad servers (a local
    path here; a mounted volume or synced bucket on a cluster)."""

    def __init__(self, bootstrap: str, directory: str, every_s: float, counter=None):
        super().__init__(name="index-builder-snapshots", daemon=True)
        self.bootstrap, self.directory, self.every_s, self.counter = bootstrap, Path(directory), every_s, counter
        self.halt = threading.Event()

    def run(self) -> None:
        from serving.snapshots import prune, write_snapshot

        while not self.halt.wait(self.every_s):
            try:
                write_snapshot(self.bootstrap, self.directory)
                prune(self.directory)
                if self.counter is not None:
                    self.counter.inc()
            except Exception:  # noqa: BLE001 - the next period tries again; the job keeps compiling
                LOG.exception("snapshot failed")

    def stop(self) -> None:
        self.halt.set()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_arguments(parser, JOB_NAME, bundle_time_ms=100)  # advertiser changes: freshness first
    parser.add_argument("--dead-letter-topic", default="dead.letters")
    parser.add_argument("--ads-topic", default="serving.ads", help="where ad records go (tests, benchmarks)")
    parser.add_argument("--campaigns-topic", default="serving.campaigns", help="where campaign records go")
    parser.add_argument("--reserves-topic", default="serving.reserves", help="where reserve rules go")
    parser.add_argument("--snapshot-dir", default=os.environ.get("ADSERVE_SNAPSHOT_DIR", ""),
                        help="write full snapshots here (default ADSERVE_SNAPSHOT_DIR; empty: none)")
    parser.add_argument("--snapshot-every-s", type=float, default=3600.0,
                        help="seconds between snapshots (default 3600)")
    args = parse(parser, argv)
    settings = settings_from_args(args, JOB_NAME)
    logging.basicConfig(level=logging.INFO)
    LOG.info("starting %s: %s", JOB_NAME, settings.describe())
    env, t_env = create_environment(settings)
    build(env, t_env, settings, dead_letter_topic=args.dead_letter_topic, ads_topic=args.ads_topic,
          campaigns_topic=args.campaigns_topic, reserves_topic=args.reserves_topic, snapshot_dir=args.snapshot_dir,
          snapshot_every_s=args.snapshot_every_s)
    env.execute(JOB_NAME)


if __name__ == "__main__":
    main()
