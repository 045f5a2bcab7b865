"""`python -m jobs.index_builder`: the job's entry point (jobs.index_builder.main)."""
from jobs.index_builder.main import main

main()
