"""docs/deploy.md's commands: each fenced block is data or sample output (its info string says so: toml, text),
or is marked on the line before it either `<!-- checked -->`, whose commands this test checks against the
project (every `adserve ...` line parses with the command's own parser, so a command or flag that is gone or
renamed fails here; the files a line names exist), or `<!-- cloud-only: WHAT -->`, naming what it needs that a
test machine does not have (a Kubernetes cluster, a container registry, Google Cloud). A line that calls
kubectl, helm, docker or gcloud is never in a checked block."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from adserve.cli import build_parser

REPO_ROOT = Path(__file__).resolve().parents[2]
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"
DATA_BLOCKS = ("toml", "text", "yaml", "json")
MARK = re.compile(r"^<!-- (checked|cloud-only: (?P<what>[^>]+?)) -->$")
CLOUD_TOOLS = ("kubectl", "helm", "docker", "gcloud")
ENV_ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def blocks(text: str) -> list[dict]:
    """The fenced blocks: their first line number, info string, the line before the fence and their lines."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            info, start, body = lines[i][3:].strip(), i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            before = next((lines[j] for j in range(start - 2, -1, -1) if lines[j].strip()), "")
            out.append({"line": start, "info": info, "before": before.strip(), "body": body})
        i += 1
    return out


def commands(body: list[str]) -> list[str]:
    """The block's command lines: continuations joined, comments and blank lines dropped."""
    out, pending = [], ""
    for raw in body:
        line = raw.split(" # ")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            out.append(line)
    return out


def check_command(line: str) -> str | None:
    """Why `line` is not a command this test can vouch for, or None."""
    words = shlex.split(line)
    while words and ENV_ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return None
    tool = words[0]
    if tool in CLOUD_TOOLS:
        return f"{tool} needs a cluster or a cloud: mark the block cloud-only"
    if tool == "export":
        return None if all(ENV_ASSIGNMENT.match(w) for w in words[1:]) else "export of something not VAR=value"
    if tool == "adserve":
        argv = [w for w in words[1:]]
        try:
            build_parser().parse_args(argv)
        except SystemExit:
            return f"`adserve {' '.join(argv)}` does not parse with adserve's parser"
        return None
    if tool == "bash" and len(words) == 2:
        return None if (REPO_ROOT / words[1]).is_file() else f"{words[1]} does not exist"
    if tool == "mvn" and "-f" in words:
        pom = words[words.index("-f") + 1]
        return None if (REPO_ROOT / pom).is_file() else f"{pom} does not exist"
    if tool == "kill" and words[1:2] == ["-TERM"]:
        return None  # the signal a drain is documented with
    return f"{tool}: not a command this test can check"


def test_every_block_is_data_checked_or_marked_cloud_only_with_what_it_needs():
    unmarked = []
    for block in blocks(DEPLOY_DOC.read_text()):
        if block["info"] in DATA_BLOCKS:
            continue
        mark = MARK.match(block["before"])
        if mark is None:
            unmarked.append(f"docs/deploy.md:{block['line']}: {block['body'][:1]}")
    assert unmarked == [], "blocks neither data nor marked `<!-- checked -->` or `<!-- cloud-only: ... -->`"


def test_the_checked_blocks_commands_parse_and_name_files_that_exist():
    problems, checked = [], 0
    for block in blocks(DEPLOY_DOC.read_text()):
        if MARK.match(block["before"]) and block["before"] == "<!-- checked -->":
            for line in commands(block["body"]):
                checked += 1
                why = check_command(line)
                if why:
                    problems.append(f"docs/deploy.md:{block['line']}: {line}: {why}")
    assert problems == []
    assert checked >= 8  # the settings, bootstrap, upgrade and drain commands


def test_the_cloud_only_blocks_say_what_they_need():
    needs = [MARK.match(b["before"]).group("what") for b in blocks(DEPLOY_DOC.read_text())
             if MARK.match(b["before"]) and b["before"] != "<!-- checked -->"]
    assert needs and all(len(what.split()) >= 2 for what in needs), needs


@pytest.mark.parametrize("line, problem", [
    ("adserve topics create --no-such-flag", "does not parse"),
    ("adserve topics erase", "does not parse"),
    ("kubectl -n adserve get pods", "cloud-only"),
    ("bash infra/no-such-script.sh", "does not exist"),
    ("curl localhost:8080/ready", "not a command this test can check"),
])
def test_a_renamed_flag_a_cloud_tool_or_a_missing_file_is_caught(line, problem):
    assert problem in (check_command(line) or "")
