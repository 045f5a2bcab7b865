"""The Flink configuration each FlinkDeployment of deploy/k8s implies loads in Flink's own loader and parses as
Flink's typed options.

For every FlinkDeployment of the base and each overlay (rendered with kustomize, as test_k8s_manifests renders
them), the configuration the operator hands the JobManager is written as Flink 2's `config.yaml`: the keys the
operator derives from the spec (cluster id, namespace, image, service account, JobManager and TaskManager memory
and CPU, the deployment target, the job's jar and parallelism) plus the manifest's `flinkConfiguration`. The
distribution's own `GlobalConfiguration.loadConfiguration` reads it (flink_config/FlinkConfigCheck.java, run with
the `java` of the platform on the jars of the apache-flink wheel), and every key is read through the ConfigOption
of Flink's distribution that owns it: a key no option has (a typo, a key of another Flink version) or a value
its type does not parse (a duration, an enum such as the claim mode) is a problem. Keys of the operator itself
(`kubernetes.operator.*`) and of a metrics reporter (`metrics.reporter.<name>.*`, read by the reporter) are
not Flink options and are only loaded."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_k8s_manifests import ENVIRONMENTS, name_of, of_kind, rendered

CHECKER = Path(__file__).resolve().parent / "flink_config" / "FlinkConfigCheck.java"
NOT_FLINK_OPTIONS = ("kubernetes.operator.", "metrics.reporter.")


def implied_configuration(doc: dict[str, Any]) -> dict[str, str]:
    """The configuration the operator gives a FlinkDeployment's cluster: what it derives from the spec, then the
    manifest's flinkConfiguration (which wins). Pure."""
    spec = doc["spec"]
    jm, tm, job = spec.get("jobManager", {}), spec.get("taskManager", {}), spec.get("job", {})
    derived = {
        "kubernetes.cluster-id": doc["metadata"]["name"],
        "kubernetes.namespace": doc["metadata"].get("namespace", "default"),
        "kubernetes.container.image.ref": spec.get("image", ""),
        "kubernetes.container.image.pull-policy": spec.get("imagePullPolicy", "IfNotPresent"),
        "kubernetes.service-account": spec.get("serviceAccount", "default"),
        "execution.target": "kubernetes-application",
        "jobmanager.memory.process.size": jm.get("resource", {}).get("memory"),
        "kubernetes.jobmanager.cpu.amount": jm.get("resource", {}).get("cpu"),
        "kubernetes.jobmanager.replicas": jm.get("replicas"),
        "taskmanager.memory.process.size": tm.get("resource", {}).get("memory"),
        "kubernetes.taskmanager.cpu.amount": tm.get("resource", {}).get("cpu"),
        "pipeline.jars": job.get("jarURI"),
        "parallelism.default": job.get("parallelism"),
    }
    config = {key: str(value) for key, value in derived.items() if value is not None}
    config.update({key: str(value) for key, value in spec.get("flinkConfiguration", {}).items()})
    return config


def _pyflink_jars() -> list[Path]:
    import pyflink

    home = Path(pyflink.__file__).parent
    return sorted((home / "lib").glob("flink-dist-*.jar")) + sorted((home / "opt").glob("flink-python-*.jar"))


def check(folders: list[Path]) -> tuple[dict[Path, int], list[str]]:
    """Run the checker over the folders: (keys loaded per folder, problem lines)."""
    java = shutil.which("java")
    if java is None:
        pytest.fail("no `java` on PATH: run `bash infra/bootstrap.sh` (it installs Java 17)")
    jars = [str(j) for j in _pyflink_jars()]
    import pyflink

    class_path = f"{Path(pyflink.__file__).parent / 'lib'}/*:{':'.join(jars)}"
    done = subprocess.run([java, "-cp", class_path, str(CHECKER), *jars, "--", *map(str, folders)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded, problems = {}, []
    for line in done.stdout.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 3 or not parts[0].startswith("/"):
            continue
        folder, what, rest = Path(parts[0]), parts[1], parts[2]
        if what == "LOADED":
            loaded[folder] = int(rest)
        elif not (what == "UNKNOWN" and rest.startswith(NOT_FLINK_OPTIONS)):
            problems.append(f"{folder.name}: {what} {rest}")
    return loaded, problems


def _write(folder: Path, config: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, default_flow_style=False))
    return folder


GOOD = {"execution.state-recovery.claim-mode": "CLAIM", "restart-strategy.type": "exponential-delay",
        "restart-strategy.exponential-delay.max-backoff": "2 min", "state.changelog.storage": "filesystem",
        "kubernetes.operator.job.restart.failed": "true"}
BAD = {"execution.state-recovery.claim-mode": "TAKE", "restart-strategy.exponential-delay.max-backof": "2 min",
       "restart-strategy.exponential-delay.max-backoff": "two minutes"}


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every FlinkDeployment's configuration and the two examples, through one run of the checker (one JVM):
    (folders of the deployments, written key counts, loaded key counts, problem lines)."""
    root = tmp_path_factory.mktemp("flink-config")
    written = {}
    for environment in ENVIRONMENTS:
        for doc in of_kind(rendered(environment), "FlinkDeployment"):
            config = implied_configuration(doc)
            written[_write(root / f"{environment.replace('/', '-')}-{name_of(doc).split('/')[-1]}", config)] = \
                len(config)
    deployments = list(written)
    written[_write(root / "example-good", GOOD)] = len(GOOD)
    written[_write(root / "example-bad", BAD)] = len(BAD)
    loaded, problems = check(list(written))
    return deployments, written, loaded, problems


def test_every_flink_deployment_configuration_loads_in_flinks_own_loader(checked):
    deployments, written, loaded, problems = checked
    assert len(deployments) == len(ENVIRONMENTS) * 7
    assert [p for p in problems if not p.startswith("example-")] == []
    assert {f: loaded.get(f) for f in deployments} == {f: written[f] for f in deployments}  # none dropped


def test_a_mistyped_key_and_a_value_of_the_wrong_type_are_named(checked):
    _, written, loaded, problems = checked
    assert [p for p in problems if p.startswith("example-good")] == []
    assert sorted(p.split(" ", 3)[1:3] for p in problems if p.startswith("example-bad")) == [
        ["INVALID", "execution.state-recovery.claim-mode"],
        ["INVALID", "restart-strategy.exponential-delay.max-backoff"],
        ["UNKNOWN", "restart-strategy.exponential-delay.max-backof"]]
    assert all(loaded[f] == n for f, n in written.items() if f.name.startswith("example-"))
