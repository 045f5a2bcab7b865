"""The snapshot writer process beside the index builder: a snapshot every period, a failed cut retried."""
from __future__ import annotations

import threading

from serving import snapshots


def test_the_writer_cuts_a_snapshot_each_period_until_halted_and_retries_after_a_failed_cut(monkeypatch, tmp_path):
    halt, cuts = threading.Event(), []

    def cut(bootstrap, directory):
        cuts.append(bootstrap)
        if len(cuts) == 1:
            raise OSError("broker away")
        if len(cuts) == 3:
            halt.set()
        return snapshots.write_files(directory, len(cuts), {}, {})

    monkeypatch.setattr(snapshots, "write_snapshot", cut)
    written = snapshots.write_every(snapshots.SnapshotWriterSettings("kafka:9092", tmp_path, every_s=0.0), halt)
    assert written == 2 and cuts == ["kafka:9092"] * 3
    assert snapshots.latest_snapshot(tmp_path).name == "snapshot-3"


def test_the_writer_keeps_only_the_newest_snapshots(monkeypatch, tmp_path):
    halt, cuts = threading.Event(), []

    def cut(bootstrap, directory):
        cuts.append(1)
        if len(cuts) == 5:
            halt.set()
        return snapshots.write_files(directory, len(cuts), {}, {})

    monkeypatch.setattr(snapshots, "write_snapshot", cut)
    snapshots.write_every(snapshots.SnapshotWriterSettings("b", tmp_path, every_s=0.0, keep=2), halt)
    assert sorted(p.name for p in tmp_path.glob("snapshot-*")) == ["snapshot-4", "snapshot-5"]
