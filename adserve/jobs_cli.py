"""`adserve jobs deploy|upgrade|list|cancel`: the streaming jobs on a Flink session cluster, through jobs.deploy.

The cluster is the settings' `flink.rest_url` (ADSERVE_FLINK_REST_URL, or [flink] of the settings file; the local
platform's by default), called with its credentials (flink.token, or flink.username and flink.password: the
proxy in front of the REST API), its CA file (flink.ca_file, for https://) and flink.timeout_s a call;
--jobmanager host:port names another cluster (plain http, no credentials)."""
from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlparse

from infra.platform import PlatformSettings


def register(sub) -> None:
    from jobs.deploy import JOBS

    jobs = sub.add_parser("jobs", help="deploy, upgrade, list and cancel the streaming jobs on a Flink cluster",
                          description="The Flink jobs: " + "; ".join(f"{j.name}: {j.summary}" for j in JOBS.values()))
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    p = jsub.add_parser("deploy", help="submit a job with `flink run` (detached)",
                        description="Submit a job to a Flink session cluster with `flink run`, as on any cluster. "
                                    "The cluster is the settings' flink.rest_url (ADSERVE_FLINK_REST_URL; the local "
                                    "platform's by default) or --jobmanager; for your own cluster pass --python "
                                    "and the job's flags after `--` (e.g. -- --bootstrap kafka:9092).")
    p.add_argument("name", choices=sorted(JOBS))
    _deploy_options(p)
    p.add_argument("job_args", nargs=argparse.REMAINDER,
                   help="arguments for the job itself, after `--` (see python -m jobs.NAME --help)")
    p.set_defaults(handler=cmd_jobs_deploy)

    p = jsub.add_parser("upgrade", help="stop a running job with a savepoint and start this code from it",
                        description="Stop the running job NAME with a savepoint (stop-with-savepoint: sinks "
                                    "commit, nothing is lost) and submit this checkout's code of it from that "
                                    "savepoint. If the savepoint fails the old job keeps running. Give the job's "
                                    "flags after `--` as for deploy.")
    p.add_argument("name", choices=sorted(JOBS))
    _upgrade_options(p)
    p.add_argument("job_args", nargs=argparse.REMAINDER,
                   help="arguments for the job itself, after `--` (see python -m jobs.NAME --help)")
    p.set_defaults(handler=cmd_jobs_upgrade)

    p = jsub.add_parser("list", help="show the jobs on the cluster and their state",
                        description="List the jobs of a Flink cluster over its REST API.")
    p.add_argument("--jobmanager", help="REST address host:port (default: the settings' flink.rest_url)")
    p.add_argument("--all", action="store_true", help="include finished, failed and cancelled jobs")
    p.set_defaults(handler=cmd_jobs_list)

    p = jsub.add_parser("cancel", help="stop a job (with a savepoint) by id or name",
                        description="Stop a running job gracefully with a savepoint (every running job of that name "
                                    "when a name is given); --hard cancels at once without one.")
    p.add_argument("job", help="a Flink job id, or a job name such as event_counts")
    p.add_argument("--hard", action="store_true",
                   help="cancel without a savepoint (can kill the TaskManager of a Python job in PyFlink 2.2)")
    p.add_argument("--jobmanager", help="REST address host:port (default: the settings' flink.rest_url)")
    _stop_timeout(p)
    p.set_defaults(handler=cmd_jobs_cancel)


def _rest(args: argparse.Namespace):
    """The cluster's REST API: --jobmanager's, else the settings' flink section (jobs.deploy.FlinkRest)."""
    from jobs.deploy import FlinkRest
    from streams.endpoints import load

    if args.jobmanager:
        return FlinkRest(f"http://{args.jobmanager}")
    return FlinkRest.of(load("tools").flink)


def _address(rest) -> str:
    """host:port of a REST URL (what `flink run -m` takes)."""
    parsed = urlparse(rest.url)
    return f"{parsed.hostname}:{parsed.port or (443 if parsed.scheme == 'https' else 80)}"


def _stop_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument("--stop-timeout-s", type=float, default=120.0,
                   help="how long the savepoint of a stop may take before the command gives up (default 120; "
                        "a job with large state needs more)")


def _submit_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobmanager", help="REST address host:port of the cluster (default: the settings' "
                                        "flink.rest_url)")
    p.add_argument("--python", default=sys.executable,
                   help="Python interpreter on the TaskManagers with this project's requirements (default: this one)")
    p.add_argument("--allow-non-restored-state", action="store_true",
                   help="start even if the savepoint holds state of an operator the new code no longer has "
                        "(that state is dropped); without it Flink refuses the start")
    p.add_argument("--claim-mode", choices=("claim", "no_claim"), default="claim",
                   help="claim (default): the new job owns the savepoint and deletes it once a newer checkpoint "
                        "subsumes it (a job on the state changelog, like click_aggregator, restores only so); "
                        "no_claim: the savepoint stays as it is, for another start")


def _deploy_options(p: argparse.ArgumentParser) -> None:
    _submit_options(p)
    p.add_argument("--no-wait", action="store_true", help="return once submitted, without waiting for RUNNING")
    p.add_argument("--from-savepoint", metavar="PATH",
                   help="start from this savepoint (or retained checkpoint): the path `jobs upgrade` or "
                        "`jobs cancel` printed")


def _upgrade_options(p: argparse.ArgumentParser) -> None:
    _submit_options(p)
    p.add_argument("--savepoint-dir", help="where the savepoint goes (default: the cluster's "
                                           "execution.checkpointing.savepoint-dir)")
    _stop_timeout(p)


def _own_options_after_name(args: argparse.Namespace, options) -> None:
    """The command's own options written after NAME (argparse leaves everything after a positional to the job):
    taken from the arguments before the first `--`; the rest stays the job's."""
    remainder = list(args.job_args)
    cut = remainder.index("--") if "--" in remainder else len(remainder)
    own = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    options(own)
    parsed, unknown = own.parse_known_args(remainder[:cut])
    for name, value in vars(parsed).items():
        if value != own.get_default(name):
            setattr(args, name, value)
    args.job_args = unknown + remainder[cut + 1:]


def _submission(args: argparse.Namespace) -> tuple[str, object, list[str]]:
    """The JobManager address, the Flink configuration folder and the job's flags of a submission: the local
    platform's unless --jobmanager and the job's own flags say otherwise."""
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink, pyflink_home

    settings = PlatformSettings.from_env()
    job_args = list(args.job_args)
    settings_file = os.environ.get("ADSERVE_SETTINGS_FILE", "")
    if settings_file and "--settings-file" not in job_args:  # the job's driver does not see this environment
        job_args += ["--settings-file", settings_file]
    if "--bootstrap" not in job_args and "--settings-file" not in job_args:
        job_args += ["--bootstrap", settings.kafka_bootstrap]
    if "--connector-jar" not in job_args:
        job_args += ["--connector-jar", str(flink_connector_jar(settings))]
    jobmanager = args.jobmanager or _address(_rest(args))
    local_conf = Flink(settings).conf_dir
    is_local = jobmanager == f"{settings.host}:{settings.flink_rest_port}"
    conf_dir = local_conf if local_conf.exists() and is_local else pyflink_home() / "conf"
    return jobmanager, conf_dir, job_args


def cmd_jobs_deploy(args: argparse.Namespace) -> int:
    from jobs import deploy

    _own_options_after_name(args, _deploy_options)
    jobmanager, conf_dir, job_args = _submission(args)
    source = f" from savepoint {args.from_savepoint}" if args.from_savepoint else ""
    print(f"submitting {args.name} to {jobmanager} with `flink run`{source} ...")
    job_id = deploy.deploy(args.name, jobmanager=jobmanager, conf_dir=conf_dir, job_args=job_args,
                           python=args.python, savepoint=args.from_savepoint,
                           restore=deploy.RestoreOptions(args.allow_non_restored_state, args.claim_mode))
    print(f"submitted {args.name}: job id {job_id}")
    if not args.no_wait:
        waited = deploy.wait_running(_rest(args), job_id)
        print(f"{args.name} is RUNNING ({waited:.1f} s after submission)")
    return 0


def cmd_jobs_upgrade(args: argparse.Namespace) -> int:
    from jobs import deploy

    _own_options_after_name(args, _upgrade_options)
    jobmanager, conf_dir, job_args = _submission(args)
    rest = _rest(args)
    print(f"upgrading {args.name} on {rest}: stop with a savepoint, then `flink run -s` ...")
    done = deploy.upgrade(args.name, rest_url=rest, jobmanager=jobmanager, conf_dir=conf_dir, job_args=job_args,
                          python=args.python,
                          restore=deploy.RestoreOptions(args.allow_non_restored_state, args.claim_mode),
                          savepoint_stop=deploy.SavepointStop(args.savepoint_dir, args.stop_timeout_s))
    print(f"stopped {args.name} ({done.stopped_job_id}); savepoint {done.savepoint}")
    print(f"submitted {args.name} from the savepoint: job id {done.job_id}")
    waited = deploy.wait_running(rest, done.job_id)
    print(f"{args.name} is RUNNING ({waited:.1f} s after submission)")
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from jobs import deploy

    jobs = deploy.list_jobs(_rest(args))
    shown = [j for j in jobs if args.all or j.state not in ("FINISHED", "CANCELED", "FAILED")]
    if not shown:
        print("no jobs" + ("" if args.all else " running (--all shows ended ones)"))
    for j in shown:
        print(f"{j.job_id}  {j.state:<10} {j.duration_ms / 1000:>9.1f} s  {j.name}")
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from jobs import deploy

    rest = _rest(args)
    targets = [j for j in deploy.list_jobs(rest)
               if (j.job_id == args.job or j.name == args.job) and j.state not in deploy.ENDED_STATES]
    if not targets:
        print(f"no running job matches {args.job!r}", file=sys.stderr)
        return 1
    for j in targets:
        if args.hard:
            deploy.cancel(rest, j.job_id)
            print(f"cancelled {j.name} ({j.job_id})")
        else:
            location = deploy.stop(rest, j.job_id, args.stop_timeout_s)
            print(f"stopped {j.name} ({j.job_id}); savepoint {location}")
    return 0
