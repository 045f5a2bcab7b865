"""The platform's stores: Redis and PostgreSQL (with logical replication for the change stream). Each listens
on the settings' loopback host only and keeps its data under the platform's state folder. PostgreSQL refuses to
run as root, so as root it runs as the `postgres` system user that Debian's package creates."""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

from infra.platform.errors import PlatformError
from infra.platform.service_base import Service


class Redis(Service):
    name = "redis"

    @property
    def ports(self) -> list[int]:
        return [self.settings.redis_port]

    def address(self) -> str:
        return self.settings.redis_url

    def launch(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise PlatformError("redis-server is not installed: run `apt-get install -y redis-server` "
                                "(bash infra/bootstrap.sh does it)")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.process().start([
            binary, "--bind", self.settings.host, "--port", str(self.settings.redis_port),
            "--dir", str(self.data_dir), "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--protected-mode", "yes", "--logfile", "",
        ])

    def healthy(self) -> bool:
        import redis

        client = redis.Redis(host=self.settings.host, port=self.settings.redis_port,
                             socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()


def _postgres_bin(tool: str) -> str:
    found = shutil.which(tool)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{tool}"))
    if not candidates:
        raise PlatformError(f"PostgreSQL ({tool}) is not installed: run `apt-get install -y postgresql` "
                            "(bash infra/bootstrap.sh does it)")
    return candidates[-1]


def _traversable_by(user: str, folder: Path) -> bool:
    """True when `user` may enter every folder from / down to `folder`."""
    import grp
    import pwd

    account = pwd.getpwnam(user)
    groups = {g.gr_gid for g in grp.getgrall() if user in g.gr_mem} | {account.pw_gid}
    for part in [folder, *folder.parents]:
        st = part.stat()
        if st.st_uid == account.pw_uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid in groups:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return False
    return True


class Postgres(Service):
    name = "postgres"

    @property
    def ports(self) -> list[int]:
        return [self.settings.postgres_port]

    def address(self) -> str:
        return f"postgresql://adserve@{self.settings.host}:{self.settings.postgres_port}/adserve (wal_level=logical)"

    @property
    def run_as(self) -> str | None:
        return "postgres" if os.geteuid() == 0 else None

    def _own(self, path: Path) -> None:
        if self.run_as:
            shutil.chown(path, self.run_as, self.run_as)

    def _place_data_dir(self) -> None:
        """Make state/postgres reachable by the postgres user.

        As root, PostgreSQL runs as `postgres`, which cannot enter a private
        folder such as /root or a 0700 temp dir. Then the data lives in a
        folder of its own under /var/tmp and state/postgres links to it."""
        if self.data_dir.exists() or not self.run_as:
            return
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        if _traversable_by(self.run_as, self.data_dir.parent):
            return
        digest = hashlib.sha1(str(self.settings.home).encode()).hexdigest()[:12]
        outside = Path("/var/tmp") / f"adserve-postgres-{digest}"
        outside.mkdir(parents=True, exist_ok=True)
        self.data_dir.symlink_to(outside, target_is_directory=True)

    def launch(self) -> None:
        self._place_data_dir()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        root = self.data_dir.resolve()  # postgres must not walk through a private folder
        pgdata = root / "data"
        sockets = root / "sockets"
        sockets.mkdir(exist_ok=True)
        self._own(root)
        self._own(sockets)
        if not (pgdata / "PG_VERSION").exists():
            shutil.rmtree(pgdata, ignore_errors=True)
            done = subprocess.run(
                [_postgres_bin("initdb"), "-D", str(pgdata), "-U", "adserve", "--auth=trust",
                 "-E", "UTF8", "--locale=C.UTF-8"],
                capture_output=True, text=True, timeout=120,
                user=self.run_as, group=self.run_as, extra_groups=[] if self.run_as else None)
            if done.returncode != 0:
                raise PlatformError(f"initdb failed: {done.stderr[-1500:]}")
        self.process().start([
            _postgres_bin("postgres"), "-D", str(pgdata),
            "-c", f"listen_addresses={self.settings.host}", "-c", f"port={self.settings.postgres_port}",
            "-c", f"unix_socket_directories={sockets}", "-c", "wal_level=logical",
            "-c", "max_wal_senders=8", "-c", "max_replication_slots=8", "-c", "fsync=off",
        ], user=self.run_as)

    def healthy(self) -> bool:
        import psycopg

        with psycopg.connect(host=self.settings.host, port=self.settings.postgres_port, user="adserve",
                             dbname="postgres", connect_timeout=2, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = 'adserve'").fetchone()
            if not exists:
                conn.execute("CREATE DATABASE adserve")
            wal = conn.execute("SHOW wal_level").fetchone()
        if wal is None or wal[0] != "logical":
            raise PlatformError(f"PostgreSQL runs with wal_level={wal}, Debezium needs logical")
        return True
