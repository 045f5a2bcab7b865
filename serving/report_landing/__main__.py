"""`python -m serving.report_landing`: the process's entry point (serving.report_landing.main)."""
from serving.report_landing.main import main

main()
