"""The decision engine: targeting index, filters, pre-ranker, prediction interface and the auction run.

Pure (no I/O, no wall clock: time and randomness are parameters), so the HTTP
ad server, the replay pipeline and the benchmarks all call the same code."""
