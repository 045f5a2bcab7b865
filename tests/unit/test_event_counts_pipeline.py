"""The Beam pipeline event_counts on the DirectRunner."""
import glob

import apache_beam as beam
import fastavro
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from pipelines import event_counts
from pipelines.avro_files import schema_json
from schemas import topics
from tests.factories import SMOKE_EVENTS, expected_event_counts


def test_count_events_per_minute_gives_the_worked_example():
    with TestPipeline(runner="DirectRunner") as p:
        counted = p | beam.Create(SMOKE_EVENTS) | event_counts.CountEventsPerMinute()
        assert_that(counted, equal_to(expected_event_counts()))


def test_run_reads_archived_avro_files_and_writes_avro_results(tmp_path):
    archive = tmp_path / "archive"
    archive.mkdir()
    schema = fastavro.parse_schema(schema_json("ad_event.avsc"))
    # two hourly files, as the archive writes them
    for part, events in enumerate((SMOKE_EVENTS[:4], SMOKE_EVENTS[4:])):
        with open(archive / f"{topics.AD_EVENTS}-{part}.avro", "wb") as out:
            fastavro.writer(out, schema, events)
    event_counts.run([f"--input={archive}/*.avro", f"--output={tmp_path}/out/counts",
                      "--runner=DirectRunner"], save_main_session=False)
    written = []
    for path in glob.glob(f"{tmp_path}/out/counts*.avro"):
        with open(path, "rb") as f:
            written.extend(event_counts_normalised(fastavro.reader(f)))
    key = lambda r: (r["campaign_id"], r["window_start"])  # noqa: E731
    assert sorted(written, key=key) == sorted(expected_event_counts(), key=key)


def event_counts_normalised(records):
    from pipelines.avro_files import normalise

    return [normalise(r) for r in records]


def test_unknown_options_pass_through_to_beam():
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    options = PipelineOptions(["--runner=DataflowRunner", "--project=p", "--region=europe-west1"])
    assert options.view_as(StandardOptions).runner == "DataflowRunner"
