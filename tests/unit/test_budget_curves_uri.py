"""The budget job's traffic curves come from a local path, a file:// URL or an object-storage URL (Beam's
FileSystems); one that was given but cannot be read fails the job at start, naming --curves / ADSERVE_CURVES, in
main before submission and again in the pacer's open() on a TaskManager. Only an empty setting means flat
curves."""
from __future__ import annotations

import io
import json

import pytest
from apache_beam.io.filesystem import FileMetadata, FileSystem

from core.errors import InvalidSettings
from core.pacing import Curves
from jobs.budget_pacing import main as budget_main
from jobs.budget_pacing.functions import Pace, PacerSettings, load_curves
from jobs.side_files import read_side_file

from tests.unit.test_budget_pacing_job import FakeRuntimeContext

DOCUMENT = {"default": [1.0, 2.0, 1.0], "campaigns": {"7": [3.0, 1.0, 1.0]}, "placements": {"feed": [1.0, 1.0, 2.0]}}
OBJECTS: dict[str, bytes] = {}  # what the stand-in object store holds


class StandInObjectStore(FileSystem):
    """An object store under the scheme adserve-test://, reached through Beam's FileSystems exactly as gs:// or
    s3:// are (Beam picks a filesystem by the URL's scheme)."""

    @classmethod
    def scheme(cls):
        return "adserve-test"

    def exists(self, path):
        return path in OBJECTS

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        return io.BytesIO(OBJECTS[path])

    def join(self, basepath, *paths):
        return "/".join([basepath, *paths])

    def split(self, path):
        return tuple(path.rsplit("/", 1))

    def _list(self, dir_or_prefix):
        return iter([FileMetadata(p, len(b)) for p, b in OBJECTS.items() if p.startswith(dir_or_prefix)])

    def has_dirs(self):
        return False

    def size(self, path):
        return len(OBJECTS[path])

    def mkdirs(self, path):
        raise NotImplementedError("read-only stand-in")

    create = copy = rename = delete = last_updated = metadata = mkdirs


def test_empty_curves_mean_flat_curves_and_no_forecast():
    assert load_curves("") == Curves()


def test_curves_are_read_from_a_local_path_and_a_file_url(tmp_path):
    path = tmp_path / "curves.json"
    path.write_text(json.dumps(DOCUMENT))
    assert load_curves(str(path)) == Curves.from_document(DOCUMENT)
    assert load_curves(path.as_uri()) == Curves.from_document(DOCUMENT)


def test_curves_are_read_from_an_object_store_url_through_beams_filesystems():
    OBJECTS["adserve-test://bucket/curves/today.json"] = json.dumps(DOCUMENT).encode()
    assert load_curves("adserve-test://bucket/curves/today.json").shape(7) == [3.0, 1.0, 1.0]


@pytest.mark.parametrize("uri", ["/nonexistent/curves.json", "file:///nonexistent/curves.json",
                                 "adserve-test://bucket/missing.json"])
def test_a_missing_curves_file_fails_naming_the_setting(uri):
    with pytest.raises(InvalidSettings, match="--curves / ADSERVE_CURVES.*does not exist"):
        load_curves(uri)


def test_an_object_store_whose_filesystem_is_not_installed_fails_naming_the_setting():
    with pytest.raises(InvalidSettings, match="--curves / ADSERVE_CURVES: cannot read no-such-store://b/c.json"):
        load_curves("no-such-store://b/c.json")


def test_a_file_that_is_not_a_curves_document_fails_naming_the_setting(tmp_path):
    path = tmp_path / "curves.json"
    path.write_text("not json")
    with pytest.raises(InvalidSettings, match="--curves / ADSERVE_CURVES: .* is not a traffic curves document"):
        load_curves(str(path))
    path.write_text("[1, 2]")
    with pytest.raises(InvalidSettings, match="is not a traffic curves document"):
        load_curves(str(path))


def test_gzipped_curves_are_read_by_their_suffix(tmp_path):
    import gzip

    path = tmp_path / "curves.json.gz"
    path.write_bytes(gzip.compress(json.dumps(DOCUMENT).encode()))
    assert load_curves(str(path)) == Curves.from_document(DOCUMENT)


def test_a_side_file_reads_as_none_only_when_no_uri_is_given(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert read_side_file("", "--x") is None
    assert read_side_file(str(tmp_path / "empty"), "--x") == b""


def test_main_fails_on_a_missing_curves_file_before_it_builds_or_submits_the_job(monkeypatch):
    submitted = []
    monkeypatch.setattr(budget_main, "run", submitted.append)
    with pytest.raises(InvalidSettings, match="--curves / ADSERVE_CURVES"):
        budget_main.main(["--bootstrap", "kafka:9092", "--curves", "/nonexistent/curves.json"])
    assert submitted == []


def test_main_takes_the_curves_from_the_environment(monkeypatch, tmp_path):
    path = tmp_path / "curves.json"
    path.write_text(json.dumps(DOCUMENT))
    monkeypatch.setenv("ADSERVE_CURVES", str(path))
    submitted = []
    monkeypatch.setattr(budget_main, "run", submitted.append)
    budget_main.main(["--bootstrap", "kafka:9092"])
    assert [s.curves for s in submitted] == [str(path)]


def test_the_pacer_fails_to_open_on_a_taskmanager_that_cannot_read_the_curves():
    pacer = Pace(PacerSettings(shards=16, curves_path="/nonexistent/curves.json"))
    with pytest.raises(InvalidSettings, match="--curves / ADSERVE_CURVES"):
        pacer.open(FakeRuntimeContext())
