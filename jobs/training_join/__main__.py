"""`python -m jobs.training_join`: the job's entry point (jobs.training_join.main)."""
from jobs.training_join.main import main

main()
