"""`python -m jobs.archiver`: the job's entry point (jobs.archiver.main)."""
from jobs.archiver.main import main

main()
