"""The README's targets table is generated from the benchmarks' raw JSON (bench.targets), so a figure lives in one
place: these tests fail when the README and `adserve bench table` disagree, and check how a row reads and is
judged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from adserve.cli import main
from bench import targets
from core.errors import AdserveError

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_table_is_what_adserve_bench_table_prints(capsys) -> None:
    assert main(["bench", "table", "--benchmarks", str(ROOT / "benchmarks")]) == 0
    printed = capsys.readouterr().out.strip("\n")
    assert targets.readme_table((ROOT / "README.md").read_text()) == printed


def test_every_target_reads_its_figure_from_the_json() -> None:
    figures = targets.load_figures(ROOT / "benchmarks")
    for target in targets.TARGETS:
        assert "not in benchmarks/" not in targets.row(target, figures), target.what


def test_a_changed_figure_changes_the_row_and_its_verdict() -> None:
    target = next(t for t in targets.TARGETS if t.what.startswith("advertiser change on every ad server"))
    assert targets.row(target, {"freshness": {"lag_p99_s": 1.5}}) == (
        "| advertiser change on every ad server, p99 < 2 s (the design's SLO: 10 s) | 1.5 s | ✔ | "
        "`adserve bench freshness` |")
    assert "| 2.4 s | ✘ |" in targets.row(target, {"freshness": {"lag_p99_s": 2.4}})


def test_a_figure_missing_from_the_json_is_named_and_not_met() -> None:
    target = next(t for t in targets.TARGETS if t.source == "pacing")
    line = targets.row(target, {"pacing": {"spend_items_per_s": 300_000}})
    assert "not in benchmarks/pacing.json" in line and "baseline_python_items_per_s" in line and "| ✘ |" in line


def test_write_replaces_only_the_table_and_refuses_a_readme_without_markers(tmp_path) -> None:
    folder = tmp_path / "benchmarks"
    folder.mkdir()
    for stem in {t.source for t in targets.TARGETS}:
        (folder / f"{stem}.json").write_text(json.dumps({}))
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{targets.TABLE_BEGIN}\n| stale |\n{targets.TABLE_END}\nafter\n")
    assert main(["bench", "table", "--benchmarks", str(folder), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"before\n{targets.TABLE_BEGIN}\n{targets.HEADER}\n") and text.endswith(
        f"{targets.TABLE_END}\nafter\n")
    assert "| stale |" not in text and text.count("| ✘ |") == len(targets.TARGETS)
    with pytest.raises(AdserveError, match="markers"):
        targets.with_table("no table here", "x")


def test_a_missing_benchmark_file_is_named(tmp_path, capsys) -> None:
    assert main(["bench", "table", "--benchmarks", str(tmp_path)]) == 2
    assert "is missing" in capsys.readouterr().err
