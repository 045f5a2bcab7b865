"""Flink job `training_join`: ad.served + ad.events + ad.conversions -> labelled, down-sampled
training.examples, keyed by impression id, on event time. Every rule is core.training's (the Beam backfill
runs the same ones); this package only wires them to Kafka and Flink state. See docs/learning.md."""
