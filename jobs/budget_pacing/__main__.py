"""`python -m jobs.budget_pacing`: the job's entry point (jobs.budget_pacing.main)."""
from jobs.budget_pacing.main import main

main()
