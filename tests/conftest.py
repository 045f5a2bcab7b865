"""The whole suite's time budget (tests/budget.toml): at the end of every run, the total wall time against the
budget, and each test over its own limit; pytest's --durations (pyproject.toml) lists the 30 slowest."""
from __future__ import annotations

import time
import tomllib
from pathlib import Path

BUDGET_FILE = Path(__file__).with_name("budget.toml")
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


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if not _BEGAN:
        return
    wall_s = time.monotonic() - _BEGAN[0]
    limits = budget()
    lines = over_budget(_SPENT, wall_s, limits)
    terminalreporter.write_sep("=", "time budget")
    terminalreporter.write_line(f"{len(_SPENT)} tests in {wall_s:.0f} s (budget {limits['suite_s']:.0f} s for the "
                                f"suite, {limits['test_s']:.0f} s a test)")
    for line in lines:
        terminalreporter.write_line(line, red=True)
