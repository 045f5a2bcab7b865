"""The whole suite's time budget (tests/budget.toml): at the end of every run, the total wall time against the
budget, each test over its own limit, and the 30 slowest tests (setup, call and teardown together).

`./run tests` runs the suite in two pytest sessions (the unit tests on every core, then the integration tests
on the one platform) and sets ADSERVE_TEST_STARTED (when the command started, bootstrap included) and
ADSERVE_TEST_LEDGER (a file each session appends its tests' seconds to): the last session's summary then covers
the whole command. A plain `pytest ...` reports its own session."""
from __future__ import annotations

import json
import os
import time
import tomllib
from pathlib import Path

BUDGET_FILE = Path(__file__).with_name("budget.toml")
STARTED_ENV, LEDGER_ENV, LAST_PART_ENV = "ADSERVE_TEST_STARTED", "ADSERVE_TEST_LEDGER", "ADSERVE_TEST_LAST_PART"
SLOWEST = 30
_BEGAN: list[float] = []
_SPENT: dict[str, float] = {}  # test id -> its setup, call and teardown seconds together


def budget() -> dict[str, float]:
    return {k: float(v) for k, v in tomllib.loads(BUDGET_FILE.read_text()).items()}


def pytest_sessionstart(session) -> None:
    _BEGAN.append(time.monotonic())


def pytest_runtest_logreport(report) -> None:
    _SPENT[report.nodeid] = _SPENT.get(report.nodeid, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)


def over_budget(spent: dict[str, float], wall_s: float, limits: dict[str, float]) -> list[str]:
    """The lines that say where a run went over its budget (none when it did not). Pure."""
    lines = []
    if wall_s > limits["suite_s"]:
        lines.append(f"the suite took {wall_s:.0f} s, {wall_s - limits['suite_s']:.0f} s over its budget of "
                     f"{limits['suite_s']:.0f} s (tests/budget.toml)")
    slow = sorted(((s, t) for t, s in spent.items() if s > limits["test_s"]), reverse=True)
    for seconds, test in slow:
        lines.append(f"{seconds:7.1f} s  {test}  (over the {limits['test_s']:.0f} s a test may take)")
    if lines and not slow:
        lines += [f"{s:7.1f} s  {t}" for s, t in sorted(((s, t) for t, s in spent.items()), reverse=True)[:10]]
    return lines


def slowest(spent: dict[str, float], n: int = SLOWEST) -> list[str]:
    """The n slowest tests, one line each, slowest first. Pure."""
    return [f"{s:7.1f} s  {t}" for s, t in sorted(((s, t) for t, s in spent.items()), reverse=True)[:n]]


def read_ledger(path: Path) -> dict[str, float]:
    """Test id -> seconds over every session that wrote to the ledger (a later line for the same id adds)."""
    spent: dict[str, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                for test, seconds in json.loads(line).items():
                    spent[test] = spent.get(test, 0.0) + float(seconds)
    return spent


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _BEGAN or os.environ.get("PYTEST_XDIST_WORKER"):
        return  # an xdist worker's reports reach the controller, which sums them
    limits = budget()
    spent, wall_s, what = dict(_SPENT), time.monotonic() - _BEGAN[0], "tests"
    ledger = os.environ.get(LEDGER_ENV)
    if ledger:
        with open(ledger, "a") as out:
            out.write(json.dumps(_SPENT) + "\n")
        if os.environ.get(LAST_PART_ENV) != "1":
            terminalreporter.write_sep("=", "time so far")
            terminalreporter.write_line(f"{len(_SPENT)} tests in {wall_s:.0f} s; the summary of the whole suite "
                                        f"follows its last part")
            return
        spent = read_ledger(Path(ledger))
        started = float(os.environ.get(STARTED_ENV) or 0.0)
        if started:
            wall_s, what = time.time() - started, "tests, bootstrap included,"
    lines = over_budget(spent, wall_s, limits)
    terminalreporter.write_sep("=", "time budget")
    terminalreporter.write_line(f"{len(spent)} {what} in {wall_s:.0f} s (budget {limits['suite_s']:.0f} s for the "
                                f"suite, {limits['test_s']:.0f} s a test)")
    for line in lines:
        terminalreporter.write_line(line, red=True)
    terminalreporter.write_line(f"the {min(SLOWEST, len(spent))} slowest (setup, call and teardown together):")
    for line in slowest(spent):
        terminalreporter.write_line(line)
