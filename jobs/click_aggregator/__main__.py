"""`python -m jobs.click_aggregator`: the job's entry point (jobs.click_aggregator.main)."""
from jobs.click_aggregator.main import main

main()
