"""Where a process finds Kafka, the schema contracts, Redis, PostgreSQL, Flink and object storage: one typed,
frozen settings object per process, parsed from a settings document (the TOML file ADSERVE_SETTINGS_FILE
names) overlaid by ADSERVE_* environment variables.

Layers, each over the one before: the shared sections ([kafka], [schemas], [redis], [postgres], [flink],
[storage]); the process kind's own sections ([adserver.kafka], [jobs.redis], ...); then the environment
(ADSERVE_<SECTION>_<KEY>, e.g. ADSERVE_KAFKA_BOOTSTRAP, ADSERVE_REDIS_URL). A setting missing from all three
takes the local platform's value (ADSERVE_HOST and the ADSERVE_<PART>_PORT ports), so a checkout without a
settings file runs against `adserve up` exactly as before.

A secret (kafka.password, redis.password, postgres.dsn) is given inline or as a `<key>_file` naming a file
(a Kubernetes Secret mount); the loader (streams.endpoints) reads the file, this module only says which files
to read. Secrets are held as `Secret`, which prints as *** (core.settings.describe).

Every error names the setting as a user writes it, in the file and in the environment
(`kafka.security_protocol (ADSERVE_KAFKA_SECURITY_PROTOCOL)`). Pure: no file, socket or clock is touched."""
from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any, Mapping

from core.errors import InvalidSettings
from core.settings import MASK

PROCESS_KINDS = ("adserver", "tracker", "prediction", "advertiser_api", "dashboard", "jobs", "tools")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
REDIS_SCHEMES = ("redis", "rediss", "unix")
# The keys each section takes; a `*_file` key of SECRET_KEYS names a file holding that secret.
SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "kafka": ("bootstrap", "security_protocol", "sasl_mechanism", "username", "password", "ssl_ca_file",
              "ssl_check_hostname", "properties"),
    "schemas": ("contracts_dir",),
    "redis": ("url", "password", "ssl_ca_file", "sentinels", "sentinel_master", "cluster_nodes"),
    "postgres": ("dsn",),
    "flink": ("rest_url", "token", "username", "password", "ca_file", "timeout_s"),
    "storage": ("snapshots", "curves", "models", "savepoints", "checkpoints"),
}
SECRET_KEYS = {("kafka", "password"), ("redis", "password"), ("postgres", "dsn"), ("flink", "token"),
               ("flink", "password")}
_JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}
_SECRET_WORDS = ("password", "secret", "jaas", "token", ".key")
FLINK_KAFKA_SHADED = "org.apache.flink.kafka.shaded."
# Client properties set through their own keys: giving them under [kafka.properties] too would be ambiguous.
_OWN_PROPERTIES = ("bootstrap.servers", "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
                   "sasl.password", "sasl.jaas.config", "ssl.ca.location", "ssl.truststore.location",
                   "ssl.truststore.certificates", "ssl.truststore.type")


def env_name(section: str, key: str) -> str:
    """The environment variable that overrides `section.key`: ADSERVE_KAFKA_BOOTSTRAP."""
    return f"ADSERVE_{section.upper()}_{key.upper()}"


def setting_name(section: str, key: str) -> str:
    """A setting as errors name it, both ways a user can give it."""
    return f"{section}.{key} ({env_name(section, key)})"


class Secret:
    """A password or DSN: compared and used as its value, printed as *** wherever it goes (repr, str,
    describe). Not a dataclass, so nothing that walks dataclass fields (describe, asdict) can reach the value."""

    __slots__ = ("value", "source")

    def __init__(self, value: str = "", source: str = ""):
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "source", source)  # where it came from: "inline", "kafka.password_file=/etc/..."

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a Secret is immutable")

    def masked(self) -> str:
        return MASK if self.value else ""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)

    def __repr__(self) -> str:
        return f"Secret({self.masked()!r})"

    def __str__(self) -> str:
        return self.masked()


@dataclass(frozen=True)
class KafkaEndpoint:
    """The brokers and the client properties every Kafka client of a process uses: librdkafka in Python
    (`librdkafka_config`), the Java client in Flink's Kafka connector (`flink_options`)."""

    bootstrap: tuple[str, ...]
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = ""
    username: str = ""
    password: Secret = Secret("")
    ssl_ca_file: str = ""
    ssl_check_hostname: bool = True
    properties: tuple[tuple[str, str], ...] = ()  # further client properties, the same name in both clients

    def __post_init__(self) -> None:
        if not self.bootstrap or any(":" not in broker for broker in self.bootstrap):
            raise InvalidSettings(f"{setting_name('kafka', 'bootstrap')}: a list of host:port brokers, got "
                                  f"{','.join(self.bootstrap)!r}")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise InvalidSettings(f"{setting_name('kafka', 'security_protocol')}: one of "
                                  f"{', '.join(SECURITY_PROTOCOLS)}, got {self.security_protocol!r}")
        if self.sasl:
            if self.sasl_mechanism not in SASL_MECHANISMS:
                raise InvalidSettings(f"{setting_name('kafka', 'sasl_mechanism')}: {self.security_protocol} needs "
                                      f"one of {', '.join(SASL_MECHANISMS)}, got {self.sasl_mechanism!r}")
            if not self.username:
                raise InvalidSettings(f"{setting_name('kafka', 'username')}: {self.security_protocol} needs a "
                                      f"username")
            if not self.password.value:
                raise InvalidSettings(f"{setting_name('kafka', 'password')}: {self.security_protocol} needs a "
                                      f"password (or kafka.password_file / ADSERVE_KAFKA_PASSWORD_FILE naming a "
                                      f"file that holds it)")
        elif self.sasl_mechanism or self.username or self.password.value:
            raise InvalidSettings(f"{setting_name('kafka', 'security_protocol')}: a SASL username, password or "
                                  f"mechanism is set but the protocol is {self.security_protocol} (SASL_SSL or "
                                  f"SASL_PLAINTEXT uses them)")
        if self.ssl_ca_file and not self.tls:
            raise InvalidSettings(f"{setting_name('kafka', 'ssl_ca_file')}: a CA file is set but the protocol is "
                                  f"{self.security_protocol} (SSL or SASL_SSL uses it)")
        secret = sorted(name for name, _ in self.properties if any(word in name for word in _SECRET_WORDS))
        if secret:
            raise InvalidSettings(f"kafka.properties: {', '.join(secret)} would hold a secret in plain text (and "
                                  f"print it at start): SASL credentials go in kafka.username and "
                                  f"kafka.password_file")
        clashing = sorted(name for name, _ in self.properties if name in _OWN_PROPERTIES)
        if clashing:
            raise InvalidSettings(f"kafka.properties: {', '.join(clashing)} have settings of their own "
                                  f"(bootstrap, security_protocol, sasl_mechanism, username, password, "
                                  f"ssl_ca_file): set them there")

    @property
    def sasl(self) -> bool:
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(self.bootstrap)

    def librdkafka_config(self) -> dict[str, str]:
        """The security and extra properties for confluent-kafka (librdkafka names); bootstrap.servers apart."""
        config: dict[str, str] = {}
        if self.security_protocol != "PLAINTEXT":
            config["security.protocol"] = self.security_protocol
        if self.sasl:
            config |= {"sasl.mechanism": self.sasl_mechanism, "sasl.username": self.username,
                       "sasl.password": self.password.value}
        if self.ssl_ca_file:
            config["ssl.ca.location"] = self.ssl_ca_file
        if self.tls and not self.ssl_check_hostname:
            config["ssl.endpoint.identification.algorithm"] = "none"
        return config | dict(self.properties)

    def java_properties(self, ca_pem: str | None = None, shaded_prefix: str = "") -> dict[str, str]:
        """The same for the Java client. The CA travels inline as PEM (ssl.truststore.type=PEM,
        ssl.truststore.certificates) when `ca_pem` is given, so no TaskManager needs the file or a key store;
        else ssl.truststore.location names the file, which every TaskManager must have. `shaded_prefix`: where a
        jar relocated the client's classes (the SASL login module is named by class)."""
        props: dict[str, str] = {}
        if self.security_protocol != "PLAINTEXT":
            props["security.protocol"] = self.security_protocol
        if self.sasl:
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = (f"{shaded_prefix}{_JAAS_MODULES[self.sasl_mechanism]} required "
                                         f"username=\"{_jaas_quoted(self.username)}\" "
                                         f"password=\"{_jaas_quoted(self.password.value)}\";")
        if self.ssl_ca_file:
            props["ssl.truststore.type"] = "PEM"
            if ca_pem is not None:
                props["ssl.truststore.certificates"] = ca_pem
            else:
                props["ssl.truststore.location"] = self.ssl_ca_file
        if self.tls and not self.ssl_check_hostname:
            props["ssl.endpoint.identification.algorithm"] = ""
        return props | dict(self.properties)

    def flink_options(self, ca_pem: str | None = None) -> dict[str, str]:
        """java_properties as options of Flink's Kafka table connector (`properties.<name>`). The connector jar
        (flink-sql-connector-kafka) relocates the Kafka client under FLINK_KAFKA_SHADED, its login modules too."""
        return {f"properties.{name}": value
                for name, value in self.java_properties(ca_pem, FLINK_KAFKA_SHADED).items()}


def _jaas_quoted(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\"", "\\\"")


def _host_port(section: str, key: str, text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not (port.isascii() and port.isdigit() and len(port) <= 5):
        raise InvalidSettings(f"{setting_name(section, key)}: host:port addresses, got {text!r}")
    return host, int(port)


@dataclass(frozen=True)
class RedisEndpoint:
    """One Redis (url), a Sentinel-watched primary (sentinels + sentinel_master) or a Cluster (cluster_nodes).
    rediss:// in the url (or ssl_ca_file) means TLS; the password may also be in the url."""

    url: str
    password: Secret = Secret("")
    ssl_ca_file: str = ""
    sentinels: tuple[tuple[str, int], ...] = ()
    sentinel_master: str = ""
    cluster_nodes: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        scheme = self.url.partition("://")[0].lower()
        if "://" not in self.url or scheme not in REDIS_SCHEMES:
            raise InvalidSettings(f"{setting_name('redis', 'url')}: a redis://, rediss:// or unix:// URL, got "
                                  f"{_url_without_password(self.url)!r}")
        if self.sentinels and self.cluster_nodes:
            raise InvalidSettings(f"{setting_name('redis', 'sentinels')} and {setting_name('redis', 'cluster_nodes')}"
                                  f": a Redis is reached through Sentinel or as a Cluster, not both")
        if self.sentinels and not self.sentinel_master:
            raise InvalidSettings(f"{setting_name('redis', 'sentinel_master')}: Sentinel needs the name of the "
                                  f"primary it watches")
        if self.ssl_ca_file and not self.tls:
            raise InvalidSettings(f"{setting_name('redis', 'ssl_ca_file')}: a CA file goes with a rediss:// URL")

    @property
    def tls(self) -> bool:
        return self.url.lower().startswith("rediss://")

    @property
    def mode(self) -> str:
        return "sentinel" if self.sentinels else "cluster" if self.cluster_nodes else "single"


def _url_without_password(url: str) -> str:
    from core.settings import masked

    return masked("url", url)


@dataclass(frozen=True)
class PostgresEndpoint:
    """The campaign store: a libpq DSN (key=value or postgresql:// URL), usually from a secret file."""

    dsn: Secret

    def __post_init__(self) -> None:
        if not self.dsn.value.strip():
            raise InvalidSettings(f"{setting_name('postgres', 'dsn')}: empty (or postgres.dsn_file / "
                                  f"ADSERVE_POSTGRES_DSN_FILE naming a file that holds it)")


@dataclass(frozen=True)
class FlinkEndpoint:
    """The JobManager's REST API, which deploys, stops and upgrades jobs: its URL (https:// with `ca_file` when
    the cluster's certificate is not one the system trusts), a bearer `token` or a `username` and `password`
    for the proxy in front of it (Flink's REST API has no authentication of its own), and how long one call may
    take."""

    rest_url: str
    token: Secret = Secret("")
    username: str = ""
    password: Secret = Secret("")
    ca_file: str = ""
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not self.rest_url.startswith(("http://", "https://")):
            raise InvalidSettings(f"{setting_name('flink', 'rest_url')}: an http(s):// URL, got {self.rest_url!r}")
        if self.token.value and (self.username or self.password.value):
            raise InvalidSettings(f"{setting_name('flink', 'token')}: a bearer token or a username and password "
                                  f"({setting_name('flink', 'username')}), not both")
        if bool(self.username) != bool(self.password.value):
            raise InvalidSettings(f"{setting_name('flink', 'username')} and {setting_name('flink', 'password')}: "
                                  f"basic authentication needs both")
        if self.ca_file and not self.rest_url.startswith("https://"):
            raise InvalidSettings(f"{setting_name('flink', 'ca_file')}: only for an https:// "
                                  f"{setting_name('flink', 'rest_url')}, got {self.rest_url!r}")
        if not self.timeout_s > 0:
            raise InvalidSettings(f"{setting_name('flink', 'timeout_s')}: seconds above 0, got {self.timeout_s!r}")

    def authorization(self) -> str:
        """The Authorization header's value for a call, or "" without credentials."""
        if self.token.value:
            return f"Bearer {self.token.value}"
        if self.username:
            pair = base64.b64encode(f"{self.username}:{self.password.value}".encode()).decode()
            return f"Basic {pair}"
        return ""


@dataclass(frozen=True)
class StoragePaths:
    """Object-storage (gs://, s3://) or local folders of the index snapshots, budget curves, model bundles,
    savepoints and checkpoints; empty where a process does not use one."""

    snapshots: str = ""
    curves: str = ""
    models: str = ""
    savepoints: str = ""
    checkpoints: str = ""


@dataclass(frozen=True)
class SchemaContracts:
    """Where an environment publishes its Avro contracts (a folder of .avsc files): a process checks at start
    that they are the ones its code was built with (schemas/). Empty: no check."""

    contracts_dir: str = ""


@dataclass(frozen=True)
class Endpoints:
    """Every external endpoint of one process kind."""

    kind: str
    kafka: KafkaEndpoint
    redis: RedisEndpoint
    postgres: PostgresEndpoint
    flink: FlinkEndpoint
    storage: StoragePaths = StoragePaths()
    schemas: SchemaContracts = SchemaContracts()


def local_defaults(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The local platform's endpoints (`adserve up`), from ADSERVE_HOST and the ADSERVE_<PART>_PORT ports
    (infra.platform.settings.PlatformSettings holds the same defaults; a unit test keeps them equal)."""
    host = environ.get("ADSERVE_HOST", "127.0.0.1")
    port = lambda part, default: environ.get(f"ADSERVE_{part}_PORT", default)  # noqa: E731
    return {
        "kafka": {"bootstrap": f"{host}:{port('KAFKA', '19092')}"},
        "redis": {"url": f"redis://{host}:{port('REDIS', '16379')}/0"},
        "postgres": {"dsn": f"host={host} port={port('POSTGRES', '15432')} user=adserve dbname=adserve"},
        "flink": {"rest_url": f"http://{host}:{port('FLINK_REST', '18081')}"},
    }


def layered(document: Mapping[str, Any], kind: str, environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """Each section's keys after the layers: local defaults < [section] < [kind.section] < environment.
    Unknown sections or keys are errors (a typo must not fall back to a default silently)."""
    if kind not in PROCESS_KINDS:
        raise InvalidSettings(f"process kind {kind!r}: one of {', '.join(PROCESS_KINDS)}")
    for name, value in document.items():
        if name not in SECTION_KEYS and name not in PROCESS_KINDS:
            raise InvalidSettings(f"settings file: unknown section [{name}] (sections: "
                                  f"{', '.join([*SECTION_KEYS, *PROCESS_KINDS])})")
        if name in PROCESS_KINDS:
            if not isinstance(value, Mapping):
                raise InvalidSettings(f"settings file: [{name}] must be a table of sections")
            for inner, inner_value in value.items():
                _check_section(f"{name}.{inner}", inner, inner_value)
        else:
            _check_section(name, name, value)
    merged = {section: dict(values) for section, values in local_defaults(environ).items()}
    for section in SECTION_KEYS:
        merged.setdefault(section, {})
        merged[section].update(document.get(section, {}))
        merged[section].update(document.get(kind, {}).get(section, {}))
        for key in SECTION_KEYS[section]:
            for name in (key, f"{key}_file") if (section, key) in SECRET_KEYS else (key,):
                raw = environ.get(env_name(section, name))
                if raw is not None and raw.strip():
                    # The environment's value wins over the file's; an inline secret over a secret file.
                    merged[section].pop(key if name.endswith("_file") else f"{key}_file", None)
                    merged[section][name] = raw.strip()
    return merged


def _check_section(where: str, section: str, values: Any) -> None:
    if section not in SECTION_KEYS:
        raise InvalidSettings(f"settings file: unknown section [{where}] (sections: {', '.join(SECTION_KEYS)})")
    if not isinstance(values, Mapping):
        raise InvalidSettings(f"settings file: [{where}] must be a table")
    allowed = set(SECTION_KEYS[section]) | {f"{key}_file" for s, key in SECRET_KEYS if s == section}
    unknown = sorted(set(values) - allowed)
    if unknown:
        raise InvalidSettings(f"settings file: [{where}] has unknown keys {', '.join(unknown)} (keys: "
                              f"{', '.join(sorted(allowed))})")


def secret_files(merged: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(section, key) -> the file the loader must read for that secret."""
    return {(section, key): str(merged[section][f"{key}_file"]) for section, key in sorted(SECRET_KEYS)
            if merged.get(section, {}).get(f"{key}_file")}


def _flink(merged: Mapping[str, Mapping[str, Any]], secrets: Mapping[tuple[str, str], str]) -> FlinkEndpoint:
    f = merged["flink"]
    timeout = f.get("timeout_s", 10.0)
    try:
        timeout_s = float(timeout)
    except (TypeError, ValueError):
        raise InvalidSettings(f"{setting_name('flink', 'timeout_s')}: seconds, got {timeout!r}") from None
    return FlinkEndpoint(_text("flink", "rest_url", f["rest_url"]), token=_secret(merged, secrets, "flink", "token"),
                         username=_text("flink", "username", f.get("username", "")),
                         password=_secret(merged, secrets, "flink", "password"),
                         ca_file=_text("flink", "ca_file", f.get("ca_file", "")), timeout_s=timeout_s)


def _list(section: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(item.strip() for item in value.split(",") if item.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        return tuple(item.strip() for item in value if item.strip())
    raise InvalidSettings(f"{setting_name(section, key)}: a list of strings or one comma-separated string, got "
                          f"{value!r}")


def _text(section: str, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise InvalidSettings(f"{setting_name(section, key)}: a string, got {value!r}")
    return value.strip()


def _flag(section: str, key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        return value.strip().lower() in ("1", "true", "yes", "on")
    raise InvalidSettings(f"{setting_name(section, key)}: true or false, got {value!r}")


def _properties(value: Any) -> tuple[tuple[str, str], ...]:
    """[kafka.properties] as a table, or in the environment as 'name=value,name=value'."""
    if isinstance(value, str):
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise InvalidSettings(f"{setting_name('kafka', 'properties')}: name=value pairs separated by commas, "
                                  f"got {value!r}")
        return tuple((name.strip(), text.strip()) for name, text in pairs)
    if isinstance(value, Mapping):
        return tuple((str(name), str(text).lower() if isinstance(text, bool) else str(text))
                     for name, text in value.items())
    raise InvalidSettings(f"{setting_name('kafka', 'properties')}: a table of client properties, got {value!r}")


def _secret(merged: Mapping[str, Mapping[str, Any]], secrets: Mapping[tuple[str, str], str], section: str,
            key: str) -> Secret:
    if (section, key) in secrets:
        return Secret(secrets[(section, key)].strip(), f"{section}.{key}_file={merged[section][f'{key}_file']}")
    value = merged[section].get(key, "")
    return Secret(_text(section, key, value), "inline") if value else Secret("")


def parse(document: Mapping[str, Any], kind: str, environ: Mapping[str, str],
          secrets: Mapping[tuple[str, str], str] | None = None) -> Endpoints:
    """The endpoints of process kind `kind`: `document` is the parsed settings file ({} without one),
    `environ` the process's environment, `secrets` the contents of the files secret_files named."""
    merged = layered(document, kind, environ)
    secrets = secrets or {}
    missing = sorted(set(secret_files(merged)) - set(secrets))
    if missing:
        raise InvalidSettings(f"{setting_name(*missing[0])}: its _file was not read")
    k, r = merged["kafka"], merged["redis"]
    kafka = KafkaEndpoint(
        bootstrap=_list("kafka", "bootstrap", k["bootstrap"]),
        security_protocol=_text("kafka", "security_protocol", k.get("security_protocol", "PLAINTEXT")).upper(),
        sasl_mechanism=_text("kafka", "sasl_mechanism", k.get("sasl_mechanism", "")).upper(),
        username=_text("kafka", "username", k.get("username", "")),
        password=_secret(merged, secrets, "kafka", "password"),
        ssl_ca_file=_text("kafka", "ssl_ca_file", k.get("ssl_ca_file", "")),
        ssl_check_hostname=_flag("kafka", "ssl_check_hostname", k.get("ssl_check_hostname", True)),
        properties=_properties(k.get("properties", {})))
    redis = RedisEndpoint(
        url=_text("redis", "url", r["url"]), password=_secret(merged, secrets, "redis", "password"),
        ssl_ca_file=_text("redis", "ssl_ca_file", r.get("ssl_ca_file", "")),
        sentinels=tuple(_host_port("redis", "sentinels", a) for a in _list("redis", "sentinels",
                                                                            r.get("sentinels", []))),
        sentinel_master=_text("redis", "sentinel_master", r.get("sentinel_master", "")),
        cluster_nodes=tuple(_host_port("redis", "cluster_nodes", a) for a in _list("redis", "cluster_nodes",
                                                                                    r.get("cluster_nodes", []))))
    storage = StoragePaths(**{key: _text("storage", key, merged["storage"].get(key, ""))
                              for key in SECTION_KEYS["storage"]})
    return Endpoints(kind=kind, kafka=kafka, redis=redis,
                     postgres=PostgresEndpoint(_secret(merged, secrets, "postgres", "dsn")),
                     flink=_flink(merged, secrets),
                     storage=storage,
                     schemas=SchemaContracts(_text("schemas", "contracts_dir",
                                                   merged["schemas"].get("contracts_dir", ""))))
