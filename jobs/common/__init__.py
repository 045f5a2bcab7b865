"""The plumbing every PyFlink job of jobs/ shares: flags and settings (args, settings), a job's entry point
(job), the fetched jars (jars), the execution environment and a job's start (environment), Kafka topics as
raw-bytes tables (kafka_tables), corrupt records to dead letters (dead_letters, routing) and campaign shards
(shards).

Nothing here holds a rule of the product, and nothing bakes in a host, port or jar path: those come from a
job's flags or the environment."""
