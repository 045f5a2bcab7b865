"""Entry point of `report_landing`: flags and environment -> ReportLandingSettings, printed, then the loop.

    python -m serving.report_landing --bootstrap 127.0.0.1:19092          (ADSERVE_POSTGRES_DSN: the campaign store)
    python -m serving.report_landing --until-caught-up                     (land what is there now, then stop)

One process reads every partition of billing.billed_spend and ad.conversions (assigned, not subscribed: no
rebalancing) from the offsets stored with the last landed batch, reduces each batch with core.reports and
writes it with its offsets in one transaction (serving/report_landing/landing.py). A record that does not decode
goes to dead.letters with its reason and the loop goes on."""
from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import psycopg
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from core.dead_letters import from_corrupt
from core.errors import CorruptRecord, InvalidArgument, InvalidSettings, SchemaMismatch, TopicMissing
from core.reports import LandingBatch, conversion_day
from schemas import topics
from schemas.codec import AvroCodec
from serving.report_landing.landing import campaign_timezones, stored_offsets, write_batch
from serving.report_landing.settings import ReportLandingSettings
from streams import kafka

JOB_NAME = "report_landing"
LOG = logging.getLogger("adserve.report_landing")
# Each kind's record type: its topic's (schemas.topics)
RECORD_TYPES = {"billed": topics.record_type(topics.BILLED_SPEND),
                "conversions": topics.record_type(topics.AD_CONVERSIONS)}
DEAD_LETTER = topics.record_type(topics.DEAD_LETTERS)


def parse_settings(argv: Sequence[str] | None = None,
                   environ: Mapping[str, str] = os.environ) -> ReportLandingSettings:
    parser = argparse.ArgumentParser(prog=JOB_NAME, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bootstrap", default=environ.get("ADSERVE_KAFKA_BOOTSTRAP", "127.0.0.1:19092"),
                        help="Kafka bootstrap servers (ADSERVE_KAFKA_BOOTSTRAP)")
    parser.add_argument("--postgres-dsn", default=environ.get("ADSERVE_POSTGRES_DSN", ""),
                        help="the campaign store (ADSERVE_POSTGRES_DSN; `adserve` exports it)")
    parser.add_argument("--billed-topic", default=topics.BILLED_SPEND)
    parser.add_argument("--conversions-topic", default=topics.AD_CONVERSIONS)
    parser.add_argument("--dead-letter-topic", default=topics.DEAD_LETTERS)
    parser.add_argument("--group-id", default="adserve-report-landing",
                        help="names the stored offsets; a second landing of the same topics takes another")
    parser.add_argument("--max-batch-records", type=int, default=5_000)
    parser.add_argument("--poll-timeout-s", type=float, default=1.0)
    parser.add_argument("--until-caught-up", action="store_true",
                        help="stop once every partition is landed up to where it ended at the start")
    args = parser.parse_args(argv)
    if not args.postgres_dsn.strip():
        raise InvalidSettings("no campaign store: pass --postgres-dsn or set ADSERVE_POSTGRES_DSN")
    if args.max_batch_records < 1:
        raise InvalidSettings(f"--max-batch-records must be at least 1, not {args.max_batch_records}")
    return ReportLandingSettings(args.bootstrap, args.postgres_dsn.strip(), args.billed_topic,
                                 args.conversions_topic, args.dead_letter_topic, args.group_id,
                                 args.max_batch_records, args.poll_timeout_s, args.until_caught_up)


@dataclass
class LandingCounts:
    """What a run landed: records read per kind, batches written, records sent to the dead letters."""

    billed: int = 0
    conversions: int = 0
    batches: int = 0
    dead_letters: int = 0


class ReportLanding:
    """The loop: read a batch, reduce it (core.reports.LandingBatch), write it with its offsets."""

    def __init__(self, settings: ReportLandingSettings, conn: psycopg.Connection, consumer: Any = None,
                 producer: Any = None):
        self.settings, self.conn = settings, conn
        self.codec = AvroCodec()
        self.kinds = {settings.billed_topic: "billed", settings.conversions_topic: "conversions"}
        self.consumer = consumer or kafka.consumer(settings.bootstrap, settings.group_id,
                                                   **{"enable.partition.eof": True})
        self.producer = producer or kafka.producer(settings.bootstrap)
        self.positions: dict[tuple[str, int], int] = {}
        self.ends: dict[tuple[str, int], int] = {}
        self.counts = LandingCounts()

    def assign(self) -> None:
        """Every partition of both topics, from the stored offsets (the beginning where none is stored)."""
        stored = stored_offsets(self.conn, self.settings.group_id)
        assignment = []
        for topic in self.kinds:
            metadata = self.consumer.list_topics(topic, timeout=kafka.DEFAULT_TIMEOUT_S)
            if topic not in metadata.topics or metadata.topics[topic].error is not None:
                raise TopicMissing(f"{JOB_NAME}: no topic {topic} (the platform's topics are created by adserve up)")
            for partition in metadata.topics[topic].partitions:
                low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                                timeout=kafka.DEFAULT_TIMEOUT_S)
                start = stored.get((topic, partition))
                self.positions[(topic, partition)] = max(low, start) if start is not None else low
                self.ends[(topic, partition)] = high
                assignment.append(TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start))
        self.consumer.assign(assignment)

    def caught_up(self) -> bool:
        return all(self.positions[tp] >= end for tp, end in self.ends.items())

    def step(self) -> int:
        """One batch: read, reduce, write with its offsets; returns the records read."""
        messages = self.consumer.consume(self.settings.max_batch_records, timeout=self.settings.poll_timeout_s)
        batch, next_offsets, conversions = LandingBatch(), {}, []
        for message in messages:
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    # the end of a partition: past its last record and any transaction markers behind it
                    where = (message.topic(), message.partition())
                    self.positions[where] = max(self.positions.get(where, 0), message.offset())
                    continue
                raise KafkaException(message.error())
            where = (message.topic(), message.partition())
            next_offsets[where] = message.offset() + 1
            kind = self.kinds[message.topic()]
            try:
                record = self.codec.decode(message.value(), RECORD_TYPES[kind], topic=where[0],
                                           partition=where[1], offset=message.offset())
                if kind == "billed":
                    batch.add_billed(record)
                    self.counts.billed += 1
                else:
                    conversions.append(record)
            except (CorruptRecord, SchemaMismatch, InvalidArgument, KeyError, TypeError) as error:
                # every undecodable or malformed record is kept, with its reason, on the dead-letter topic
                self._dead_letter(message, error)
        if conversions:
            zones = campaign_timezones(self.conn, (int(c["campaign_id"]) for c in conversions))
            for record in conversions:
                zone = zones.get(int(record["campaign_id"]), "UTC")
                batch.add_conversion(record, conversion_day(int(record["event_time"]), zone))
            self.counts.conversions += len(conversions)
        if next_offsets:
            kafka.flush(self.producer)  # a dead letter is kept before the offset past its record is
            write_batch(self.conn, self.settings.group_id, batch, next_offsets)
            for where, offset in next_offsets.items():
                self.positions[where] = max(self.positions.get(where, 0), offset)
            self.counts.batches += 1
        return len(messages)

    def _dead_letter(self, message: Any, error: Exception) -> None:
        corrupt = error if isinstance(error, CorruptRecord) else CorruptRecord(
            f"{type(error).__name__}: {error}", topic=message.topic(), partition=message.partition(),
            offset=message.offset())
        _, timestamp_ms = message.timestamp()
        record = from_corrupt(JOB_NAME, corrupt, timestamp_ms=timestamp_ms, key=message.key(),
                              value=message.value())
        self.producer.produce(self.settings.dead_letter_topic, key=JOB_NAME.encode(),
                              value=self.codec.encode(DEAD_LETTER, record), timestamp=timestamp_ms or 0)
        self.counts.dead_letters += 1
        LOG.warning("dead letter: %s", corrupt)

    def run(self) -> LandingCounts:
        self.assign()
        try:
            while True:
                read = self.step()
                if self.settings.until_caught_up and not read and self.caught_up():
                    return self.counts
        finally:
            self.consumer.close()


def land(settings: ReportLandingSettings) -> LandingCounts:
    """Run the landing with these settings (until caught up, or for ever)."""
    with psycopg.connect(settings.postgres_dsn, autocommit=True) as conn:  # write_batch opens its transactions
        return ReportLanding(settings, conn).run()


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    settings = parse_settings(argv)
    LOG.info("%s: %s", JOB_NAME, settings.describe())
    counts = land(settings)
    LOG.info("%s: landed %d billed records and %d conversions in %d batches, %d dead letters", JOB_NAME,
             counts.billed, counts.conversions, counts.batches, counts.dead_letters)


if __name__ == "__main__":
    main()
