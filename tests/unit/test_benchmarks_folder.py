"""The benchmarks folder holds RESULTS.md and the latest raw JSON of each benchmark, nothing else.

Earlier runs live in the commit history; a second file for one benchmark (a dated copy, a rerun) would
leave readers to guess which one RESULTS.md's figures come from.
"""
import json
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# One file per benchmark: `<bench>.json`, a lowercase name without a date or a run number.
JSON_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\.json")
DATED = re.compile(r"\d{4}-\d{2}-\d{2}|run\d|session")


def _files() -> list[Path]:
    return sorted(path for path in BENCHMARKS.iterdir() if path.name != "RESULTS.md")


def test_every_file_besides_the_results_is_a_json_named_after_its_benchmark():
    for path in _files():
        assert path.is_file(), f"{path.name}: benchmarks/ holds files only"
        assert JSON_NAME.fullmatch(path.name), f"{path.name}: name it <bench>.json"
        assert not DATED.search(path.name), f"{path.name}: one file per benchmark, without a date or run"


@pytest.mark.parametrize("path", _files(), ids=lambda path: path.name)
def test_every_raw_json_parses(path):
    json.loads(path.read_text())


def test_the_results_cite_every_raw_json_and_no_missing_one():
    results = (BENCHMARKS / "RESULTS.md").read_text()
    cited = set(re.findall(r"benchmarks/([A-Za-z0-9_.-]+\.json)", results))
    present = {path.name for path in _files()}
    assert cited == present
