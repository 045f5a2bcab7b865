"""Typed settings of the ad server and the tracker, built from flags and the environment, printed once at
start with secrets masked (core.settings.describe).

Both sign or verify impression and click tokens, so both need token keys: ADSERVE_TOKEN_KEYS as
'id1:secret1,id2:secret2' (the first signs, all verify, so keys rotate). A public development key exists only
in development mode (--dev or ADSERVE_DEV=1), which the simulators, the benchmarks and a developer's local
runs choose explicitly (tests pass their own keys); a server started without keys outside it refuses to start
(MissingTokenKeys).

Platform addresses come from the variables PlatformSettings.as_env exports (ADSERVE_KAFKA_BOOTSTRAP,
ADSERVE_HOST, ADSERVE_REDIS_PORT); this module holds no host or port of its own."""
from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from core.audiences import AudienceSalt, salt_from
from core.client_address import TRUSTED_PROXIES_ENV, parse_trusted_proxies
from core.errors import InvalidSettings
from core.settings import describe
from core.tokens import TokenKeys
from serving.spool import DEFAULT_FSYNC_INTERVAL_MS, DEFAULT_MAX_BYTES, SpoolSettings, default_spool_dir

if TYPE_CHECKING:
    from serving.adserver.app import ServerConfig

LOG = logging.getLogger("adserve.settings")
TOKEN_KEYS_ENV = "ADSERVE_TOKEN_KEYS"
DEV_MODE_ENV = "ADSERVE_DEV"
DEVELOPMENT_TOKEN_KEYS = "dev1:adserve-dev-token-key-change-me"  # public: only ever used in development mode
TOKEN_KEYS_HELP = (f"Token keys come from {TOKEN_KEYS_ENV} as 'id1:secret1,id2:secret2' (the first signs, all "
                   f"verify, so keys rotate; each at least 16 bytes). Without it the server refuses to start, "
                   f"unless development mode (--dev or {DEV_MODE_ENV}=1) lets it use a public development key.")
_TRUE = ("1", "true", "yes", "on")


class MissingTokenKeys(InvalidSettings):
    """A server that signs or verifies tokens was started without keys and outside development mode."""

    def __init__(self) -> None:
        super().__init__(f"no token keys: set {TOKEN_KEYS_ENV}='id1:secret1,id2:secret2' (each secret at least 16 "
                         f"bytes; the first signs), or run in development mode with --dev or {DEV_MODE_ENV}=1 "
                         f"(a public key: never for real traffic)")


def development_mode(environ: Mapping[str, str], flag: bool = False) -> bool:
    """Whether the process runs in development mode: the --dev flag or ADSERVE_DEV=1."""
    return flag or environ.get(DEV_MODE_ENV, "").strip().lower() in _TRUE


def token_keys_from(environ: Mapping[str, str], *, development: bool) -> TokenKeys:
    """The keys ADSERVE_TOKEN_KEYS names; the development key only in development mode; else MissingTokenKeys."""
    spec = environ.get(TOKEN_KEYS_ENV, "").strip()
    if spec:
        return TokenKeys.from_spec(spec)
    if not development:
        raise MissingTokenKeys()
    LOG.warning("%s is not set: development mode signs with the public development key", TOKEN_KEYS_ENV)
    return TokenKeys.from_spec(DEVELOPMENT_TOKEN_KEYS)


def add_development_argument(parser: argparse.ArgumentParser) -> None:
    """--dev: the flag form of ADSERVE_DEV=1."""
    parser.add_argument("--dev", action="store_true",
                        help=f"development mode: without {TOKEN_KEYS_ENV}, sign with a public development key "
                             f"(also {DEV_MODE_ENV}=1)")


def required(environ: Mapping[str, str], name: str) -> str:
    """A platform variable the process cannot run without (`adserve` exports them from PlatformSettings)."""
    value = environ.get(name, "").strip()
    if not value:
        raise InvalidSettings(f"{name} is not set: start the process through `adserve`, which sets it from the "
                              f"platform's settings, or set it yourself")
    return value


def _port(environ: Mapping[str, str], name: str) -> int:
    raw = required(environ, name)
    try:
        return int(raw)
    except ValueError:
        raise InvalidSettings(f"{name}={raw!r} is not a port number") from None


def _path(value: Any) -> Path | None:
    return Path(value) if value else None


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


class PlatformAddresses(Protocol):
    """Where a running platform's Kafka and Redis listen (infra's PlatformSettings has these)."""

    kafka_bootstrap: str
    host: str
    redis_port: int


@dataclass(frozen=True)
class AdServerSettings:
    """Everything `adserve serve ads` runs with."""

    kafka_bootstrap: str
    redis_host: str
    redis_port: int
    token_keys: TokenKeys = field(repr=False)
    development: bool = False
    host: str = "127.0.0.1"
    port: int = 8080
    server_id: str = "adserver-1"
    tracker_url: str = "http://127.0.0.1:8081"
    max_in_flight: int = 64
    geo_table: Path | None = None
    snapshot_dir: Path | None = None
    prediction_url: str | None = None
    model: Path | None = None
    ad_features: Path | None = None
    prerank_model: Path | None = None
    recall_share: float = 0.0
    prerank_weights: Path | None = None
    # ADSERVE_AUDIENCE_SALT (core.audiences); the public development salt in development mode; None: custom
    # audiences are not matched. Masked when printed.
    audience_salt: AudienceSalt | None = field(default=None, repr=False)
    # the operators' token for the debug endpoints (ADSERVE_OPS_TOKEN, serving.ops_auth); None: they are off
    ops_token: str | None = field(default=None, repr=False)
    # whose X-Forwarded-For names the caller (ADSERVE_TRUSTED_PROXIES): the address that locates a request
    trusted_proxies: tuple = ()

    def __post_init__(self) -> None:
        if self.prediction_url and self.model:
            raise InvalidSettings("--prediction-url and --model are two ways to score: choose one")
        if self.prerank_model and not self.prediction_url:
            raise InvalidSettings("--prerank-model goes with --prediction-url (with --model the student comes from "
                                  "that bundle)")
        if (self.prerank_model or self.model) and not self.ad_features:
            raise InvalidSettings("--model and --prerank-model need --ad-features (the snapshot folder they score "
                                  "against)")
        if not 0.0 <= self.recall_share <= 1.0:
            raise InvalidSettings(f"--recall-share must be in [0, 1], got {self.recall_share}")

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> "AdServerSettings":
        """Flags of `adserve serve ads` over the platform's variables; refuses to build without token keys."""
        development = development_mode(environ, getattr(args, "dev", False))
        flags = {name: getattr(args, name) for name in ("host", "port", "server_id", "tracker_url", "max_in_flight",
                                                         "prediction_url", "recall_share") if hasattr(args, name)}
        paths = {name: _path(getattr(args, name, None)) for name in ("geo_table", "snapshot_dir", "model",
                                                                      "ad_features", "prerank_model",
                                                                      "prerank_weights")}
        return cls(kafka_bootstrap=required(environ, "ADSERVE_KAFKA_BOOTSTRAP"),
                   redis_host=required(environ, "ADSERVE_HOST"), redis_port=_port(environ, "ADSERVE_REDIS_PORT"),
                   token_keys=token_keys_from(environ, development=development), development=development,
                   audience_salt=salt_from(environ, development=development), ops_token=_ops_token(environ),
                   trusted_proxies=parse_trusted_proxies(environ.get(TRUSTED_PROXIES_ENV)),
                   **flags, **paths)

    @classmethod
    def on_platform(cls, platform: PlatformAddresses, token_keys: TokenKeys, **fields: Any) -> "AdServerSettings":
        """A server run in process on a running platform (tests, benchmarks, simulators): the platform's Kafka
        and Redis, these token keys, and the other fields given (redis_port among them, to name another)."""
        addresses = {"kafka_bootstrap": platform.kafka_bootstrap, "redis_host": platform.host,
                     "redis_port": platform.redis_port}
        return cls(token_keys=token_keys, **{**addresses, **fields})

    def server_config(self) -> ServerConfig:
        from serving.adserver.app import ServerConfig  # the serving stack loads only when a server starts
        from serving.decision.engine import EngineConfig
        from serving.decision.prerank import load_weights

        weights = load_weights(self.prerank_weights) if self.prerank_weights else None
        return ServerConfig(server_id=self.server_id, tracker_url=self.tracker_url, max_in_flight=self.max_in_flight,
                            engine=EngineConfig(recall_sample_share=self.recall_share, prerank_weights=weights),
                            ops_token=self.ops_token, trusted_proxies=self.trusted_proxies)

    def describe(self) -> str:
        """The settings as one line, token secrets masked: printed once at start."""
        return describe(self)


@dataclass(frozen=True)
class TrackerSettings:
    """Everything `adserve serve tracker` runs with: its port and its spool (serving.spool: the folder, the bound
    in bytes past which beacons get 503, and how often it is fsynced)."""

    kafka_bootstrap: str
    token_keys: TokenKeys = field(repr=False)
    spool: SpoolSettings
    development: bool = False
    host: str = "127.0.0.1"
    port: int = 8081
    # the proxies whose X-Forwarded-For names the client (ADSERVE_TRUSTED_PROXIES, core.client_address)
    trusted_proxies: tuple = ()

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> "TrackerSettings":
        development = development_mode(environ, getattr(args, "dev", False))
        port = getattr(args, "port", 8081)
        folder = getattr(args, "spool_dir", None)
        spool = SpoolSettings(Path(folder) if folder else default_spool_dir(environ, port),
                              max_bytes=getattr(args, "spool_max_bytes", None) or DEFAULT_MAX_BYTES,
                              fsync_interval_ms=_or(getattr(args, "spool_fsync_ms", None), DEFAULT_FSYNC_INTERVAL_MS))
        return cls(kafka_bootstrap=required(environ, "ADSERVE_KAFKA_BOOTSTRAP"),
                   token_keys=token_keys_from(environ, development=development), spool=spool,
                   development=development, port=port,
                   trusted_proxies=parse_trusted_proxies(environ.get(TRUSTED_PROXIES_ENV)))

    def describe(self) -> str:
        return describe(self)


def _ops_token(environ: Mapping[str, str]) -> str | None:
    from serving.ops_auth import ops_token_from

    return ops_token_from(environ)
