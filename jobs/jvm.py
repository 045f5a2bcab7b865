"""The project's own JVM functions (jobs/jvm/io/**.java) as one prebuilt jar, and the golden driver of their
unit tests.

They keep per-item work of high-volume jobs in the JVM (decoding budget.spend
for the budget job). Maven builds the jar from jobs/jvm/pom.xml against the
Flink 2.2 jars PyFlink ships (provided, never bundled) into
jobs/jvm/target/adserve-udf-0.1.0.jar: `mvn -q -f jobs/jvm/pom.xml package`,
which infra/bootstrap.sh runs. A job adds that jar with `env.add_jars`; a
cluster run ships it the same way (`pipeline.jars`). Nothing is compiled on
the submitting host. `run_golden_driver` runs the operators' own methods on
golden inputs for the unit tests (jobs/jvm/test; compiled for the tests only,
never in the jar)."""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

from core.errors import AdserveError

SOURCE_DIR = Path(__file__).resolve().parent / "jvm"
TEST_SOURCE_DIR = SOURCE_DIR / "test"  # the golden driver: compiled for the unit tests, never in the jar
POM = SOURCE_DIR / "pom.xml"
UDF_JAR = SOURCE_DIR / "target" / "adserve-udf-0.1.0.jar"  # the pom's artifactId-version
BUILD_COMMAND = "mvn -q -f jobs/jvm/pom.xml package"


class JvmBuildError(AdserveError, RuntimeError):
    """The project's Java functions are not built (or are older than their sources), or the golden driver
    could not be compiled or run."""


def _sources() -> list[Path]:
    return sorted(p for p in SOURCE_DIR.rglob("*.java")
                  if TEST_SOURCE_DIR not in p.parents and SOURCE_DIR / "target" not in p.parents)


def _flink_classpath() -> str:
    return ":".join(str(p) for p in sorted(_flink_lib().glob("*.jar")))


def _javac(sources: list[Path], classpath: str, classes: str) -> None:
    javac = shutil.which("javac")
    if not javac:
        raise JvmBuildError("javac (a JDK, 11 or newer) is needed to compile the golden driver of the unit tests")
    done = subprocess.run([javac, "--release", "11", "-cp", classpath, "-d", classes, *map(str, sources)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise JvmBuildError(f"javac failed:\n{done.stderr}")


def _flink_lib() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent / "lib"


def udf_jar(jar: Path = UDF_JAR) -> Path:
    """The prebuilt jar of jobs/jvm. Raises JvmBuildError naming the build command when it is missing or older
    than a source (a job must not ship operators that differ from the code beside it)."""
    if not jar.is_file():
        raise JvmBuildError(f"the UDF jar {jar} is missing: build it with `{BUILD_COMMAND}` "
                            f"(infra/bootstrap.sh runs it)")
    built_at = jar.stat().st_mtime
    stale = [p.relative_to(SOURCE_DIR) for p in [POM, *_sources()] if p.stat().st_mtime > built_at]
    if stale:
        raise JvmBuildError(f"the UDF jar {jar} is older than {', '.join(map(str, stale[:3]))}: "
                            f"rebuild it with `{BUILD_COMMAND}`")
    return jar


def golden_driver_classpath(jar: Path = UDF_JAR) -> str:
    """The classpath of the golden driver (jobs/jvm/test) and the operators it runs, compiled (test only)
    against the prebuilt UDF jar if the test sources or the jar changed since the last build."""
    jar = udf_jar(jar)
    tests = sorted(TEST_SOURCE_DIR.rglob("*.java"))
    digest = hashlib.sha256(jar.read_bytes() + b"".join(p.read_bytes() for p in tests)).hexdigest()[:16]
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


def run_golden_driver(commands: Iterable[str], jar: Path = UDF_JAR) -> list[Any]:
    """The golden driver's JSON answer to each command (one a line; see GoldenDriver.java for the commands)."""
    java = shutil.which("java")
    if not java:
        raise JvmBuildError("java (a JDK, 11 or newer) is needed to run jobs/jvm's golden driver; install one")
    commands = list(commands)
    done = subprocess.run([java, "-cp", golden_driver_classpath(jar), "io.adserve.flink.GoldenDriver"],
                          input="\n".join(commands) + "\n", capture_output=True, text=True)
    if done.returncode != 0:
        raise JvmBuildError(f"the golden driver failed:\n{done.stderr}")
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    if len(answers) != len(commands):
        raise JvmBuildError(f"the golden driver answered {len(answers)} of {len(commands)} commands")
    return answers
