"""Deploying the streaming jobs to a Flink cluster with `flink run`, exactly as
a user deploys to their own cluster, and reading what runs there over Flink's
REST API. `adserve jobs deploy|upgrade|list|cancel` are thin shells over this.

Against your own cluster: set flink.rest_url (ADSERVE_FLINK_REST_URL) with its
credentials and CA file (FlinkRest), or pass --jobmanager host:port, and pass
--python (an interpreter on the cluster's TaskManagers with this project's
requirements installed) and the job's own flags (--bootstrap ...). The code of
core/, schemas/ and jobs/ is shipped with the job (-pyfs), the Kafka connector
jar with pipeline.jars."""
from __future__ import annotations

import dataclasses
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from core.endpoints import FlinkEndpoint
from core.errors import AdserveError

REPO_ROOT = Path(__file__).resolve().parents[1]
SHIPPED_PACKAGES = ("core", "schemas", "jobs", "streams")
HTTP_TIMEOUT_S = 5.0
ENDED_STATES = ("FINISHED", "CANCELED", "FAILED")
CLAIM_MODES = ("claim", "no_claim")


class DeployError(AdserveError, RuntimeError):
    """A job could not be submitted, found or cancelled."""


@dataclass(frozen=True)
class JobSpec:
    name: str
    module: str
    summary: str


JOBS: dict[str, JobSpec] = {
    "event_counts": JobSpec("event_counts", "jobs.event_counts.main",
                            "smoke job: events per campaign and minute, ad.events -> ops.event_counts"),
    "index_builder": JobSpec("index_builder", "jobs.index_builder.main",
                             "campaign store changes (cdc.public.*) -> serving.ads, serving.campaigns"),
    "budget_pacing": JobSpec("budget_pacing", "jobs.budget_pacing",
                             "spend, campaigns, ads, billed spend -> budget.state, budget.leases, Redis pacing:*"),
    "click_aggregator": JobSpec("click_aggregator", "jobs.click_aggregator.main",
                                "ad.events, campaigns -> deduplicated, tagged, billed: billing.billed_spend"),
    "archiver": JobSpec("archiver", "jobs.archiver.main",
                        "ad.served, ad.events, billing, campaigns, training examples -> hourly Avro container "
                        "files (the archive)"),
    "training_join": JobSpec("training_join", "jobs.training_join.main",
                             "ad.served, ad.events -> labelled, down-sampled training.examples"),
    "features": JobSpec("features", "jobs.features.main",
                        "ad.served, beacons, feedback, serving.ads -> ad-feature snapshots, features.ads, "
                        "model.registry; consented users' features -> Redis"),
}


@dataclass(frozen=True)
class RunningJob:
    job_id: str
    name: str
    state: str
    start_time_ms: int
    duration_ms: int


def flink_cli() -> Path:
    import pyflink

    return Path(pyflink.__file__).parent / "bin" / "flink"


@dataclass(frozen=True)
class RestoreOptions:
    """How a job starts from saved state: whether state of an operator uid the new code no longer has may be
    dropped (`--allowNonRestoredState`), and the claim mode (see `deploy`)."""

    allow_non_restored_state: bool = False
    claim_mode: str = "claim"


@dataclass(frozen=True)
class SavepointStop:
    """How `upgrade` stops the running job: the folder its savepoint goes to (None: the cluster's
    execution.checkpointing.savepoint-dir) and how long the stop may take."""

    savepoint_dir: str | None = None
    timeout_s: float = 120.0


def deploy(name: str, *, jobmanager: str, conf_dir: Path, job_args: Sequence[str] = (),
           python: str = sys.executable, timeout_s: float = 180.0, savepoint: str | None = None,
           restore: RestoreOptions = RestoreOptions()) -> str:
    """Submit a job detached with `flink run`; returns its Flink job id. With `savepoint` (a savepoint or a
    retained checkpoint's folder) the job starts from that state (`flink run -s`); Flink then refuses state of
    an operator uid the new code no longer has unless `restore.allow_non_restored_state` (which drops that
    state).

    `restore.claim_mode` "claim" (the default) hands the savepoint to the new job, which deletes it once a newer
    checkpoint subsumes it: a job on the state changelog (click_aggregator) can only restore this way, as its
    first checkpoint cannot be the full one "no_claim" demands. "no_claim" leaves the savepoint untouched."""
    allow_non_restored_state, claim_mode = restore.allow_non_restored_state, restore.claim_mode
    if name not in JOBS:
        raise DeployError(f"unknown job {name!r}; known: {', '.join(sorted(JOBS))}")
    if allow_non_restored_state and not savepoint:
        raise DeployError("--allow-non-restored-state only applies to a start from a savepoint (--from-savepoint)")
    if claim_mode not in CLAIM_MODES:
        raise DeployError(f"claim mode {claim_mode!r}: one of {', '.join(CLAIM_MODES)}")
    spec = JOBS[name]
    cmd = [
        "bash", str(flink_cli()), "run", "--detached", "-m", jobmanager,
        *(["-s", savepoint, "--claimMode", claim_mode] if savepoint else []),
        *(["--allowNonRestoredState"] if allow_non_restored_state else []),
        "-pym", spec.module,
        "-pyfs", ",".join(str(REPO_ROOT / p) for p in SHIPPED_PACKAGES),
        "-pyexec", python, "-pyclientexec", python,
        *job_args,
    ]
    env = {"FLINK_CONF_DIR": str(conf_dir), "PATH": _path_env()}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired as exc:
        raise DeployError(f"`flink run` of {name} did not finish in {timeout_s:.0f} s") from exc
    output = done.stdout + done.stderr
    match = re.search(r"JobID ([0-9a-f]{32})", output)
    if done.returncode != 0 or match is None:
        raise DeployError(f"`flink run` of {name} failed (exit {done.returncode}):\n{output[-3000:]}")
    return match.group(1)


def _path_env() -> str:
    import os

    return os.environ.get("PATH", "/usr/bin:/bin")


@dataclass(frozen=True)
class FlinkRest:
    """A Flink cluster's REST API as this module calls it: the URL, the Authorization header's value (a bearer
    token or basic credentials of the proxy in front of the API; "" for none), the CA file of an https:// URL
    whose certificate the system does not trust, and how long one call may take. Every function here takes one,
    or a bare URL (no credentials, HTTP_TIMEOUT_S)."""

    url: str
    authorization: str = dataclasses.field(default="", repr=False)
    ca_file: str = ""
    timeout_s: float = HTTP_TIMEOUT_S

    @classmethod
    def of(cls, endpoint: FlinkEndpoint) -> FlinkRest:
        """The REST API the settings name (flink.rest_url, its credentials, CA file and timeout)."""
        return cls(endpoint.rest_url.rstrip("/"), endpoint.authorization(), endpoint.ca_file, endpoint.timeout_s)

    def __str__(self) -> str:
        return self.url


def _client(rest: str | FlinkRest) -> FlinkRest:
    return rest if isinstance(rest, FlinkRest) else FlinkRest(str(rest).rstrip("/"))


def _call(rest: str | FlinkRest, path: str, method: str = "GET", body: dict | None = None) -> object:
    client = _client(rest)
    url = f"{client.url}{path}"
    headers = {"Authorization": client.authorization} if client.authorization else {}
    if body is not None:
        headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(), method=method,
                                     headers=headers)
    context = ssl.create_default_context(cafile=client.ca_file) if client.ca_file else None
    try:
        with urllib.request.urlopen(request, timeout=client.timeout_s,  # noqa: S310 - the configured cluster
                                    context=context) as resp:
            text = resp.read().decode()
    except urllib.error.HTTPError as exc:
        refused = " (refused: check flink.token or flink.username/password)" if exc.code in (401, 403) else ""
        raise DeployError(f"Flink REST call {method} {url} failed: HTTP {exc.code}{refused}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise DeployError(f"Flink REST call {method} {url} failed: {exc}") from exc
    return json.loads(text) if text else {}


def list_jobs(rest_url: str | FlinkRest) -> list[RunningJob]:
    overview = _call(rest_url, "/jobs/overview")
    return [RunningJob(j["jid"], j["name"], j["state"], j["start-time"], j["duration"])
            for j in overview.get("jobs", [])]  # type: ignore[union-attr]


def job_state(rest_url: str | FlinkRest, job_id: str) -> tuple[str, list[str]]:
    """The job's state and the states of its vertices."""
    detail = _call(rest_url, f"/jobs/{job_id}")
    return detail["state"], [v["status"] for v in detail.get("vertices", [])]  # type: ignore[index]


def exception_history(rest_url: str | FlinkRest, job_id: str) -> list[dict]:
    """The job's failures, newest first, as Flink keeps them (exceptionName, stacktrace, timestamp, ...; the
    newest 16 by default)."""
    detail = _call(rest_url, f"/jobs/{job_id}/exceptions?maxExceptions=100")
    return list(detail.get("exceptionHistory", {}).get("entries", []))  # type: ignore[union-attr]


def failures(rest_url: str | FlinkRest, job_id: str) -> int:
    """How many failures the job has had (the length of its exception history)."""
    return len(exception_history(rest_url, job_id))


def wait_running(rest_url: str | FlinkRest, job_id: str, timeout_s: float = 120.0) -> float:
    """Seconds until the job and every one of its tasks runs; raises if it fails or times out."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        state, vertices = job_state(rest_url, job_id)
        if state in ("FAILED", "CANCELED", "FINISHED"):
            raise DeployError(f"job {job_id} is {state} before it ran")
        if state == "RUNNING" and vertices and all(v == "RUNNING" for v in vertices):
            return time.monotonic() - start
        time.sleep(0.2)
    raise DeployError(f"job {job_id} not running after {timeout_s:.0f} s")


def stop(rest_url: str | FlinkRest, job_id: str, timeout_s: float = 120.0, target_directory: str | None = None) -> str:
    """Stop a job gracefully with a savepoint (into `target_directory`, else the cluster's
    execution.checkpointing.savepoint-dir); returns its location. When the savepoint fails Flink keeps the
    job running, and this raises DeployError saying so.

    The way to end a streaming job: sinks commit, state is kept for a restart
    from the savepoint, and Python operators shut down in order. (A hard
    cancel of a job with Python operators can kill the TaskManager in
    PyFlink 2.2: its Beam harness is released twice on cancellation.)"""
    body: dict[str, object] = {"drain": False}
    if target_directory:
        body["targetDirectory"] = target_directory
    trigger = _call(rest_url, f"/jobs/{job_id}/stop", "POST", body)
    request_id = trigger["request-id"]  # type: ignore[index]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = _call(rest_url, f"/jobs/{job_id}/savepoints/{request_id}")
        if status["status"]["id"] == "COMPLETED":  # type: ignore[index]
            operation = status.get("operation", {})  # type: ignore[union-attr]
            if "failure-cause" in operation:
                raise DeployError(f"the savepoint of {job_id} failed, so the job was not stopped and keeps "
                                  f"running: {operation['failure-cause'].get('class')}: "
                                  f"{str(operation['failure-cause'].get('stack-trace', ''))[:500]}")
            _wait_ended(rest_url, job_id, deadline)
            return str(operation.get("location", ""))
        time.sleep(0.3)
    raise DeployError(f"job {job_id} did not stop within {timeout_s:.0f} s")


def _wait_ended(rest_url: str | FlinkRest, job_id: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        state, _ = job_state(rest_url, job_id)
        if state in ("CANCELED", "FAILED", "FINISHED"):
            return state
        time.sleep(0.3)
    raise DeployError(f"job {job_id} did not end in time")


def cancel(rest_url: str | FlinkRest, job_id: str, timeout_s: float = 60.0) -> None:
    """Cancel a job at once (no savepoint) and wait until it is cancelled."""
    _call(rest_url, f"/jobs/{job_id}?mode=cancel", "PATCH")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state, _ = job_state(rest_url, job_id)
        if state in ("CANCELED", "FAILED", "FINISHED"):
            return
        time.sleep(0.3)
    raise DeployError(f"job {job_id} still not cancelled after {timeout_s:.0f} s")


@dataclass(frozen=True)
class Upgrade:
    """What `upgrade` did: the job it stopped, the savepoint it took, and the job started from it."""

    name: str
    stopped_job_id: str
    savepoint: str
    job_id: str


def running_job(rest_url: str | FlinkRest, name: str) -> RunningJob:
    """The one running (or starting) job of that name; DeployError when there is none or more than one."""
    running = [j for j in list_jobs(rest_url) if j.name == name and j.state not in ENDED_STATES]
    if not running:
        raise DeployError(f"no running job named {name} on {rest_url}: nothing to upgrade "
                          f"(`adserve jobs deploy {name}` starts one)")
    if len(running) > 1:
        raise DeployError(f"{len(running)} running jobs are named {name} on {rest_url} "
                          f"({', '.join(j.job_id for j in running)}): stop all but one first")
    return running[0]


def upgrade(name: str, *, rest_url: str | FlinkRest, jobmanager: str, conf_dir: Path, job_args: Sequence[str] = (),
            python: str = sys.executable, restore: RestoreOptions = RestoreOptions(),
            savepoint_stop: SavepointStop = SavepointStop()) -> Upgrade:
    """Stop the running job `name` with a savepoint and submit this checkout's code of it from that savepoint.

    Nothing is cancelled when the savepoint fails (the old job keeps running). The old job is stopped before
    the new one starts, so at no time do two copies write; if the new submission fails, the error names the
    savepoint to start from with `adserve jobs deploy NAME --from-savepoint PATH`."""
    if name not in JOBS:
        raise DeployError(f"unknown job {name!r}; known: {', '.join(sorted(JOBS))}")
    old = running_job(rest_url, name)
    savepoint = stop(rest_url, old.job_id, savepoint_stop.timeout_s, savepoint_stop.savepoint_dir)
    if not savepoint:
        raise DeployError(f"{name} ({old.job_id}) stopped, but Flink named no savepoint location")
    try:
        job_id = deploy(name, jobmanager=jobmanager, conf_dir=conf_dir, job_args=job_args, python=python,
                        savepoint=savepoint, restore=restore)
    except DeployError as exc:
        raise DeployError(f"{name} was stopped with a savepoint at {savepoint}, but its new code did not start; "
                          f"start it with `adserve jobs deploy {name} --from-savepoint {savepoint}`:\n{exc}") from exc
    return Upgrade(name, old.job_id, savepoint, job_id)
