"""`adserve jobs deploy|list|cancel`: the streaming jobs on a Flink session cluster, through jobs.deploy (the
local platform's cluster by default, any cluster with --jobmanager)."""
from __future__ import annotations

import argparse
import sys

from infra.platform import PlatformSettings


def register(sub) -> None:
    from jobs.deploy import JOBS

    jobs = sub.add_parser("jobs", help="deploy, list and cancel the streaming jobs on a Flink cluster",
                          description="The Flink jobs: " + "; ".join(f"{j.name}: {j.summary}" for j in JOBS.values()))
    jsub = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")

    p = jsub.add_parser("deploy", help="submit a job with `flink run` (detached)",
                        description="Submit a job to a Flink session cluster with `flink run`, as on any cluster. "
                                    "Defaults target the local platform; for your own cluster pass --jobmanager, "
                                    "--python and the job's flags after `--` (e.g. -- --bootstrap kafka:9092).")
    p.add_argument("name", choices=sorted(JOBS))
    p.add_argument("--jobmanager", help="REST address host:port of the cluster (default: the local platform's)")
    p.add_argument("--python", default=sys.executable,
                   help="Python interpreter on the TaskManagers with this project's requirements (default: this one)")
    p.add_argument("--no-wait", action="store_true", help="return once submitted, without waiting for RUNNING")
    p.add_argument("job_args", nargs=argparse.REMAINDER,
                   help="arguments for the job itself, after `--` (see python -m jobs.NAME --help)")
    p.set_defaults(handler=cmd_jobs_deploy)

    p = jsub.add_parser("list", help="show the jobs on the cluster and their state",
                        description="List the jobs of a Flink cluster over its REST API.")
    p.add_argument("--jobmanager", help="REST address host:port (default: the local platform's)")
    p.add_argument("--all", action="store_true", help="include finished, failed and cancelled jobs")
    p.set_defaults(handler=cmd_jobs_list)

    p = jsub.add_parser("cancel", help="stop a job (with a savepoint) by id or name",
                        description="Stop a running job gracefully with a savepoint (every running job of that name "
                                    "when a name is given); --hard cancels at once without one.")
    p.add_argument("job", help="a Flink job id, or a job name such as event_counts")
    p.add_argument("--hard", action="store_true",
                   help="cancel without a savepoint (can kill the TaskManager of a Python job in PyFlink 2.2)")
    p.add_argument("--jobmanager", help="REST address host:port (default: the local platform's)")
    p.set_defaults(handler=cmd_jobs_cancel)


def _rest_url(args: argparse.Namespace, settings: PlatformSettings) -> str:
    return f"http://{args.jobmanager}" if args.jobmanager else settings.flink_rest_url


def cmd_jobs_deploy(args: argparse.Namespace) -> int:
    from infra.platform.jars import flink_connector_jar
    from infra.platform.services import Flink, pyflink_home
    from jobs import deploy

    settings = PlatformSettings.from_env()
    job_args = [a for a in args.job_args if a != "--"]
    if "--bootstrap" not in job_args:
        job_args += ["--bootstrap", settings.kafka_bootstrap]
    if "--connector-jar" not in job_args:
        job_args += ["--connector-jar", str(flink_connector_jar(settings))]
    local_conf = Flink(settings).conf_dir
    conf_dir = local_conf if local_conf.exists() and not args.jobmanager else pyflink_home() / "conf"
    jobmanager = args.jobmanager or f"{settings.host}:{settings.flink_rest_port}"
    print(f"submitting {args.name} to {jobmanager} with `flink run` ...")
    job_id = deploy.deploy(args.name, jobmanager=jobmanager, conf_dir=conf_dir, job_args=job_args,
                           python=args.python)
    print(f"submitted {args.name}: job id {job_id}")
    if not args.no_wait:
        waited = deploy.wait_running(f"http://{jobmanager}", job_id)
        print(f"{args.name} is RUNNING ({waited:.1f} s after submission)")
    return 0


def cmd_jobs_list(args: argparse.Namespace) -> int:
    from jobs import deploy

    jobs = deploy.list_jobs(_rest_url(args, PlatformSettings.from_env()))
    shown = [j for j in jobs if args.all or j.state not in ("FINISHED", "CANCELED", "FAILED")]
    if not shown:
        print("no jobs" + ("" if args.all else " running (--all shows ended ones)"))
    for j in shown:
        print(f"{j.job_id}  {j.state:<10} {j.duration_ms / 1000:>9.1f} s  {j.name}")
    return 0


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    from jobs import deploy

    rest = _rest_url(args, PlatformSettings.from_env())
    targets = [j for j in deploy.list_jobs(rest)
               if (j.job_id == args.job or j.name == args.job) and j.state not in ("FINISHED", "CANCELED", "FAILED")]
    if not targets:
        print(f"no running job matches {args.job!r}", file=sys.stderr)
        return 1
    for j in targets:
        if args.hard:
            deploy.cancel(rest, j.job_id)
            print(f"cancelled {j.name} ({j.job_id})")
        else:
            location = deploy.stop(rest, j.job_id)
            print(f"stopped {j.name} ({j.job_id}); savepoint {location}")
    return 0
