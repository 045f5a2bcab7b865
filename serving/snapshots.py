"""Full snapshots of the serving state, so an ad server boots without reading the topics from the start.

A snapshot is a folder `snapshot-<epoch ms>/` with `serving.ads.avro` and
`serving.campaigns.avro` (Avro object container files, the topics' own record
schemas, the newest version per key) and `offsets.json`: for every partition
of both topics, the offset the snapshot covers up to (exclusive). A server
loads the files, then replays each partition from its offset; because every
record carries a version and the server applies only newer versions, records
in both the snapshot and the replay are harmless. The folder is written under a
temporary name and renamed, so a reader never sees half a snapshot.

`python -m serving.snapshots --bootstrap B --dir D [--every-s S]` is the writer
process that runs beside the index builder: it follows serving.ads and
serving.campaigns and cuts a snapshot every S seconds (default hourly); `adserve
snapshots write [--every S]` cuts one (or one every S seconds) from the command
line. Never inside a Flink job: a snapshot reads the topics with its own consumer."""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import fastavro

from core.errors import CorruptRecord
from schemas import topics
from schemas.codec import AvroCodec
from streams import kafka

LOG = logging.getLogger("adserve.snapshots")
TOPICS = {topic: (topics.record_type(topic), key) for topic, key in ((topics.SERVING_ADS, "ad_id"),
                                                                   (topics.SERVING_CAMPAIGNS, "campaign_id"))}


def write_snapshot(bootstrap: str, directory: Path, clock: Callable[[], float] = time.time) -> Path:
    """Cut a snapshot at the topics' current ends; returns its folder."""
    codec = AvroCodec()
    directory.mkdir(parents=True, exist_ok=True)
    cut_ms = int(clock() * 1000)
    offsets: dict[str, dict[str, int]] = {}
    records_by_topic: dict[str, list[dict[str, Any]]] = {}
    for topic, (record_type, key) in TOPICS.items():
        ends = kafka.end_offsets(bootstrap, topic)
        offsets[topic] = {str(p): o for p, o in ends.items()}
        latest: dict[int, dict[str, Any]] = {}
        for msg in kafka.read_all(bootstrap, topic, timeout_s=600, idle_s=2):
            if msg.offset() >= ends.get(msg.partition(), 0):
                continue
            try:
                record = codec.decode(msg.value(), record_type)
            except CorruptRecord:
                continue  # the servers dead-letter it when they replay; a snapshot only keeps good records
            held = latest.get(record[key])
            if held is None or record["version"] > held["version"]:
                latest[record[key]] = record
        records_by_topic[topic] = list(latest.values())
    final = write_files(directory, cut_ms, records_by_topic, offsets)
    LOG.info("snapshot %s: %s", final, {t: len(r) for t, r in records_by_topic.items()})
    return final


def write_files(directory: Path, cut_ms: int, records_by_topic: dict[str, list[dict[str, Any]]],
                offsets: dict[str, dict[str, int]]) -> Path:
    """Write a snapshot folder from records in memory (newest version per key), atomically."""
    codec = AvroCodec()
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".tmp-snapshot-{cut_ms}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for topic, (record_type, _) in TOPICS.items():
        with open(tmp / f"{topic}.avro", "wb") as out:
            fastavro.writer(out, codec.registry.schema(record_type), records_by_topic.get(topic, []),
                            codec="deflate")
    counts = {t: len(r) for t, r in records_by_topic.items()}
    (tmp / "offsets.json").write_text(json.dumps({"cut_ms": cut_ms, "offsets": offsets, "records": counts}))
    final = directory / f"snapshot-{cut_ms}"
    os.replace(tmp, final)
    return final


def latest_snapshot(directory: Path | None) -> Path | None:
    if directory is None or not directory.exists():
        return None
    found = sorted(p for p in directory.glob("snapshot-*") if (p / "offsets.json").exists())
    return found[-1] if found else None


def read_snapshot(folder: Path) -> tuple[dict[str, dict[int, int]], Iterator[tuple[str, dict[str, Any]]]]:
    """The offsets each partition replays from, and the records as (topic, record)."""
    meta = json.loads((folder / "offsets.json").read_text())
    offsets = {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in meta["offsets"].items()}

    def records() -> Iterator[tuple[str, dict[str, Any]]]:
        # campaigns first, so the index never holds an ad whose campaign it has not seen
        for topic in (topics.SERVING_CAMPAIGNS, topics.SERVING_ADS):
            with open(folder / f"{topic}.avro", "rb") as f:
                for record in fastavro.reader(f):
                    yield topic, record
    return offsets, records()


def prune(directory: Path, keep: int = 3) -> None:
    found = sorted(p for p in directory.glob("snapshot-*"))
    for old in found[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


@dataclass(frozen=True)
class SnapshotWriterSettings:
    """The writer process's settings: where the serving topics are, where snapshots go, how often."""

    bootstrap: str
    directory: Path
    every_s: float = 3600.0
    keep: int = 3


def cut(settings: SnapshotWriterSettings) -> Path:
    """One snapshot now, then the oldest beyond settings.keep removed; returns the new snapshot's folder."""
    began = time.monotonic()
    path = write_snapshot(settings.bootstrap, settings.directory)
    prune(settings.directory, settings.keep)
    LOG.info("snapshot %s written in %.1f s", path, time.monotonic() - began)
    return path


def write_every(settings: SnapshotWriterSettings, halt: threading.Event) -> int:
    """Cut a snapshot every settings.every_s seconds (the first one period after the start) until `halt` is
    set, keeping the newest settings.keep; returns how many were written. A cut that fails is logged and
    counted, and the next period tries again: the ad servers boot from the newest one that succeeded."""
    written = failed = 0
    while not halt.wait(settings.every_s):
        try:
            cut(settings)
            written += 1
        except Exception:  # noqa: BLE001 - any failure of one cut (broker away, disk full): the next one retries
            failed += 1
            LOG.exception("snapshot failed (%d so far); the next one is in %.0f s", failed, settings.every_s)
    return written


def parse_settings(argv: Sequence[str] | None = None) -> SnapshotWriterSettings:
    parser = argparse.ArgumentParser(prog="python -m serving.snapshots", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers of the serving topics")
    parser.add_argument("--dir", default=os.environ.get("ADSERVE_SNAPSHOT_DIR", ""),
                        help="where snapshots go, shared with the ad servers (default ADSERVE_SNAPSHOT_DIR)")
    parser.add_argument("--every-s", type=float, default=3600.0, help="seconds between snapshots (default 3600)")
    args = parser.parse_args(argv)
    if not args.dir:
        parser.error("--dir (or ADSERVE_SNAPSHOT_DIR) names the snapshot folder")
    return SnapshotWriterSettings(args.bootstrap, Path(args.dir), args.every_s)


def main(argv: Sequence[str] | None = None) -> None:
    """The writer process: snapshots until SIGTERM or SIGINT."""
    settings = parse_settings(argv)
    logging.basicConfig(level=logging.INFO)
    LOG.info("snapshot writer: %s", settings)
    halt = threading.Event()
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda *_: halt.set())
    write_every(settings, halt)


if __name__ == "__main__":
    main()
