"""Kafka I/O shared by servers, tools and tests: client configs with timeouts
on every call, librdkafka's log routed to Python logging, and Avro-framed
produce and consume helpers. Flink jobs use Flink's own connector instead."""
