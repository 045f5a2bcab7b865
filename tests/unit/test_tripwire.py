"""jobs.tripwire: the injected task failure fires once, on the N-th record after its file appears, and never
when the job names no file."""
from __future__ import annotations

import pytest

from jobs import tripwire
from jobs.tripwire import InjectedTaskFailure, Tripwire


@pytest.fixture(autouse=True)
def look_every_time(monkeypatch):
    monkeypatch.setattr(tripwire, "TRIPWIRE_LOOK_S", 0.0)


def test_no_file_named_never_fails():
    wire = Tripwire("")
    for _ in range(1000):
        wire.step()


def test_an_absent_file_does_not_fail(tmp_path):
    wire = Tripwire(str(tmp_path / "armed"))
    for _ in range(100):
        wire.step()


def test_the_nth_record_after_the_file_appears_fails_once_and_removes_the_file(tmp_path):
    path = tmp_path / "armed"
    wire = Tripwire(str(path))
    wire.step()
    path.write_text("3")
    wire.step()
    wire.step()
    with pytest.raises(InjectedTaskFailure, match="armed"):
        wire.step()
    assert not path.exists()
    for _ in range(10):
        wire.step()


def test_an_empty_file_fails_the_next_record(tmp_path):
    path = tmp_path / "armed"
    path.write_text("")
    with pytest.raises(InjectedTaskFailure):
        Tripwire(str(path)).step()


def test_of_two_instances_only_the_one_that_removes_the_file_fails(tmp_path):
    path = tmp_path / "armed"
    first, second = Tripwire(str(path)), Tripwire(str(path))
    path.write_text("2")
    first.step()
    second.step()
    with pytest.raises(InjectedTaskFailure):
        first.step()
    second.step()  # the file is gone: this one goes on
    assert not path.exists()


def test_the_file_is_looked_for_at_most_every_look_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(tripwire, "TRIPWIRE_LOOK_S", 3600.0)
    path = tmp_path / "armed"
    wire = Tripwire(str(path))
    wire.step()  # looked: absent
    path.write_text("1")
    for _ in range(100):
        wire.step()  # not looked again within the interval
    assert path.exists()
