"""`python -m jobs.features`: the job's entry point (jobs.features.main)."""
from jobs.features.main import main

main()
