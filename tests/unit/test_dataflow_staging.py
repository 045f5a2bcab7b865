"""The Beam pipelines as Dataflow workers get them: staged by Beam's own stager from deploy/dataflow/setup.py and
requirements.txt, installed into a clean Python 3.11 virtual environment the way the worker boot installs them
(the requirements from the staged wheels, then the workflow tarball), and every pipeline run there on the
DirectRunner against Avro files on disk, from a folder outside the checkout with PYTHONPATH unset, so nothing
can come from the repository.

Each pipeline runs in both entry forms: the documented `python -m pipelines.<name>` and the Flex Template entry
(deploy/dataflow/launch.py, copied out as the launcher image holds it, with the template's parameter spelling).
Both run on the multi-process DirectRunner, whose worker processes unpickle the pipeline's functions and load
no main session, as on Dataflow they could only import the installed package. The virtual environment with
apache-beam (what the worker image provides) is kept under .platform/dataflow keyed by the pin; the worker
package is built and installed again on every run. Needs no platform; the first run downloads the pinned
wheels."""
from __future__ import annotations

import collections
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from datetime import datetime, timezone
from pathlib import Path

import fastavro
import pytest

from schemas import topics

ROOT = Path(__file__).resolve().parents[2]
DATAFLOW = ROOT / "deploy" / "dataflow"
CACHE = ROOT / ".platform" / "dataflow"
RUN_LIMIT_S = 240  # one pipeline run; the whole module stays well under five minutes on two cores
DAY = "2026-03-10"
FORMS = ("module", "template")


def _pin(package: str) -> str:
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(p for p in pins if p.split("==")[0] == package)


def _run(command: list[str], cwd: Path, timeout: int = RUN_LIMIT_S, **extra_env: str) -> str:
    """Run a command as a worker would: no PYTHONPATH, no user site, the virtual environment's own interpreter."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(PYTHONNOUSERSITE="1", **extra_env)
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    return done.stdout


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _beam_environment(cwd: Path) -> Path:
    """A virtual environment with only the pinned apache-beam, as the worker image has it (kept between runs)."""
    beam = _pin("apache-beam")
    key = hashlib.sha256(f"{beam}\n{sys.version_info[:2]}".encode()).hexdigest()[:16]
    venv = CACHE / f"venv-{key}"
    if not (venv / "ready").exists():
        shutil.rmtree(venv, ignore_errors=True)
        interpreter = shutil.which("python3.11") or sys.executable
        _run([interpreter, "-m", "venv", str(venv)], cwd, timeout=300)
        _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", beam], cwd, timeout=600)
        (venv / "ready").write_text(beam)
    return venv


def _stage(staging: Path) -> dict[str, Path]:
    """The job's staged files as Beam's stager makes them for --setup_file and --requirements_file: the
    workflow tarball (`python setup.py sdist` in deploy/dataflow), the requirements file and the wheels it
    downloads for the workers' platform. Staged name -> local file."""
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.runners.portability.stager import Stager

    options = PipelineOptions([f"--setup_file={DATAFLOW / 'setup.py'}",
                               f"--requirements_file={DATAFLOW / 'requirements.txt'}",
                               f"--requirements_cache={CACHE / 'requirements-cache'}"])
    resources = Stager.create_job_resources(options, str(staging), log_submission_env_dependencies=False)
    return {name: Path(src) for src, name, _ in Stager.extract_staging_tuple_iter(resources)}


def _install_like_a_worker(python: Path, staged: dict[str, Path], folder: Path, cwd: Path) -> None:
    """The worker boot's steps: the requirements from the staged files only, then with the index open (a no-op
    when the first round had everything), then the workflow tarball on a worker without the package."""
    folder.mkdir()
    for name, src in staged.items():
        shutil.copy(src, folder / name)
    requirements = str(folder / "requirements.txt")
    pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run(pip + ["-r", requirements, "--no-index", "--no-deps", "--find-links", str(folder)], cwd)
    _run(pip + ["-r", requirements, "--find-links", str(folder)], cwd)
    _run([str(python), "-m", "pip", "uninstall", "-q", "-y", "adserve-pipelines"], cwd)
    _run(pip + [str(folder / "workflow.tar.gz")], cwd)


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """(the clean environment's python, a folder outside the checkout holding the launcher entry, a run helper)."""
    base = tmp_path_factory.mktemp("dataflow")
    outside = base / "cwd"
    outside.mkdir()
    with _locked(CACHE / "venv.lock"):
        venv = _beam_environment(outside)
        python = venv / "bin" / "python"
        _install_like_a_worker(python, _stage(base / "staging"), base / "staged", outside)
        launcher = outside / "template"  # as the launcher image holds deploy/dataflow
        shutil.copytree(DATAFLOW / "templates", launcher / "templates")
        shutil.copy(DATAFLOW / "launch.py", launcher / "launch.py")

        def launch(pipeline: str, form: str, *parameters: str) -> str:
            """One pipeline run in one entry form, on the DirectRunner with worker processes."""
            entry = [str(launcher / "launch.py")] if form == "template" else ["-m", f"pipelines.{pipeline}"]
            return _run([str(python), *entry, *parameters, "--runner=DirectRunner",
                         "--direct_running_mode=multi_processing", "--direct_num_workers=1"], outside,
                        ADSERVE_PIPELINE=pipeline)

        yield python, outside, launch


# ------------------------------------------------------------------ files on disk


def _plain_avro(path: Path, name: str, records: list[dict]) -> None:
    """Records written as a pipeline's plain Avro file (no envelope), the schema read off the records."""
    def avro_type(values):
        kinds = {type(v) for v in values}
        if kinds <= {int}:
            return "long"
        return "string" if kinds <= {str} else ["null", "string"]

    schema = {"type": "record", "name": name, "fields": [
        {"name": field, "type": avro_type([r[field] for r in records])} for field in records[0]]}
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(schema), records)


def _avro_records(paths) -> list[dict]:
    records = []
    for path in sorted(paths):
        with open(path, "rb") as f:
            records.extend(fastavro.reader(f))
    return records


# ------------------------------------------------------------------ the staged environment


def test_the_staged_environment_imports_the_pipelines_from_the_installed_package_only(worker):
    python, outside, _ = worker
    found = json.loads(_run([str(python), "-c", (
        "import importlib.util, json, core, schemas, pipelines.training_set\n"
        "print(json.dumps({'files': [m.__file__ for m in (core, schemas, pipelines.training_set)],\n"
        "                  'contracts': sorted(p.name for p in schemas.SCHEMA_DIR.glob('*.avsc')),\n"
        "                  'absent': [n for n in ('streams', 'jobs', 'serving', 'tests', 'adserve', 'pyflink',\n"
        "                             'tensorflow') if importlib.util.find_spec(n) is None]}))")], outside))
    site = str(python.parent.parent)
    assert all(f.startswith(site) and "site-packages" in f for f in found["files"]), found["files"]
    assert found["contracts"] == sorted(p.name for p in (ROOT / "schemas").glob("*.avsc"))
    assert found["absent"] == ["streams", "jobs", "serving", "tests", "adserve", "pyflink", "tensorflow"]


@pytest.mark.parametrize("form", FORMS)
def test_event_counts_runs_from_the_staged_package(worker, tmp_path, form):
    from pipelines.avro_files import normalise, schema_json
    from tests.factories import SMOKE_EVENTS, expected_event_counts

    with open(tmp_path / f"{topics.AD_EVENTS}.avro", "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(schema_json("ad_event.avsc")), SMOKE_EVENTS)
    _, _, launch = worker
    launch("event_counts", form, f"--input={tmp_path}/*.avro", f"--output={tmp_path}/out/counts", "--window_ms=60000")
    key = lambda r: (r["campaign_id"], r["window_start"])  # noqa: E731
    written = [normalise(r) for r in _avro_records((tmp_path / "out").glob("counts*.avro"))]
    assert sorted(written, key=key) == sorted(expected_event_counts(), key=key)


@pytest.mark.parametrize("form", FORMS)
def test_traffic_curves_runs_from_the_staged_package(worker, tmp_path, form):
    from core.pacing import shape_from_counts
    from tests.unit.test_privacy import _archive, _day, _deleted_user

    day = _day()
    archive = _archive(tmp_path, day, _deleted_user(day), max(int(s["event_time"]) for s in day.served))
    _, _, launch = worker
    launch("traffic_curves", form, f"--input={archive}/{topics.AD_SERVED}/dt={DAY}/hr=*/part-*",
           f"--output={tmp_path}/curves.json", f"--as_of={DAY}", "--timezone=UTC")
    curves = json.loads((tmp_path / "curves.json").read_text())
    hours = collections.Counter(datetime.fromtimestamp(s["event_time"] / 1000, tz=timezone.utc).hour
                                for s in day.served)
    assert curves["as_of"] == DAY
    assert curves["default"] == shape_from_counts(hours, min_requests=1)
    assert set(curves["values_to_beat"]) == {s["placement"] for s in day.served}


@pytest.mark.parametrize("form", FORMS)
def test_nightly_recount_runs_from_the_staged_package(worker, tmp_path, form):
    from core import clicks
    from tests.unit.test_nightly_recount import _day_of_events

    events, campaigns = _day_of_events()
    archive = tmp_path / "archive"
    _plain_avro(archive / topics.AD_EVENTS / "dt=2026-01-05" / "hr=12" / "part-0", topics.record_type(topics.AD_EVENTS),
                events)
    _plain_avro(archive / topics.SERVING_CAMPAIGNS / "dt=2026-01-04" / "hr=23" / "part-0", "Campaign", campaigns)
    _, _, launch = worker
    launch("nightly_recount", form, f"--archive={archive}", "--day=2026-01-05", f"--output={tmp_path}/recount")
    summary = json.loads((tmp_path / "recount" / "summary.json").read_text())
    expected = {str(c): totals for (c, day), totals in clicks.recount(events, campaigns).items()
                if day == "2026-01-05"}
    recounted = {c: {k: v for k, v in totals.items() if k != "budget_class"}
                 for c, totals in summary["recount"].items()}
    assert (summary["events"], summary["corrupt_records"]) == (len(events), 0)
    assert recounted == json.loads(json.dumps(expected))


@pytest.mark.parametrize("form", FORMS)
def test_auction_replay_runs_from_the_staged_package(worker, tmp_path, form):
    from pipelines.auction_replay import parse_reserves, summary_of
    from tests.unit.test_auction_replay import _archive, _expected, _requests

    records = _requests(12)
    _archive(tmp_path / "archive", records, day="2027-01-15")
    _, _, launch = worker
    launch("auction_replay", form, f"--archive={tmp_path}/archive", "--from_day=2027-01-15", "--reserve=feed=1000000",
           f"--output={tmp_path}/replay", *(["--recommend=false"] if form == "template" else []))
    summary = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert (summary["served_records"], summary["corrupt_records"]) == (12, 1)
    assert summary["placements"] == summary_of(_expected(records, parse_reserves(["feed=1000000"])))["placements"]
    assert (tmp_path / "replay" / "table.txt").read_text().strip()


@pytest.mark.parametrize("form", FORMS)
def test_training_set_runs_from_the_staged_package(worker, tmp_path, form):
    from core import training
    from tests.unit.test_privacy import _archive, _day, _deleted_user

    day = _day()
    user = _deleted_user(day)
    archive = _archive(tmp_path, day, user, max(int(s["event_time"]) for s in day.served) + 86_400_000)
    _, _, launch = worker
    hour = f"dt={DAY}/hr=00/part-0"
    launch("training_set", form, f"--served={archive}/{topics.AD_SERVED}/{hour}",
           f"--events={archive}/{topics.AD_EVENTS}/{hour}", f"--deletions={archive}/{topics.PRIVACY_DELETIONS}/{hour}",
           "--keep_rate=1", f"--output={tmp_path}/ts")
    made = _avro_records((tmp_path / "ts").glob("examples-*.avro"))
    others = [s for s in day.served if s["user_id"] != user]
    assert sorted(made, key=training.example_order) == training.join(others, day.events, keep_rate=1.0)
    summary = json.loads((tmp_path / "ts" / "summary.json").read_text())
    assert summary["erased_served_records"] == len(day.served) - len(others) > 0


@pytest.mark.parametrize("form", FORMS)
def test_archive_erasure_runs_from_the_staged_package(worker, tmp_path, form):
    from tests.unit.test_privacy import _archive, _day, _deleted_user, _read

    day = _day()
    user = _deleted_user(day)
    archive = _archive(tmp_path, day, user, max(int(s["event_time"]) for s in day.served) + 86_400_000)
    _, _, launch = worker
    launch("archive_erasure", form, f"--archive={archive}", f"--output={tmp_path}/erasure")
    report = json.loads((tmp_path / "erasure" / "report.json").read_text())
    served_after = _read(archive / topics.AD_SERVED / f"dt={DAY}" / "hr=00" / "part-0")
    assert user not in {s["user_id"] for s in served_after}
    assert report["users"] == 1 and report["removed"][topics.AD_SERVED] == len(day.served) - len(served_after) > 0
