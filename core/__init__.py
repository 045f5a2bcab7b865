"""The design's rules as pure, typed Python: no I/O, no clocks, no frameworks.

Imported by jobs (Flink), pipelines (Beam) and servers alike, so a rule exists
once. A module here must never open a socket or a file, read the wall clock,
or import pyflink, apache_beam, confluent_kafka or redis."""
