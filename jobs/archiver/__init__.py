"""Flink job `archiver`: Kafka topics -> hourly Avro container files, the input of every Beam backfill. Pure
Flink SQL (no Python operator on the path); each record archived as it was on its topic. See docs/billing.md
(The archive)."""
