"""The project's own JVM functions (jobs/jvm/**.java), compiled on first use into one jar.

They keep per-item work of high-volume jobs in the JVM (decoding budget.spend
for the budget job). The jar is built with the machine's `javac` against the
Flink jars that ship with PyFlink, cached by the sources' hash under the
platform's jar folder, and added to a job with `env.add_jars`; a cluster run
ships it the same way (`pipeline.jars`)."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent / "jvm"


class JvmBuildError(RuntimeError):
    """The project's Java functions could not be compiled (no JDK, or a compile error)."""


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.rglob("*.java"))


def _flink_lib() -> Path:
    import pyflink

    return Path(pyflink.__file__).resolve().parent / "lib"


def udf_jar(jars_dir: Path | None = None) -> Path:
    """Path of the compiled jar, building it if the sources changed since the last build."""
    if jars_dir is None:
        from infra.platform import PlatformSettings

        jars_dir = PlatformSettings.from_env().jars_dir
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in _sources())).hexdigest()[:16]
    target = Path(jars_dir) / "udf" / f"adserve-udf-{digest}.jar"
    if target.exists():
        return target
    javac, jar = shutil.which("javac"), shutil.which("jar")
    if not javac or not jar:
        raise JvmBuildError("javac and jar (a JDK, 11 or newer) are needed to build jobs/jvm; install one")
    target.parent.mkdir(parents=True, exist_ok=True)
    classpath = ":".join(str(p) for p in sorted(_flink_lib().glob("*.jar")))
    with tempfile.TemporaryDirectory() as classes:
        done = subprocess.run([javac, "--release", "11", "-cp", classpath, "-d", classes,
                               *map(str, _sources())], capture_output=True, text=True)
        if done.returncode != 0:
            raise JvmBuildError(f"javac failed:\n{done.stderr}")
        partial = target.with_suffix(".partial")
        subprocess.run([jar, "cf", str(partial), "-C", classes, "."], check=True, capture_output=True)
        partial.replace(target)
    return target
