"""The project's own JVM functions (jobs/jvm/**.java), compiled on first use into one jar.

They keep per-item work of high-volume jobs in the JVM (decoding budget.spend
for the budget job). The jar is built with the machine's `javac` against the
Flink jars that ship with PyFlink, cached by the sources' hash under the
platform's jar folder (jobs.flink_io.jars_dir: ADSERVE_HOME), and added to a job with `env.add_jars`; a cluster run
ships it the same way (`pipeline.jars`). `run_golden_driver` runs the operators' own
methods on golden inputs for the unit tests (jobs/jvm/test; never in the jar)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

from core.errors import AdserveError
from jobs.flink_io import jars_dir as default_jars_dir

SOURCE_DIR = Path(__file__).resolve().parent / "jvm"
TEST_SOURCE_DIR = SOURCE_DIR / "test"  # the golden driver: compiled for the unit tests, never in the jar


class JvmBuildError(AdserveError, RuntimeError):
    """The project's Java functions could not be compiled (no JDK, or a compile error)."""


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.rglob("*.java") if TEST_SOURCE_DIR not in p.parents)


def _flink_classpath() -> str:
    return ":".join(str(p) for p in sorted(_flink_lib().glob("*.jar")))


def _javac(sources: list[Path], classpath: str, classes: str) -> None:
    javac = shutil.which("javac")
    if not javac:
        raise JvmBuildError("javac (a JDK, 11 or newer) is needed to build jobs/jvm; install one")
    done = subprocess.run([javac, "--release", "11", "-cp", classpath, "-d", classes, *map(str, sources)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise JvmBuildError(f"javac failed:\n{done.stderr}")


def _flink_lib() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent / "lib"


def udf_jar(jars_dir: Path | None = None) -> Path:
    """Path of the compiled jar, building it if the sources changed since the last build."""
    if jars_dir is None:
        jars_dir = default_jars_dir()
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _sources())).hexdigest()[:16]
    target = Path(jars_dir) / "udf" / f"adserve-udf-{digest}.jar"
    if target.exists():
        return target
    jar = shutil.which("jar")
    if not jar:
        raise JvmBuildError("jar (a JDK, 11 or newer) is needed to build jobs/jvm; install one")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as classes:
        _javac(_sources(), _flink_classpath(), classes)
        partial = target.with_suffix(".partial")
        subprocess.run([jar, "cf", str(partial), "-C", classes, "."], check=True, capture_output=True)
        partial.replace(target)
    return target


def golden_driver_classpath(jars_dir: Path | None = None) -> str:
    """The classpath of the golden driver (jobs/jvm/test) and the operators it runs, compiled against the
    udf jar if the test sources changed since the last build."""
    jar = udf_jar(jars_dir)
    tests = sorted(TEST_SOURCE_DIR.rglob("*.java"))
    digest = hashlib.sha256(jar.name.encode() + b"".join(p.read_bytes() for p in tests)).hexdigest()[:16]
    classes = jar.parent / f"golden-driver-{digest}"
    classpath = f"{classes}:{jar}:{_flink_classpath()}"
    if not classes.is_dir():
        building = Path(tempfile.mkdtemp(dir=jar.parent, prefix=".golden-driver-"))
        try:
            _javac(tests, f"{jar}:{_flink_classpath()}", str(building))
            building.replace(classes)
        except OSError:
            if not classes.is_dir():  # not a concurrent build that finished first
                raise
        finally:
            shutil.rmtree(building, ignore_errors=True)
    return classpath


def run_golden_driver(commands: Iterable[str], jars_dir: Path | None = None) -> list[Any]:
    """The golden driver's JSON answer to each command (one a line; see GoldenDriver.java for the commands)."""
    java = shutil.which("java")
    if not java:
        raise JvmBuildError("java (a JDK, 11 or newer) is needed to run jobs/jvm's golden driver; install one")
    commands = list(commands)
    done = subprocess.run([java, "-cp", golden_driver_classpath(jars_dir), "io.adserve.flink.GoldenDriver"],
                          input="\n".join(commands) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        raise JvmBuildError(f"the golden driver failed:\n{done.stderr}")
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    if len(answers) != len(commands):
        raise JvmBuildError(f"the golden driver answered {len(answers)} of {len(commands)} commands")
    return answers
