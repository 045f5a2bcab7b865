"""`adserve simulate`'s day size and progress: the default day and --full, budgets scaled with the requests,
the ETA's work model, and the progress bar on a terminal and in a log."""
from __future__ import annotations

import io
from datetime import datetime, timezone

import numpy as np
import pytest

from adserve.cli import build_parser
from adserve.pacing_cli import DEFAULT_REQUESTS, DEFAULT_SERVERS, day_size
from core.billing import size_class
from sim import pacing_day
from sim.progress import Progress, duration, progress_line

NOON = datetime(2026, 12, 2, 12, 0, 0, tzinfo=timezone.utc)


def _args(*argv: str):
    return build_parser().parse_args(["simulate", *argv])


def test_the_default_day_is_the_small_one_and_full_is_the_full_size_day():
    assert day_size(_args()) == (DEFAULT_REQUESTS, DEFAULT_SERVERS)
    assert day_size(_args("--full")) == (pacing_day.FULL_DAY_REQUESTS, pacing_day.FULL_DAY_SERVERS) == (200_000, 3)
    assert DEFAULT_REQUESTS < pacing_day.FULL_DAY_REQUESTS


def test_either_day_keeps_the_servers_15_s_ahead_of_the_job():
    assert _args().lead_s == _args("--full").lead_s == 15


def test_numbers_given_win_over_either_size():
    assert day_size(_args("--requests", "1000")) == (1000, DEFAULT_SERVERS)
    assert day_size(_args("--full", "--servers", "4")) == (200_000, 4)


def test_a_fleet_of_one_is_refused_naming_the_option():
    with pytest.raises(SystemExit, match="--servers must be at least 2"):
        day_size(_args("--servers", "1"))


def test_budgets_scale_with_the_requests_and_keep_the_full_size_class():
    full, full_events = pacing_day.script(9_000_000, seed=1)
    small, small_events = pacing_day.script(9_000_000, seed=1, budget_scale=0.3)
    assert [e.second for e in full_events] == [e.second for e in small_events]
    for f, s in zip(full, small):
        assert (f.campaign_id, f.name, f.bid_micros, f.placements) == (s.campaign_id, s.name, s.bid_micros,
                                                                      s.placements)
        assert f.budget_micros == f.planned_budget_micros
        assert s.budget_micros == int(f.budget_micros * 0.3)
        assert size_class(s.planned_budget_micros) == size_class(f.budget_micros)
    assert {size_class(c.planned_budget_micros) for c in small} == {"small", "medium", "large"}


def test_the_work_model_charges_every_second_and_the_busy_evening_most():
    work = pacing_day.work_model(60_000)
    assert len(work) == 86_400 and np.all(np.diff(work) > 0)
    total = 86_400 * pacing_day.SECOND_COST_S + 60_000 * pacing_day.REQUEST_COST_S
    assert work[-1] == pytest.approx(total)
    night, evening = work[3 * 3600 + 60] - work[3 * 3600], work[20 * 3600 + 60] - work[20 * 3600]
    assert evening > night


def test_a_progress_line_gives_elapsed_the_time_left_and_the_end():
    line = progress_line("simulated day", 25, 100, 60.0, NOON, note="06:00 of 24:00")
    assert "[######                   ]  25% 06:00 of 24:00" in line
    assert "1m00s elapsed, ETA 3m00s (ends 12:03:00 UTC)" in line


def test_no_eta_in_the_first_seconds_before_any_work_or_once_it_is_all_done():
    assert "ETA" not in progress_line("x", 1, 100, 1.0, NOON)
    assert "ETA" not in progress_line("x", 0, 100, 5.0, NOON)
    assert "ETA" not in progress_line("x", 100, 100, 5.0, NOON)


def test_durations_are_short():
    assert [duration(s) for s in (4.4, 65, 3725)] == ["4 s", "1m05s", "1h02m"]


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_in_a_log_the_bar_is_a_plain_line_every_so_often_and_one_at_the_end():
    out, clock = io.StringIO(), _Clock()
    bar = Progress("simulated day", 100, out, line_every_s=30, tty=False, clock=clock, wall=lambda: NOON)
    for done in range(1, 100):
        clock.t = done  # one wall second a unit
        bar.update(done, note=f"{done}")
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue()
    assert len(lines) == 5  # at 1, 31, 61 and 91 s, and the close
    assert lines[1].startswith("simulated day: [") and "31% 31 | 31 s elapsed, ETA 1m09s (ends 12:01:09 UTC)" in lines[1]
    assert "100%" in lines[-1] and "ETA" not in lines[-1]


def test_on_a_terminal_the_bar_redraws_in_place_and_ends_its_line_once():
    out, clock = io.StringIO(), _Clock()
    bar = Progress("simulated day", 10, out, tty=True, clock=clock, wall=lambda: NOON)
    for done in range(1, 10):
        clock.t = done
        bar.update(done)
    bar.update(9)  # nothing new: not drawn again
    bar.close()
    text = out.getvalue()
    assert text.count("\r") == 10 and text.count("\n") == 1 and text.endswith("\n")
