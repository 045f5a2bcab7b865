"""The benchmarks behind `adserve bench`: each measures one part of the platform beside a baseline and prints
its documented figure names with --json. May drive the simulators (sim); nothing below imports it."""
