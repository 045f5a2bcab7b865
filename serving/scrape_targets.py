"""A server's announcement to Prometheus: one file per running server in the folder that
ADSERVE_SCRAPE_TARGETS_DIR names, in Prometheus' file-based discovery format, written once the server has
bound its port and removed when it stops. Prometheus (infra/platform/prometheus.py) reads `<kind>-*.json`
of that folder for each kind (adserver, tracker, prediction, dashboard, advertiser), so servers on any port are scraped
without a restart. Without the variable nothing is written: a server outside the platform is not
announced.

A file holds only the address and the kind; it never carries per-campaign or per-request labels."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping

from core.errors import InvalidSettings

TARGETS_DIR_ENV = "ADSERVE_SCRAPE_TARGETS_DIR"
KINDS = ("adserver", "tracker", "prediction", "dashboard", "advertiser")
WILDCARD_HOSTS = ("", "0.0.0.0", "::")  # a server bound to every interface is scraped on loopback


def target_document(kind: str, host: str, port: int) -> list[dict[str, Any]]:
    """The file_sd document of one server: its host:port, labelled with its kind."""
    if kind not in KINDS:
        raise InvalidSettings(f"scrape target kind {kind!r} is not one of {', '.join(KINDS)}")
    address = "127.0.0.1" if host in WILDCARD_HOSTS else host
    return [{"targets": [f"{address}:{port}"], "labels": {"kind": kind}}]


def target_file_name(kind: str, port: int, pid: int) -> str:
    """`<kind>-<port>-<pid>.json`: unique per live server on one machine, and matched by `<kind>-*.json`."""
    return f"{kind}-{port}-{pid}.json"


class ScrapeTarget:
    """One server's target file: `publish` after the port is bound, `withdraw` (or the aiohttp cleanup hook
    `on_cleanup`) when it stops. A no-op when no folder is named."""

    def __init__(self, kind: str, directory: Path | None):
        target_document(kind, "127.0.0.1", 0)  # an unknown kind fails at start, not at publish
        self.kind, self.directory = kind, directory
        self.path: Path | None = None

    @classmethod
    def from_env(cls, kind: str, environ: Mapping[str, str] = os.environ) -> "ScrapeTarget":
        folder = environ.get(TARGETS_DIR_ENV)
        return cls(kind, Path(folder) if folder else None)

    def publish(self, host: str, port: int) -> Path | None:
        """Write the file (atomically: Prometheus never reads half of it); its path, or None without a folder."""
        if self.directory is None:
            return None
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / target_file_name(self.kind, port, os.getpid())
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(target_document(self.kind, host, port)))
        partial.replace(path)
        self.path = path
        return path

    def withdraw(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None

    async def on_cleanup(self, app: Any) -> None:
        """aiohttp's on_cleanup signal: the runner's cleanup withdraws the target."""
        self.withdraw()


def announce(app: Any, kind: str) -> ScrapeTarget:
    """A ScrapeTarget (folder from the environment) withdrawn by `app`'s cleanup; call before the runner's
    setup (the signal list freezes there) and `publish` once the port is bound."""
    target = ScrapeTarget.from_env(kind)
    app.on_cleanup.append(target.on_cleanup)
    return target


def remove_stale(directory: Path) -> list[Path]:
    """Delete the files of servers that no longer run (killed before they could withdraw): by the pid in the
    name. Returns what was deleted."""
    removed = []
    for path in sorted(directory.glob("*-*-*.json")) if directory.is_dir() else []:
        pid = path.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
