"""`python -m jobs.event_counts`: the job's entry point (jobs.event_counts.main)."""
from jobs.event_counts.main import main

main()
