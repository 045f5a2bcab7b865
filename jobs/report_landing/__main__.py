"""`python -m jobs.report_landing`: the job's entry point (jobs.report_landing.main)."""
from jobs.report_landing.main import main

main()
