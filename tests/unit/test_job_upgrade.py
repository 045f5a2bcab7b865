"""`adserve jobs upgrade` and `deploy --from-savepoint` (jobs.deploy) against a stand-in Flink: the order of
stop-with-savepoint and `flink run -s`, what is cancelled when a step fails (nothing), and the `flink run`
command line they build."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from jobs import deploy
from jobs.deploy import DeployError, RunningJob

REST = "http://jm:8081"
SAVEPOINT = "s3://bucket/savepoints/savepoint-aaaa-0123456789ab"


class StandInFlink:
    """The cluster's jobs, the savepoints it takes and the submissions it accepts."""

    def __init__(self, jobs, savepoint_fails=False, submit_fails=False):
        self.jobs, self.savepoint_fails, self.submit_fails = list(jobs), savepoint_fails, submit_fails
        self.calls: list[tuple] = []

    def list_jobs(self, rest_url):
        return list(self.jobs)

    def stop(self, rest_url, job_id, timeout_s=120.0, target_directory=None):
        self.calls.append(("stop", job_id, target_directory))
        if self.savepoint_fails:
            raise DeployError(f"the savepoint of {job_id} failed, so the job was not stopped and keeps running")
        self.jobs = [j if j.job_id != job_id else RunningJob(j.job_id, j.name, "FINISHED", 0, 0) for j in self.jobs]
        return SAVEPOINT

    def deploy(self, name, **kwargs):
        self.calls.append(("deploy", name, kwargs["savepoint"], kwargs["restore"].allow_non_restored_state))
        assert kwargs["restore"].claim_mode in deploy.CLAIM_MODES
        if self.submit_fails:
            raise DeployError("`flink run` of budget_pacing failed (exit 1)")
        return "f" * 32


@pytest.fixture
def flink(monkeypatch):
    def install(*jobs, **kwargs):
        stand_in = StandInFlink(jobs, **kwargs)
        for name in ("list_jobs", "stop", "deploy"):
            monkeypatch.setattr(deploy, name, getattr(stand_in, name))
        return stand_in
    return install


def _upgrade(name="budget_pacing", **kwargs):
    return deploy.upgrade(name, rest_url=REST, jobmanager="jm:8081", conf_dir=Path("/conf"), **kwargs)


def test_upgrade_stops_the_running_job_with_a_savepoint_and_starts_the_new_code_from_it(flink):
    cluster = flink(RunningJob("a" * 32, "budget_pacing", "RUNNING", 0, 0),
                    RunningJob("b" * 32, "click_aggregator", "RUNNING", 0, 0),
                    RunningJob("c" * 32, "budget_pacing", "FINISHED", 0, 0))
    done = _upgrade(savepoint_stop=deploy.SavepointStop(savepoint_dir="s3://bucket/savepoints"))
    assert cluster.calls == [("stop", "a" * 32, "s3://bucket/savepoints"),
                             ("deploy", "budget_pacing", SAVEPOINT, False)]
    assert done == deploy.Upgrade("budget_pacing", "a" * 32, SAVEPOINT, "f" * 32)


def test_upgrade_passes_allow_non_restored_state_only_when_asked(flink):
    cluster = flink(RunningJob("a" * 32, "budget_pacing", "RUNNING", 0, 0))
    _upgrade(restore=deploy.RestoreOptions(allow_non_restored_state=True))
    assert cluster.calls[-1] == ("deploy", "budget_pacing", SAVEPOINT, True)


def test_upgrade_without_a_running_job_of_that_name_says_so_and_touches_nothing(flink):
    cluster = flink(RunningJob("b" * 32, "click_aggregator", "RUNNING", 0, 0),
                    RunningJob("c" * 32, "budget_pacing", "CANCELED", 0, 0))
    with pytest.raises(DeployError, match="no running job named budget_pacing"):
        _upgrade()
    assert cluster.calls == []


def test_upgrade_refuses_when_two_jobs_of_that_name_run(flink):
    cluster = flink(RunningJob("a" * 32, "budget_pacing", "RUNNING", 0, 0),
                    RunningJob("d" * 32, "budget_pacing", "RUNNING", 0, 0))
    with pytest.raises(DeployError, match="2 running jobs are named budget_pacing"):
        _upgrade()
    assert cluster.calls == []


def test_a_failed_savepoint_submits_nothing_and_leaves_the_job_running(flink):
    cluster = flink(RunningJob("a" * 32, "budget_pacing", "RUNNING", 0, 0), savepoint_fails=True)
    with pytest.raises(DeployError, match="keeps running"):
        _upgrade()
    assert cluster.calls == [("stop", "a" * 32, None)]
    assert [j.state for j in cluster.jobs] == ["RUNNING"]


def test_a_failed_submission_after_the_stop_names_the_savepoint_to_start_from(flink):
    flink(RunningJob("a" * 32, "budget_pacing", "RUNNING", 0, 0), submit_fails=True)
    with pytest.raises(DeployError, match=f"jobs deploy budget_pacing --from-savepoint {SAVEPOINT}"):
        _upgrade()


def test_upgrade_of_an_unknown_job_names_the_known_ones(flink):
    flink()
    with pytest.raises(DeployError, match="unknown job 'budget'.*budget_pacing"):
        _upgrade("budget")


def _flink_run_command(monkeypatch, **kwargs) -> list[str]:
    seen = []

    def run(cmd, **_):
        seen.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, "Job has been submitted with JobID " + "e" * 32, "")
    monkeypatch.setattr(deploy.subprocess, "run", run)
    assert deploy.deploy("click_aggregator", jobmanager="jm:8081", conf_dir=Path("/conf"), **kwargs) == "e" * 32
    return seen[0]


def test_deploy_from_a_savepoint_runs_flink_with_it(monkeypatch):
    command = _flink_run_command(monkeypatch, savepoint=SAVEPOINT)
    assert command[command.index("-s") + 1] == SAVEPOINT
    assert command[command.index("--claimMode") + 1] == "claim"  # the state changelog restores only so
    assert "--allowNonRestoredState" not in command
    command = _flink_run_command(monkeypatch, savepoint=SAVEPOINT, restore=deploy.RestoreOptions(claim_mode="no_claim"))
    assert command[command.index("--claimMode") + 1] == "no_claim"
    command = _flink_run_command(monkeypatch, savepoint=SAVEPOINT,
                                 restore=deploy.RestoreOptions(allow_non_restored_state=True))
    assert "--allowNonRestoredState" in command
    assert command.index("--allowNonRestoredState") < command.index("-pym")


def test_a_fresh_deploy_starts_without_state(monkeypatch):
    command = _flink_run_command(monkeypatch)
    assert "-s" not in command and "--claimMode" not in command


def test_an_unknown_claim_mode_is_refused_before_flink_runs():
    with pytest.raises(DeployError, match="claim mode 'legacy'"):
        deploy.deploy("click_aggregator", jobmanager="jm:8081", conf_dir=Path("/conf"), savepoint=SAVEPOINT,
                      restore=deploy.RestoreOptions(claim_mode="legacy"))


def test_allow_non_restored_state_without_a_savepoint_is_refused():
    with pytest.raises(DeployError, match="only applies to a start from a savepoint"):
        deploy.deploy("click_aggregator", jobmanager="jm:8081", conf_dir=Path("/conf"),
                      restore=deploy.RestoreOptions(allow_non_restored_state=True))


def _command_line(*argv):
    from adserve import jobs_cli
    from adserve.cli import build_parser

    args = build_parser().parse_args(list(argv))
    jobs_cli._own_options_after_name(args, {"upgrade": jobs_cli._upgrade_options,
                                            "deploy": jobs_cli._deploy_options}[args.jobs_command])
    return args


def test_upgrade_takes_its_options_after_the_name_and_the_jobs_flags_after_the_dashes():
    args = _command_line("jobs", "upgrade", "budget_pacing", "--jobmanager", "jm:8081", "--allow-non-restored-state",
                         "--", "--curves", "gs://b/c.json", "--jobmanager", "kept-for-the-job")
    assert (args.name, args.jobmanager, args.allow_non_restored_state) == ("budget_pacing", "jm:8081", True)
    assert args.claim_mode == "claim"
    assert args.job_args == ["--curves", "gs://b/c.json", "--jobmanager", "kept-for-the-job"]


def test_deploy_from_a_savepoint_parses_before_or_after_the_name():
    after = _command_line("jobs", "deploy", "click_aggregator", "--from-savepoint", SAVEPOINT, "--", "--shards", "4")
    before = _command_line("jobs", "deploy", "--from-savepoint", SAVEPOINT, "click_aggregator", "--", "--shards", "4")
    for args in (after, before):
        assert (args.from_savepoint, args.allow_non_restored_state, args.job_args) == (SAVEPOINT, False,
                                                                                       ["--shards", "4"])


def test_deploy_passes_unknown_flags_before_the_dashes_to_the_job():
    args = _command_line("jobs", "deploy", "features", "--window-ms", "86400000", "--no-wait")
    assert (args.no_wait, args.job_args, args.from_savepoint) == (True, ["--window-ms", "86400000"], None)
