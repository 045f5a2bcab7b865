"""The project's own Kafka Connect plugin (infra/connect/**.java): the OversizedToDeadLetter transformation
the Debezium connector runs (see infra/platform/cdc.py).

It is compiled with the JDK's javac against the Kafka jars the platform fetched and packed into
<jars>/connect-plugins/adserve-connect/, a folder on Kafka Connect's plugin.path, before the Connect worker
starts. The jar's name carries a digest of its sources, so a changed source is rebuilt and an unchanged one
is not. A production Kafka Connect takes the same jar in a folder on its plugin.path: `adserve fetch` builds it
and prints its path."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from infra.platform.errors import PlatformError
from infra.platform.jars import DEBEZIUM, KAFKA
from infra.platform.settings import REPO_ROOT, PlatformSettings

SOURCE_DIR = REPO_ROOT / "infra" / "connect"
TRANSFORM = "io.adserve.connect.OversizedToDeadLetter"


def _sources() -> list[Path]:
    return sorted(SOURCE_DIR.rglob("*.java"))


def plugin_folder(settings: PlatformSettings) -> Path:
    """Beside Debezium's folder, so the worker's plugin.path (their parent) finds both."""
    return DEBEZIUM.folder(settings).parent / "adserve-connect"


def plugin_jar(settings: PlatformSettings) -> Path:
    """The plugin jar for the current sources, built now if it is missing."""
    sources = _sources()
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()[:16]
    folder = plugin_folder(settings)
    jar = folder / f"adserve-connect-{digest}.jar"
    if jar.is_file():
        return jar
    javac = shutil.which("javac")
    if not javac:
        raise PlatformError("javac (a JDK, 11 or newer) is needed to build the project's Kafka Connect plugin; "
                            "run `bash infra/bootstrap.sh`, which installs one")
    kafka_libs = KAFKA.folder(settings)
    if not kafka_libs.is_dir():
        raise PlatformError(f"the Kafka jars are missing under {kafka_libs}: run `adserve platform fetch` first")
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".adserve-connect-") as building:
        done = subprocess.run([javac, "--release", "11", "-cp", str(kafka_libs / "*"), "-d", building,
                               *map(str, sources)], capture_output=True, text=True)
        if done.returncode != 0:
            raise PlatformError(f"javac failed on the Kafka Connect plugin:\n{done.stderr[-2000:]}")
        partial = Path(building) / jar.name
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(Path(building).rglob("*.class")):
                out.write(cls, cls.relative_to(building).as_posix())
        for old in folder.glob("adserve-connect-*.jar"):
            old.unlink()
        partial.replace(jar)
    return jar
