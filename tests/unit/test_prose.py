"""Tracked text describes the product as it is, never the history of its making.

A numbered work period, an issue number, a "probe" (an experiment run while building) or a note that something
was left uncommitted tells a reader how the code came to be, which belongs in commit messages; in a file it goes
stale the day it is written.
"""
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HISTORY = re.compile(r"\bsession \d+|\bsessions \d+|\bissues? #?\d+|\bnot committed\b|\buncommitted\b|\bprobes?\b",
                     re.IGNORECASE)


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    files = []
    for name in listed.decode().split("\0"):
        path = ROOT / name
        if not name or path == Path(__file__).resolve() or not path.is_file():
            continue
        head = path.read_bytes()[:8192]
        if b"\0" not in head:
            files.append(path)
    return files


def test_no_tracked_text_names_a_work_period_an_issue_a_probe_or_uncommitted_work():
    hits = []
    for path in _tracked_text_files():
        text = path.read_text(errors="replace")
        for number, line in enumerate(text.splitlines(), 1):
            if HISTORY.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert not hits, "history in tracked files:\n" + "\n".join(hits)
