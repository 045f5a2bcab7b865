"""Where the jars a job ships come from: a flag, or the ones `adserve up` fetched under the platform's home.
Never a path baked into job code."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

from core.errors import AdserveError

REPO_ROOT = Path(__file__).resolve().parents[2]
# The folder under jars_dir and the file name prefix of each jar `adserve up` fetches (infra/platform/jars.py
# fetches them there; tests/unit/test_job_settings.py holds the two to the same layout).
FETCHED_JARS = {"kafka": ("flink", "flink-sql-connector-kafka-"), "avro": ("flink-formats", "flink-sql-avro-")}


class MissingJar(AdserveError):
    """A jar a job needs was neither passed as a flag nor fetched by `adserve up`."""


def platform_home(environ: Mapping[str, str] = os.environ) -> Path:
    """The platform's folder: ADSERVE_HOME (as PlatformSettings.as_env exports it), else the checkout's."""
    return Path(environ.get("ADSERVE_HOME") or REPO_ROOT / ".platform").resolve()


def jars_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """Where `adserve up` keeps the jars it fetched and the project's compiled JVM functions."""
    return platform_home(environ) / "jars"


def fetched_jar(kind: str, environ: Mapping[str, str] = os.environ) -> str:
    """The newest fetched jar of `kind` (a FETCHED_JARS key) under jars_dir; raises MissingJar if none."""
    folder, prefix = FETCHED_JARS[kind]
    found = sorted((jars_dir(environ) / folder).glob(f"{prefix}*.jar"))
    if not found:
        raise MissingJar(f"no {prefix}*.jar under {jars_dir(environ) / folder}: run `adserve up` (which fetches "
                         f"it) or pass the jar's path as a flag")
    return str(found[-1])


def project_functions(settings: object = None) -> list[Path]:
    """The jar of the project's JVM functions (jobs.jvm.udf_jar): a Job's extra_jars."""
    from jobs.jvm import udf_jar

    return [Path(udf_jar())]
