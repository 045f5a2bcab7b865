"""The `adserve` command: one entry point for the platform, jobs, pipelines, servers and benchmarks."""
