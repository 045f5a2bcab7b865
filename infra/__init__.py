"""Local platform control: starts and stops the real Kafka, Kafka Connect,
PostgreSQL, Redis and Flink on loopback, and defines the topics.

Nothing here is imported by jobs, pipelines or servers at run time; they get
addresses from their settings, never from this package."""
