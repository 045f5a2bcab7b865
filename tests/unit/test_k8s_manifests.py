"""The Kubernetes manifests (deploy/k8s) and the container definitions (deploy/docker) hold to the schemas they
claim and to the commands, images and routes of this project.

Each overlay (and the base) is rendered with kustomize, as `kubectl apply -k` renders it. Every built-in object is
validated strictly (unknown fields are errors) against Kubernetes' own API schema of K8S_VERSION; every
FlinkDeployment against the openAPIV3Schema of the Flink Kubernetes Operator's CRD of the release docs/deploy.md
installs (OPERATOR_CRD, a fixture: its source and licence are in its folder's README), with unknown fields refused
as the API server's strict field validation refuses them. Then what no schema says: every job of jobs.deploy.JOBS runs as a
FlinkDeployment that upgrades through a savepoint, every server's command parses with `adserve`'s own parser,
its readinessProbe is /ready (every server's; 503 while it drains) and its grace period covers its drain,
every image named is built by a Dockerfile here, and the settings file parses for every process kind.

Each check returns the problems it finds; the negative cases break one rendered manifest each and expect the
check that guards it to name the problem."""
from __future__ import annotations

import copy
import dataclasses
import functools
import gzip
import hashlib
import importlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any, Callable

import jsonschema
import kubernetes_validate
import pytest
import yaml

from adserve.cli import build_parser
from core.errors import AdserveError
from core.endpoints import PROCESS_KINDS, layered, parse, secret_files
from infra.platform import PlatformSettings
from jobs.deploy import JOBS
from jobs.common.settings import KafkaJobSettings

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "deploy" / "k8s"
DOCKER_DIR = REPO_ROOT / "deploy" / "docker"
DEPLOY_DOC = REPO_ROOT / "docs" / "deploy.md"
ENVIRONMENTS = ("base", "overlays/dev", "overlays/staging", "overlays/production")
K8S_VERSION = "1.32.0"  # a version kubernetes-validate ships strict schemas for
OBJECT_STORAGE = ("s3://", "gs://")
PYTHON_DRIVER = "org.apache.flink.client.python.PythonDriver"
SECRETS_DIR = "/etc/adserve/secrets/"
FLINK_VERSION = importlib.metadata.version("apache-flink")
IMAGE_FLINK_VERSION = "v" + "_".join(FLINK_VERSION.split(".")[:2])  # the operator's name of it: v2_2
# The FlinkDeployment CRD of the operator release docs/deploy.md installs (Apache-2.0; see the folder's README).
OPERATOR_CRD = REPO_ROOT / "tests" / "fixtures" / "flink-kubernetes-operator-1.15.0" / \
    "flinkdeployments.flink.apache.org-v1.yml.gz"
# The module whose aiohttp app each `adserve serve` command runs: a readinessProbe must be one of its GET routes.
WORKLOAD_KINDS = ("Deployment", "StatefulSet")

Docs = list[dict[str, Any]]


# rendering ----------------------------------------------------------------------------------------------------------

def kustomize_command() -> list[str]:
    """kustomize as infra/bootstrap.sh installs it (the platform's bin folder), else one on PATH, else kubectl's."""
    home = Path(os.environ.get("ADSERVE_HOME") or REPO_ROOT / ".platform")
    for candidate in (home / "bin" / "kustomize", shutil.which("kustomize")):
        if candidate and os.access(candidate, os.X_OK):
            return [str(candidate), "build"]
    if shutil.which("kubectl"):
        return ["kubectl", "kustomize"]
    pytest.fail("kustomize is not installed: run `bash infra/bootstrap.sh` (it builds it into .platform/bin)")


@functools.cache
def _rendered(environment: str) -> str:
    done = subprocess.run([*kustomize_command(), str(K8S_DIR / environment)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"kustomize build {environment} failed:\n{done.stderr}"
    return done.stdout


def rendered(environment: str) -> Docs:
    """The objects `kubectl apply -k deploy/k8s/<environment>` would apply (a fresh copy each call)."""
    return [doc for doc in yaml.safe_load_all(_rendered(environment)) if doc]


def of_kind(docs: Docs, *kinds: str) -> Docs:
    return [doc for doc in docs if doc["kind"] in kinds]


def name_of(doc: dict[str, Any]) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


# schemas ------------------------------------------------------------------------------------------------------------

@functools.cache
def operator_crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the operator CRD's openAPIV3Schema, strict: no field the CRD does not name."""
    crd = yaml.safe_load(gzip.decompress(OPERATOR_CRD.read_bytes()))
    schemas = {}
    for version in crd["spec"]["versions"]:
        api_version = f"{crd['spec']['group']}/{version['name']}"
        kind = crd["spec"]["names"]["kind"]
        schema = strict(version["schema"]["openAPIV3Schema"])
        # The fields every object has, which the API server checks itself and a CRD does not list.
        schema["properties"] = {"apiVersion": {"const": api_version}, "kind": {"const": kind},
                                "metadata": {"type": "object"}, **schema["properties"]}
        schemas[(api_version, kind)] = schema
    return schemas


def operator_flink_versions() -> list[str]:
    """The values of spec.flinkVersion the operator's CRD lists."""
    schema = operator_crd_schemas()[("flink.apache.org/v1beta1", "FlinkDeployment")]
    return list(schema["properties"]["spec"]["properties"]["flinkVersion"]["enum"])


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused wherever the CRD lists an object's fields and does not say it keeps
    unknown ones (x-kubernetes-preserve-unknown-fields), as the API server's strict field validation does."""
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: strict(value) for key, value in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def schema_problems(docs: Docs) -> list[str]:
    """Each object against its schema: the operator's CRDs for flink.apache.org, Kubernetes' for the rest."""
    problems = []
    crds = operator_crd_schemas()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if doc["apiVersion"].startswith("flink.apache.org/"):
            if key not in crds:
                problems.append(f"{name_of(doc)}: the operator has no CRD for {key}")
                continue
            for error in jsonschema.Draft7Validator(crds[key]).iter_errors(doc):
                problems.append(f"{name_of(doc)}: {'.'.join(map(str, error.absolute_path))}: {error.message}")
            continue
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{name_of(doc)}: {'.'.join(map(str, exc.path))}: {exc.message}")
        except kubernetes_validate.SchemaNotFoundError:
            problems.append(f"{name_of(doc)}: Kubernetes {K8S_VERSION} has no schema for {key}")
    return problems


# jobs ---------------------------------------------------------------------------------------------------------------

@functools.cache
def job_flags() -> frozenset[str]:
    """Every --flag a job's parser declares: each job's parser() (the flags its settings declare as options
    included), and any add_argument("--flag") in jobs/**.py."""
    found = set()
    for path in (REPO_ROOT / "jobs").rglob("*.py"):
        found.update(re.findall(r"add_argument\(\s*f?\"(--[a-z0-9-]+)\"", path.read_text()))
    for spec in JOBS.values():
        main = importlib.import_module(spec.module if spec.module.endswith(".main") else f"{spec.module}.main")
        found.update(flag for flag in main.parser()._option_string_actions if flag.startswith("--"))
    return frozenset(found)


def job_problems(docs: Docs) -> list[str]:
    """Every job of JOBS: one FlinkDeployment in application mode through the PythonDriver with the job's module,
    upgraded through a savepoint, its state, checkpoints and savepoints on object storage, metrics to Prometheus."""
    problems = []
    deployments = of_kind(docs, "FlinkDeployment")
    by_job: dict[str, list[dict[str, Any]]] = {}
    for doc in deployments:
        by_job.setdefault(doc["metadata"].get("labels", {}).get("adserve.io/job", ""), []).append(doc)
    for unknown in sorted(set(by_job) - set(JOBS)):
        problems.append(f"FlinkDeployment(s) {[name_of(d) for d in by_job[unknown]]}: adserve.io/job {unknown!r} is "
                        f"no job of jobs.deploy.JOBS")
    for name, spec in JOBS.items():
        found = by_job.get(name, [])
        if len(found) != 1:
            problems.append(f"job {name}: {len(found)} FlinkDeployments labelled adserve.io/job={name}, want 1")
            continue
        doc = found[0]
        job, config = doc["spec"].get("job", {}), doc["spec"].get("flinkConfiguration", {})
        where = f"{name_of(doc)} (job {name})"
        if job.get("upgradeMode") != "savepoint":
            problems.append(f"{where}: upgradeMode {job.get('upgradeMode')!r}, want 'savepoint' (the job's state "
                            f"must survive an upgrade)")
        if job.get("entryClass") != PYTHON_DRIVER:
            problems.append(f"{where}: entryClass {job.get('entryClass')!r}, want {PYTHON_DRIVER}")
        want_jar = f"local:///opt/flink/opt/flink-python-{FLINK_VERSION}.jar"
        if job.get("jarURI") != want_jar:
            problems.append(f"{where}: jarURI {job.get('jarURI')!r}, want {want_jar} (the image's PythonDriver)")
        args = [str(a) for a in job.get("args", [])]
        if _value_after(args, "-pym") != spec.module:
            problems.append(f"{where}: args {args} do not run -pym {spec.module}")
        if str(job.get("parallelism")) != (_value_after(args, "--parallelism") or "1"):
            problems.append(f"{where}: spec.job.parallelism {job.get('parallelism')} is not the job's --parallelism "
                            f"(the job sets its own)")
        for flag in (a.split("=", 1)[0] for a in args if a.startswith("--")):
            if flag not in job_flags():
                problems.append(f"{where}: {flag} is no flag of any job")
        for key in ("execution.checkpointing.dir", "execution.checkpointing.savepoint-dir",
                    "high-availability.storageDir"):
            if not str(config.get(key, "")).startswith(OBJECT_STORAGE):
                problems.append(f"{where}: {key} {config.get(key)!r} is not on object storage {OBJECT_STORAGE}")
        if not config.get("state.backend.type"):
            problems.append(f"{where}: no state.backend.type")
        if not str(config.get("metrics.reporter.prom.factory.class", "")).endswith("PrometheusReporterFactory"):
            problems.append(f"{where}: no Prometheus reporter (metrics.reporter.prom.factory.class)")
        if doc["spec"].get("flinkVersion") != IMAGE_FLINK_VERSION:
            problems.append(f"{where}: flinkVersion {doc['spec'].get('flinkVersion')!r}, want {IMAGE_FLINK_VERSION} "
                            f"(the image's Flink {FLINK_VERSION}: the operator writes that version's config file)")
        if _value_after(args, "--restart-strategy") != "exponential-delay":
            problems.append(f"{where}: args {args} lack --restart-strategy exponential-delay (a job on a cluster "
                            f"restarts without limit)")
        if str(config.get("kubernetes.operator.job.restart.failed")).lower() != "true":
            problems.append(f"{where}: kubernetes.operator.job.restart.failed is not true (the operator redeploys "
                            f"a job that ends FAILED)")
        if _state_changelog(spec.module, args[args.index(spec.module) + 1:] if spec.module in args else []):
            problems += _changelog_problems(where, config)
    return problems


def _state_changelog(module: str, job_args: list[str]) -> bool:
    """Whether the job checkpoints through the changelog state backend with these arguments (its own parser's
    --state-changelog, default included); False for arguments it refuses (the flag check names those)."""
    main = importlib.import_module(module if module.endswith(".main") else f"{module}.main")
    try:
        if hasattr(main, "parser"):
            return bool(main.parser().parse_args(job_args).state_changelog)
        settings = main.parse_settings(job_args)
    except SystemExit:
        return False
    return any(getattr(settings, f.name).state_changelog for f in dataclasses.fields(settings)
               if isinstance(getattr(settings, f.name), KafkaJobSettings))


def _changelog_problems(where: str, config: dict[str, Any]) -> list[str]:
    """A changelog job needs the changelog's storage on object storage, and restores that claim the snapshot."""
    problems = []
    if config.get("state.changelog.storage") != "filesystem":
        problems.append(f"{where}: state.changelog.storage {config.get('state.changelog.storage')!r}, want "
                        f"'filesystem' (the job runs with the changelog state backend)")
    if not str(config.get("state.changelog.dstl.dfs.base-path", "")).startswith(OBJECT_STORAGE):
        problems.append(f"{where}: state.changelog.dstl.dfs.base-path "
                        f"{config.get('state.changelog.dstl.dfs.base-path')!r} is not on object storage")
    if config.get("execution.state-recovery.claim-mode") != "CLAIM":
        problems.append(f"{where}: execution.state-recovery.claim-mode "
                        f"{config.get('execution.state-recovery.claim-mode')!r}, want CLAIM (the changelog "
                        f"restores only a snapshot the job owns)")
    return problems


# The keys of adserve-secrets a Flink pod may see: the Kafka and Redis credentials of the jobs' settings.
FLINK_SECRET_KEYS = frozenset({"kafka-password", "kafka-ca.pem", "redis-password", "redis-ca.pem"})


def flink_pod_problems(docs: Docs) -> list[str]:
    """Every FlinkDeployment's pods see only FLINK_SECRET_KEYS of adserve-secrets (listed as items), every Kafka or
    Redis secret the settings give the jobs is among them, and the pods share the servers' fsGroup, so what a job
    writes to the shared volume the servers read."""
    problems = []
    server_groups = {d["spec"]["template"]["spec"].get("securityContext", {}).get("fsGroup")
                     for d in of_kind(docs, *WORKLOAD_KINDS)} - {None}
    settings = [tomllib.loads(d["data"]["settings.toml"]) for d in of_kind(docs, "ConfigMap")
                if "settings.toml" in d.get("data", {})]
    named = set()
    for document in settings:
        merged = layered(document, "jobs", {})
        for section in ("kafka", "redis"):
            for key in ("password_file", "ssl_ca_file"):
                path = str(merged[section].get(key, ""))
                if path.startswith(SECRETS_DIR):
                    named.add(path.removeprefix(SECRETS_DIR))
    for key in sorted(named - FLINK_SECRET_KEYS):
        problems.append(f"settings.toml gives the jobs secret {key!r}, which no Flink pod mounts")
    for doc in of_kind(docs, "FlinkDeployment"):
        pod = doc["spec"].get("podTemplate", {}).get("spec", {})
        for volume in pod.get("volumes", []):
            secret = volume.get("secret", {})
            if secret.get("secretName") != "adserve-secrets":
                continue
            items = {item["key"] for item in secret.get("items", [])}
            if not items:
                problems.append(f"{name_of(doc)}: mounts every key of adserve-secrets (list the Kafka and Redis "
                                f"ones as items)")
            for key in sorted(items - FLINK_SECRET_KEYS):
                problems.append(f"{name_of(doc)}: mounts secret {key!r}, which no job needs")
        group = pod.get("securityContext", {}).get("fsGroup")
        if server_groups and group not in server_groups:
            problems.append(f"{name_of(doc)}: fsGroup {group!r}, not the servers' {sorted(server_groups)} (the "
                            f"shared volume)")
    return problems


def _value_after(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args and args.index(flag) + 1 < len(args) else None


# servers ------------------------------------------------------------------------------------------------------------

def server_problems(docs: Docs) -> list[str]:
    """Every workload on the servers' image: its command parses with `adserve`'s parser, it listens on all
    addresses on its container port, its readinessProbe is /ready (which turns 503 while it drains), it
    has a grace period (the ad server's covers --drain-delay-s plus --grace-s), a process kind, and the ad server's
    CPU is a whole number of cores, requested as limited, equal to --workers where given."""
    problems = []
    parser = build_parser()
    workloads = [d for d in of_kind(docs, *WORKLOAD_KINDS)
                 if any(_image_name(c["image"]) == "adserve" for c in d["spec"]["template"]["spec"]["containers"])]
    served = set()
    for doc in workloads:
        pod = doc["spec"]["template"]["spec"]
        for container in pod["containers"]:
            where = f"{name_of(doc)} container {container['name']}"
            args = [str(a) for a in container.get("command", [])[1:] + container.get("args", [])]
            try:
                parsed = parser.parse_args(args)
            except SystemExit:
                problems.append(f"{where}: `adserve {' '.join(args)}` does not parse")
                continue
            if parsed.command != "serve":
                problems.append(f"{where}: runs `adserve {parsed.command}`, not a server")
                continue
            served.add(parsed.service)
            if getattr(parsed, "host", None) != "0.0.0.0":
                problems.append(f"{where}: listens on {getattr(parsed, 'host', None)!r}: a Service cannot reach it "
                                f"(--host 0.0.0.0)")
            ports = {p["containerPort"] for p in container.get("ports", [])}
            if parsed.port not in ports:
                problems.append(f"{where}: --port {parsed.port} is not a containerPort {sorted(ports)}")
            readiness = container.get("readinessProbe", {}).get("httpGet", {})
            path = readiness.get("path")
            want = {"/ready"}  # every server answers it (serving.drain) and turns it 503 while it drains
            if path not in want:
                problems.append(f"{where}: readinessProbe httpGet path {path!r} is not one of {sorted(want)}")
            grace = pod.get("terminationGracePeriodSeconds")
            if not isinstance(grace, int) or grace < 10:
                problems.append(f"{where}: terminationGracePeriodSeconds {grace!r}: a server needs time to drain")
            kind = {e["name"]: e.get("value") for e in container.get("env", [])}.get("ADSERVE_PROCESS_KIND")
            if kind not in PROCESS_KINDS:
                problems.append(f"{where}: ADSERVE_PROCESS_KIND {kind!r} is not one of {PROCESS_KINDS}")
            if parsed.service in ("ads", "adserver"):
                problems += _ad_server_problems(where, parsed, container, grace)
                problems += _snapshot_problems(where, parsed, pod, parser)
    for service in ("ads", "tracker", "prediction", "advertiser-api", "dashboard"):
        if service not in served and not (service == "ads" and "adserver" in served):
            problems.append(f"no workload runs `adserve serve {service}`")
    return problems


def _snapshot_problems(where: str, parsed, pod: dict[str, Any], parser) -> list[str]:
    """The ad server's workers share one index only when it boots from a snapshot: an init container cuts one into
    the folder --snapshot-dir names, on a volume both mount there."""
    folder = parsed.snapshot_dir
    if not folder:
        return [f"{where}: no --snapshot-dir: each worker would build an index of its own"]
    mounted = {m["mountPath"]: m["name"] for m in pod["containers"][0].get("volumeMounts", [])}
    for init in pod.get("initContainers", []):
        try:
            cut = parser.parse_args([str(a) for a in init.get("args", [])])
        except SystemExit:
            return [f"{where}: init container {init['name']}: `adserve {' '.join(init.get('args', []))}` does not "
                    f"parse"]
        init_mounts = {m["mountPath"]: m["name"] for m in init.get("volumeMounts", [])}
        if (cut.command, getattr(cut, "action", None)) == ("snapshots", "write") \
                and cut.dir == folder and folder in mounted and init_mounts.get(folder) == mounted[folder]:
            return []
    return [f"{where}: no init container writes a snapshot into --snapshot-dir {folder} on a volume the server "
            f"mounts there"]


def _ad_server_problems(where: str, parsed, container: dict[str, Any], grace: Any) -> list[str]:
    problems = []
    if not parsed.reuse_port:
        problems.append(f"{where}: the ad server's workers share the pod's port with --reuse-port behind a Service")
    if isinstance(grace, int) and grace <= parsed.drain_delay_s + parsed.grace_s:
        problems.append(f"{where}: terminationGracePeriodSeconds {grace} does not cover --drain-delay-s "
                        f"{parsed.drain_delay_s} + --grace-s {parsed.grace_s}")
    resources = container.get("resources", {})
    request, limit = resources.get("requests", {}).get("cpu"), resources.get("limits", {}).get("cpu")
    if limit is None or not re.fullmatch(r"[1-9][0-9]*", str(limit)) or str(request) != str(limit):
        problems.append(f"{where}: CPU request {request!r} and limit {limit!r}: one worker per core needs a whole "
                        f"number of cores, requested as limited")
    elif parsed.workers is not None and parsed.workers != int(limit):
        problems.append(f"{where}: --workers {parsed.workers} is not the CPU limit {limit}")
    return problems


# the shared folder -------------------------------------------------------------------------------------------------

def _claims_mounted(pod: dict[str, Any]) -> dict[str, str]:
    """mountPath -> claimName of the persistent volume claims the pod's first container mounts."""
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", [])
              if "persistentVolumeClaim" in v}
    return {m["mountPath"]: claims[m["name"]] for m in pod["containers"][0].get("volumeMounts", [])
            if m["name"] in claims}


SNAPSHOT_READERS = (("Deployment", "prediction"), ("Deployment", "adserver"))


def shared_folder_problems(docs: Docs) -> list[str]:
    """The model registry names ad-feature snapshots by the path the features job wrote them to: that folder must
    be on a claim the prediction service and the ad servers mount at the same path."""
    features = [d for d in of_kind(docs, "FlinkDeployment")
                if d["metadata"].get("labels", {}).get("adserve.io/job") == "features"]
    if len(features) != 1:
        return [f"{len(features)} features FlinkDeployments, want 1"]
    folder = _value_after([str(a) for a in features[0]["spec"]["job"].get("args", [])], "--snapshot-dir")
    if not folder:
        return [f"{name_of(features[0])}: no --snapshot-dir: its snapshots would stay on one pod's disk"]
    mounted = _claims_mounted(features[0]["spec"].get("podTemplate", {}).get("spec", {"containers": [{}]}))
    at = [path for path in mounted if folder == path or folder.startswith(path.rstrip("/") + "/")]
    if not at:
        return [f"{name_of(features[0])}: --snapshot-dir {folder} is on no persistent volume claim of its pods"]
    path, claim = at[0], mounted[at[0]]
    problems = []
    for kind, name in SNAPSHOT_READERS:
        found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
        if not found or _claims_mounted(found[0]["spec"]["template"]["spec"]).get(path) != claim:
            problems.append(f"{kind}/{name}: does not mount claim {claim} at {path}, where the features job writes "
                            f"the snapshots the registry names")
    return problems


# images -------------------------------------------------------------------------------------------------------------

def _image_name(image: str) -> str:
    """registry.example.com/adserve-flink:0.1.0 -> adserve-flink"""
    return image.rsplit("/", 1)[-1].split("@")[0].split(":")[0]


@functools.cache
def dockerfile_images() -> dict[str, Path]:
    """Image name -> its Dockerfile, from each Dockerfile's build line (`docker build -f ... -t REGISTRY/NAME:TAG`)."""
    images = {}
    for path in sorted(DOCKER_DIR.glob("*.Dockerfile")):
        for name in re.findall(r"docker build -f deploy/docker/" + re.escape(path.name) + r" -t REGISTRY/([a-z0-9-]+):",
                               path.read_text()):
            images[name] = path
    return images


def image_problems(docs: Docs) -> list[str]:
    problems = []
    for doc in docs:
        images = [doc["spec"]["image"]] if doc["kind"] == "FlinkDeployment" else [
            c["image"] for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])]
        for image in images:
            if _image_name(image) not in dockerfile_images():
                problems.append(f"{name_of(doc)}: image {image} is built by no Dockerfile under deploy/docker "
                                f"(images: {sorted(dockerfile_images())})")
    return problems


# settings and secrets -----------------------------------------------------------------------------------------------

@functools.cache
def documented_secret_keys() -> frozenset[str]:
    """The keys docs/deploy.md's `kubectl -n NAMESPACE create secret generic adserve-secrets` command sets."""
    text = DEPLOY_DOC.read_text()
    commands = re.findall(r"create secret generic adserve-secrets(?:[^\n]*\\\n)*[^\n]*", text)
    return frozenset(re.findall(r"--from-(?:file|literal)=([a-z0-9.-]+)=", " ".join(commands)))


def settings_problems(docs: Docs) -> list[str]:
    """The settings file of the ConfigMap parses for every process kind (core.endpoints), and every secret it or a
    container names is a key of adserve-secrets that docs/deploy.md says how to create."""
    problems = []
    documents = [(name_of(d), d["data"]["settings.toml"]) for d in of_kind(docs, "ConfigMap")
                 if "settings.toml" in d.get("data", {})]
    if len(documents) != 1:
        problems.append(f"{len(documents)} ConfigMaps hold settings.toml, want 1")
    wanted_keys: dict[str, str] = {}
    for where, text in documents:
        try:
            document = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{where}: settings.toml is not TOML: {exc}")
            continue
        for kind in PROCESS_KINDS:
            try:
                files = secret_files(layered(document, kind, {}))
                parse(document, kind, {}, {key: "a-secret" for key in files})
            except AdserveError as exc:
                problems.append(f"{where}: settings.toml for {kind}: {exc}")
                break
        for path in re.findall(r"\"(" + re.escape(SECRETS_DIR) + r"[^\"]+)\"", text):
            wanted_keys[path.removeprefix(SECRETS_DIR)] = f"{where} settings.toml"
    for doc in docs:
        for ref in _secret_key_refs(doc):
            if ref.get("name") == "adserve-secrets":
                wanted_keys[ref["key"]] = name_of(doc)
    for key, where in sorted(wanted_keys.items()):
        if key not in documented_secret_keys():
            problems.append(f"{where}: secret key {key!r} is not created by docs/deploy.md's `kubectl create "
                            f"secret generic adserve-secrets` (it sets {sorted(documented_secret_keys())})")
    return problems


def _secret_key_refs(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [ref for item in node for ref in _secret_key_refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["secretKeyRef"]] if "secretKeyRef" in node else []
    return own + [ref for value in node.values() for ref in _secret_key_refs(value)]


# What the bootstrap Job runs, in order: (command, action) of each container, init containers first.
BOOTSTRAP_STEPS = [("advertisers", "migrate"), ("topics", "create"), ("cdc", "register")]


def bootstrap_problems(docs: Docs) -> list[str]:
    """One Job runs the campaign store's migrations, the topics and the CDC connector in that order, each command
    parsing with `adserve`'s parser, with the settings file and a process kind."""
    parser = build_parser()
    jobs = of_kind(docs, "Job")
    if len(jobs) != 1:
        return [f"{len(jobs)} Jobs, want 1 (the bootstrap: {BOOTSTRAP_STEPS})"]
    pod = jobs[0]["spec"]["template"]["spec"]
    problems, steps = [], []
    for container in pod.get("initContainers", []) + pod["containers"]:
        where = f"{name_of(jobs[0])} container {container['name']}"
        args = [str(a) for a in container.get("args", [])]
        try:
            parsed = parser.parse_args(args)
        except SystemExit:
            problems.append(f"{where}: `adserve {' '.join(args)}` does not parse")
            continue
        steps.append((parsed.command, getattr(parsed, "action", None)))
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        if env.get("ADSERVE_PROCESS_KIND") not in PROCESS_KINDS or not env.get("ADSERVE_SETTINGS_FILE"):
            problems.append(f"{where}: needs ADSERVE_SETTINGS_FILE and an ADSERVE_PROCESS_KIND")
    if not problems and steps != BOOTSTRAP_STEPS:
        problems.append(f"{name_of(jobs[0])}: runs {steps}, want {BOOTSTRAP_STEPS}")
    return problems


CHECKS: dict[str, Callable[[Docs], list[str]]] = {
    "schema": schema_problems, "jobs": job_problems, "servers": server_problems, "images": image_problems,
    "flink-pods": flink_pod_problems,
    "settings": settings_problems, "shared": shared_folder_problems,
    "bootstrap": bootstrap_problems}


# the manifests as they are ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("environment", ENVIRONMENTS)
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_every_rendered_manifest_passes(check: str, environment: str) -> None:
    assert CHECKS[check](rendered(environment)) == []


def test_the_overlays_are_three_environments_in_their_own_namespaces() -> None:
    namespaces = {}
    for environment in ENVIRONMENTS[1:]:
        found = {doc["metadata"].get("namespace") for doc in rendered(environment)}
        assert len(found) == 1 and None not in found, f"{environment}: namespaces {found}"
        namespaces[environment] = found.pop()
    assert len(set(namespaces.values())) == 3, namespaces


# each check fails on the manifest it guards -------------------------------------------------------------------------

def _find(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def _container(docs: Docs, kind: str, name: str) -> dict[str, Any]:
    return _find(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]


def _set_settings(docs: Docs, replace: Callable[[str], str]) -> None:
    config = next(d for d in docs if "settings.toml" in d.get("data", {}))
    config["data"]["settings.toml"] = replace(config["data"]["settings.toml"])


def _secrets_volume(docs: Docs, name: str) -> dict[str, Any]:
    """The adserve-secrets volume source of FlinkDeployment `name`'s pods."""
    volumes = _find(docs, "FlinkDeployment", name)["spec"]["podTemplate"]["spec"]["volumes"]
    return next(v["secret"] for v in volumes if v.get("secret", {}).get("secretName") == "adserve-secrets")


def _replace_arg(container: dict[str, Any], old: str, new: str) -> None:
    container["args"] = [new if a == old else a for a in container["args"]]


BREAKAGES: dict[str, tuple[Callable[[Docs], None], str, str]] = {
    "a field the operator's CRD does not know": (
        lambda d: _find(d, "FlinkDeployment", "budget-pacing")["spec"]["job"].update(upgradeMod="savepoint"),
        "schema", "upgradeMod"),
    "a Flink version the operator's CRD does not list": (
        lambda d: _find(d, "FlinkDeployment", "archiver")["spec"].update(flinkVersion="v3_0"), "schema", "v3_0"),
    "a Flink version other than the image's": (
        lambda d: _find(d, "FlinkDeployment", "archiver")["spec"].update(flinkVersion="v1_20"), "jobs", "v1_20"),
    "a job that stops restarting": (
        lambda d: _find(d, "FlinkDeployment", "training-join")["spec"]["job"].update(
            args=["-pym", "jobs.training_join.main", "--parallelism", "2"]), "jobs", "--restart-strategy"),
    "failed jobs left failed": (
        lambda d: _find(d, "FlinkDeployment", "features")["spec"]["flinkConfiguration"].update(
            {"kubernetes.operator.job.restart.failed": "false"}), "jobs", "kubernetes.operator.job.restart.failed"),
    "a changelog job restoring without claiming its snapshot": (
        lambda d: _find(d, "FlinkDeployment", "click-aggregator")["spec"]["flinkConfiguration"].pop(
            "execution.state-recovery.claim-mode"), "jobs", "claim-mode"),
    "a changelog job without the changelog's storage": (
        lambda d: _find(d, "FlinkDeployment", "click-aggregator")["spec"]["flinkConfiguration"].pop(
            "state.changelog.dstl.dfs.base-path"), "jobs", "state.changelog.dstl.dfs.base-path"),
    "every secret in a Flink pod": (
        lambda d: _secrets_volume(d, "archiver").pop("items"), "flink-pods", "every key of adserve-secrets"),
    "the token keys in a Flink pod": (
        lambda d: _secrets_volume(d, "archiver")["items"].append(
            {"key": "token-keys", "path": "token-keys"}), "flink-pods", "token-keys"),
    "a Flink pod outside the servers' group": (
        lambda d: _find(d, "FlinkDeployment", "features")["spec"]["podTemplate"]["spec"]["securityContext"].update(
            fsGroup=9999), "flink-pods", "fsGroup 9999"),
    "a field Kubernetes does not know": (
        lambda d: _container(d, "Deployment", "adserver").update(readinessprobe={}), "schema", "readinessprobe"),
    "a port Kubernetes refuses": (
        lambda d: _container(d, "Deployment", "prediction")["ports"][0].update(containerPort="http"),
        "schema", "containerPort"),
    "a stateful job upgraded without its state": (
        lambda d: _find(d, "FlinkDeployment", "click-aggregator")["spec"]["job"].update(upgradeMode="stateless"),
        "jobs", "upgradeMode 'stateless'"),
    "a job without a FlinkDeployment": (
        lambda d: d.remove(_find(d, "FlinkDeployment", "budget-pacing")), "jobs", "job budget_pacing: 0"),
    "a job running another module": (
        lambda d: _find(d, "FlinkDeployment", "features")["spec"]["job"].update(
            args=["-pym", "jobs.feature.main", "--parallelism", "1"]), "jobs", "-pym jobs.features.main"),
    "checkpoints on a pod's disk": (
        lambda d: _find(d, "FlinkDeployment", "index-builder")["spec"]["flinkConfiguration"].update(
            {"execution.checkpointing.dir": "file:///tmp/checkpoints"}), "jobs", "execution.checkpointing.dir"),
    "a flag the job does not have": (
        lambda d: _find(d, "FlinkDeployment", "event-counts")["spec"]["job"]["args"].append("--no-such-flag"),
        "jobs", "--no-such-flag"),
    "an ad server ready on another path": (
        lambda d: _container(d, "Deployment", "adserver")["readinessProbe"]["httpGet"].update(path="/metrics"),
        "servers", "readinessProbe httpGet path '/metrics'"),
    "a tracker probed on a path that does not drain": (
        lambda d: _container(d, "StatefulSet", "tracker")["readinessProbe"]["httpGet"].update(path="/metrics"),
        "servers", "readinessProbe httpGet path '/metrics'"),
    "an ad server killed before it drains": (
        lambda d: _find(d, "Deployment", "adserver")["spec"]["template"]["spec"].update(
            terminationGracePeriodSeconds=20), "servers", "does not cover --drain-delay-s"),
    "an ad server without a snapshot to share": (
        lambda d: _find(d, "Deployment", "adserver")["spec"]["template"]["spec"].pop("initContainers"),
        "servers", "no init container writes a snapshot"),
    "an ad server with a fraction of a core": (
        lambda d: _container(d, "Deployment", "adserver")["resources"]["limits"].update(cpu="1500m"),
        "servers", "whole number of cores"),
    "a server flag `adserve` does not have": (
        lambda d: _container(d, "Deployment", "dashboard")["args"].append("--no-such-flag"),
        "servers", "does not parse"),
    "a server only reachable from its own pod": (
        lambda d: _replace_arg(_container(d, "Deployment", "advertiser-api"), "0.0.0.0", "127.0.0.1"),
        "servers", "listens on '127.0.0.1'"),
    "ad-feature snapshots the prediction service cannot read": (
        lambda d: _container(d, "Deployment", "prediction").update(volumeMounts=[
            m for m in _container(d, "Deployment", "prediction")["volumeMounts"] if m["name"] != "shared"]),
        "shared", "Deployment/prediction: does not mount claim adserve-shared"),
    "ad-feature snapshots on a TaskManager's disk": (
        lambda d: _find(d, "FlinkDeployment", "features")["spec"]["job"].update(
            args=["-pym", "jobs.features.main", "--parallelism", "1", "--snapshot-dir", "/tmp/features"]),
        "shared", "is on no persistent volume claim"),
    "CDC registered before the topics exist": (
        lambda d: _find(d, "Job", "adserve-bootstrap")["spec"]["template"]["spec"]["initContainers"].pop(),
        "bootstrap", "want [('advertisers', 'migrate'), ('topics', 'create'), ('cdc', 'register')]"),
    "a bootstrap flag `adserve` does not have": (
        lambda d: _container(d, "Job", "adserve-bootstrap")["args"].append("--no-such-flag"),
        "bootstrap", "does not parse"),
    "an image no Dockerfile builds": (
        lambda d: _container(d, "Deployment", "prediction").update(image="registry.example.com/adserve-tools:1"),
        "images", "adserve-tools"),
    "a settings file with an unknown setting": (
        lambda d: _set_settings(d, lambda t: t.replace("[postgres]", "[postgres]\nhost = \"db\"")),
        "settings", "host"),
    "SASL without a user name": (
        lambda d: _set_settings(d, lambda t: re.sub(r"(?m)^username = .*$", "", t)), "settings", "kafka.username"),
    "a secret nobody is told to create": (
        lambda d: _set_settings(d, lambda t: t.replace("secrets/redis-password", "secrets/redis-passwd")),
        "settings", "'redis-passwd'"),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_a_broken_manifest_fails_the_check_that_guards_it(breakage: str) -> None:
    break_it, check, named = BREAKAGES[breakage]
    docs = rendered("overlays/production")
    assert CHECKS[check](docs) == []
    break_it(docs)
    problems = CHECKS[check](docs)
    assert any(named in problem for problem in problems), problems


# container definitions ----------------------------------------------------------------------------------------------

def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's instructions as (INSTRUCTION, rest), continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, rest = full.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    return out


DOCKERFILE_INSTRUCTIONS = {"FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "USER", "ENTRYPOINT", "CMD",
                           "EXPOSE", "LABEL"}


def dockerfile_problems(path: Path, text: str) -> list[str]:
    """What a build of this Dockerfile from the repository root would trip on: an instruction Docker does not
    know, a COPY source that is not in the repository (the UDF jar: after infra/bootstrap.sh) or that its
    .dockerignore leaves out, a downloaded jar that is not the one the project's Maven poms fetch, an entry
    point that is not a command of this project, a Flink base image of another version than PyFlink's."""
    problems = []
    ignore = Path(f"{path}.dockerignore")
    kept = set(re.findall(r"(?m)^!([^\s*]+?)/?$", ignore.read_text())) if ignore.exists() else None
    poms = " ".join(p.read_text() for p in (REPO_ROOT / "infra" / "maven").glob("*/pom.xml"))
    pins = dict(re.findall(r"^([a-z][a-z0-9-]*)(?:\[[^\]]*\])?==(\S+)$", "\n".join(
        tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]), re.MULTILINE))
    steps = instructions(text)
    if not steps or steps[0][0] not in ("FROM", "ARG"):
        problems.append(f"{path.name}: does not start with FROM (or ARG)")
    for keyword, rest in steps:
        if keyword not in DOCKERFILE_INSTRUCTIONS:
            problems.append(f"{path.name}: unknown instruction {keyword}")
        elif keyword == "COPY" and "--from=" not in rest:
            parts = [p for p in rest.split() if not p.startswith("--")]
            for source in parts[:-1]:
                if not (REPO_ROOT / source).exists():
                    problems.append(f"{path.name}: COPY {source}: not in the repository (infra/bootstrap.sh builds "
                                    f"jobs/jvm/target)")
                if kept is not None and source not in kept and source.split("/")[0] not in kept:
                    problems.append(f"{path.name}: COPY {source}: {ignore.name} leaves it out of the context")
        elif keyword == "ADD":
            problems += _add_problems(path, rest, poms)
        elif keyword == "ENTRYPOINT":
            command = json.loads(rest)[0]
            scripts = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
            if command not in scripts:
                problems.append(f"{path.name}: ENTRYPOINT {command} is no script of pyproject.toml {sorted(scripts)}")
        elif keyword == "ARG" and rest.startswith("FLINK_IMAGE="):
            if not re.fullmatch(r"flink:" + re.escape(FLINK_VERSION) + r"(-[a-z0-9_.]+)?", rest.split("=", 1)[1]):
                problems.append(f"{path.name}: {rest}: not the official flink image of PyFlink's {FLINK_VERSION}")
        elif keyword == "RUN":
            for module in re.findall(r"python3(?:\.11)? -m ([a-z_.]+)", rest):
                if module != "pip":
                    problems.append(f"{path.name}: RUN python -m {module}: only pip runs at build time")
            for package, version in re.findall(r"\b([a-z][a-z0-9-]*)(?:\[[^\]]*\])?==([0-9][^\s\"']*)", rest):
                if pins.get(package) != version:
                    problems.append(f"{path.name}: RUN installs {package}=={version}, pyproject.toml pins "
                                    f"{pins.get(package)}")
    return problems


def _add_problems(path: Path, rest: str, poms: str) -> list[str]:
    """An ADD must be a Maven Central jar the project's poms name, pinned by the checksum of the fetched jar."""
    checksum = re.search(r"--checksum=sha256:([0-9a-f]{64})", rest)
    url = re.search(r"https://repo1\.maven\.org/maven2/(\S+)/([^/\s]+)/([^/\s]+)/(\S+\.jar)", rest)
    if not checksum or not url:
        return [f"{path.name}: ADD {rest}: not a Maven Central jar pinned by --checksum=sha256"]
    group, artifact, version, file_name = url.group(1).replace("/", "."), url.group(2), url.group(3), url.group(4)
    if not re.search(rf"<groupId>{re.escape(group)}</groupId><artifactId>{re.escape(artifact)}</artifactId>"
                     rf"<version>{re.escape(version)}</version>", poms):
        return [f"{path.name}: ADD {group}:{artifact}:{version}: no infra/maven pom fetches that artifact"]
    fetched = list(PlatformSettings.from_env().jars_dir.rglob(file_name))
    if fetched and hashlib.sha256(fetched[0].read_bytes()).hexdigest() != checksum.group(1):
        return [f"{path.name}: ADD {file_name}: the checksum is not the sha256 of the jar `adserve fetch` fetched"]
    return []


@pytest.mark.parametrize("path", sorted(DOCKER_DIR.glob("*.Dockerfile")), ids=lambda p: p.name)
def test_a_dockerfile_builds_from_what_the_repository_holds(path: Path) -> None:
    assert dockerfile_problems(path, path.read_text()) == []


def test_every_image_a_dockerfile_builds_is_named() -> None:
    assert set(dockerfile_images()) == {"adserve", "adserve-flink"}


@pytest.mark.parametrize("breakage, named", [
    ("COPY nowhere ./nowhere", "COPY nowhere: not in the repository"),
    ("COPY docs ./docs", "leaves it out of the context"),
    ("ADD --checksum=sha256:" + "0" * 64 + " https://repo1.maven.org/maven2/org/apache/flink/flink-sql-connector-"
     "kafka/5.0.0-2.2/flink-sql-connector-kafka-5.0.0-2.2.jar /opt/flink/lib/", "checksum is not the sha256"),
    ("ADD https://example.com/some.jar /opt/flink/lib/", "not a Maven Central jar"),
    ("ENTRYPOINT [\"adserver\"]", "ENTRYPOINT adserver is no script"),
    ("SHELLX [\"bash\"]", "unknown instruction SHELLX"),
    ("RUN python3.11 -m pip install \"apache-beam[gcp]==2.60.0\"", "pyproject.toml pins 2.61.0"),
])
def test_a_broken_dockerfile_fails(breakage: str, named: str) -> None:
    path = DOCKER_DIR / "flink-job.Dockerfile"
    if "checksum is not" in named and not list(PlatformSettings.from_env().jars_dir.rglob("flink-sql-connector-*")):
        pytest.fail("the Kafka connector jar is not fetched: run `adserve fetch`")
    problems = dockerfile_problems(path, path.read_text() + "\n" + breakage + "\n")
    assert any(named in problem for problem in problems), problems


def test_the_flink_image_is_the_version_of_pyflink() -> None:
    path = DOCKER_DIR / "flink-job.Dockerfile"
    other = path.read_text().replace(f"flink:{FLINK_VERSION}", "flink:1.20.0")
    assert any("not the official flink image" in p for p in dockerfile_problems(path, other))
