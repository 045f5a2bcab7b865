"""Beam pipeline `archive_erasure`: rewrites the archive's hourly files without the records of deleted users.

Which records go is core.privacy's rule: a record carrying a deleted user's id from before the request, and
every record of an impression served to the user before it (the served log names the impressions; beacons,
conversions, feedback and training examples follow them by impression id). Every run applies every request
in force (the compacted topic's records, or the archive's copy of it), so it is idempotent, and a file the
archiver commits after one run is erased by the next.

A file with something to remove is written next to itself as a hidden `.NAME.erasing` (readers match `part-*`
only) with the same writer schema and codec, then renamed over the original: a reader sees the old file or the
new one, never half of one. A file with nothing to remove is left as it is. A record that does not decode is
kept and counted (it cannot be judged; nothing is dropped silently).

Output: `<output>/report.json` ({"users", "erased_impressions", "files_scanned",
"files_rewritten", "removed": {topic: records}, "undecodable_kept"}).

    python -m pipelines.archive_erasure --archive .platform/archive --deletions 'deletions/*.avro' \\
        --output out/erasure
`adserve users apply-deletions` runs it daily over the platform's archive (docs/storage.md)."""
from __future__ import annotations

import argparse
import json
import logging
import posixpath
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems

from core import privacy
from core.errors import CorruptRecord
from pipelines.avro_files import matching_files, output_folder, unwrap
from pipelines.options import parse_options, run_as_main
from pipelines.unwrap import read_records
from schemas import topics

USER_TOPICS = (topics.AD_SERVED, topics.AD_EVENTS, topics.AD_CONVERSIONS, topics.AD_FEEDBACK,
               topics.TRAINING_EXAMPLES)  # the archived topics whose records belong to a user
ERASING_SUFFIX = ".erasing"


def topic_files_pattern(archive: str, topic: str) -> str:
    """Every committed file of one archived topic."""
    return f"{archive.rstrip('/')}/{topic}/dt=*/hr=*/part-*"


def topic_of(path: str) -> str:
    """The archived topic a file belongs to ({archive}/{topic}/dt=.../hr=.../part-*)."""
    return posixpath.basename(posixpath.dirname(posixpath.dirname(posixpath.dirname(path))))


def erasing_path(path: str) -> str:
    """The hidden file a rewrite is written to before it replaces `path`."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}{ERASING_SUFFIX}")


def deletions_in_force(pipeline, label: str, files: list[str]):
    """The UserDeletion records of `files` as a side input: user id -> the newest request's time (the mapping of
    core.privacy.Deletions)."""
    records, _ = read_records(pipeline, label, files)
    return beam.pvalue.AsDict(records
                              | f"{label}ByUser" >> beam.Map(lambda r: (str(r["user_id"]), int(r["event_time"])))
                              | f"{label}Newest" >> beam.CombinePerKey(max))


class ErasedImpressions(beam.PTransform):
    """Served records -> the impression ids the deletions erase (distinct)."""

    def __init__(self, deletions):
        super().__init__()
        self.deletions = deletions  # side input: deletions_in_force

    def expand(self, served):
        return (served
                | "ImpressionsOfDeleted" >> beam.FlatMap(
                    lambda r, newest: privacy.erased_impressions(r, privacy.Deletions(newest)),
                    newest=self.deletions)
                | "DistinctImpressions" >> beam.Distinct())


class WithoutDeletedUsers(beam.PTransform):
    """Records (served log, beacons, feedback) without those carrying a deleted user's id from before the
    request."""

    def __init__(self, deletions):
        super().__init__()
        self.deletions = deletions  # side input: deletions_in_force

    def expand(self, records):
        return records | "KeepUndeleted" >> beam.Filter(
            lambda r, newest: not privacy.Deletions(newest).erases_user(r.get("user_id"), int(r["event_time"])),
            newest=self.deletions)


def kept_records(records: Iterable[dict[str, Any]], deletions: privacy.Deletions, erased: frozenset[str],
                 codec) -> tuple[list[dict[str, Any]], int, int]:
    """(the file's records to keep as they were read, how many were removed, how many could not be judged)."""
    kept, removed, undecodable = [], 0, 0
    for record in records:
        try:
            domain = unwrap(record, codec)
        except CorruptRecord:
            undecodable += 1
            kept.append(record)
            continue
        if privacy.erases_record(domain, deletions, erased):
            removed += 1
        else:
            kept.append(record)
    return kept, removed, undecodable


class RewriteFile(beam.DoFn):
    """One archive file: read it, and when it holds erased records write it again without them (atomically).
    Emits the file's outcome: {"topic", "path", "removed", "undecodable"}."""

    def setup(self):
        from schemas.codec import AvroCodec

        self.codec = AvroCodec()
        self.removed_counter = beam.metrics.Metrics.counter("erasure", "records_removed")

    def process(self, path: str, newest, erased_ids):
        import fastavro

        deletions = privacy.Deletions(newest)
        with FileSystems.open(path) as f:
            reader = fastavro.reader(f)
            schema, codec = json.loads(reader.metadata["avro.schema"]), reader.codec
            records = list(reader)
        kept, removed, undecodable = kept_records(records, deletions, frozenset(erased_ids), self.codec)
        if removed:
            temporary = erasing_path(path)
            with FileSystems.create(temporary) as out:
                fastavro.writer(out, schema, kept, codec=codec)
            FileSystems.rename([temporary], [path])
            self.removed_counter.inc(removed)
        yield {"topic": topic_of(path), "path": path, "removed": removed, "undecodable": undecodable}


def summarise(outcomes: list[dict[str, Any]], users: int, erased: int) -> dict[str, Any]:
    """The run's report from every file's outcome."""
    removed: dict[str, int] = {}
    for outcome in outcomes:
        removed[outcome["topic"]] = removed.get(outcome["topic"], 0) + outcome["removed"]
    return {"users": users, "erased_impressions": erased,
            "files_scanned": len(outcomes), "files_rewritten": sum(1 for o in outcomes if o["removed"]),
            "removed": dict(sorted(removed.items())),
            "undecodable_kept": sum(o["undecodable"] for o in outcomes)}


@dataclass(frozen=True)
class ErasureOptions:
    archive: str = ""
    deletions: list[str] = field(default_factory=list)
    output: str = ""
    served_topic: str = topics.AD_SERVED
    topics_to_rewrite: str = ",".join(USER_TOPICS)


def run(argv: Sequence[str] | None = None, save_main_session: bool = True) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="pipelines.archive_erasure", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--archive", required=True, help="the archiver's root (a folder or file system URI)")
    parser.add_argument("--deletions", action="append", default=[],
                        help="Avro files (glob) of UserDeletion records, plain or archived; repeatable (default: "
                             f"the archive's {topics.PRIVACY_DELETIONS} files)")
    parser.add_argument("--output", required=True, help="folder for report.json")
    parser.add_argument("--served-topic", default=topics.AD_SERVED, help="archive folder of the served log")
    parser.add_argument("--topics", dest="topics_to_rewrite", default=",".join(USER_TOPICS),
                        help=f"comma-separated archive folders to rewrite (default {','.join(USER_TOPICS)})")
    options, beam_options = parse_options(parser, ErasureOptions, argv, save_main_session)
    deletion_files = matching_files(options.deletions or [topic_files_pattern(options.archive,
                                                                              topics.PRIVACY_DELETIONS)])
    rewrite = [t.strip() for t in options.topics_to_rewrite.split(",") if t.strip()]
    files = matching_files([topic_files_pattern(options.archive, t) for t in rewrite])
    served_files = matching_files([topic_files_pattern(options.archive, options.served_topic)])
    return erase(deletion_files, served_files, files, options.output, beam_options)


def erase(deletion_files: list[str], served_files: list[str], files: list[str], output: str,
          beam_options) -> dict[str, Any]:
    """Rewrite `files` without the records the deletions in `deletion_files` erase; the report (also written to
    <output>/report.json)."""
    out = output_folder(output)
    logging.info("archive erasure: %d deletion files, %d served files, %d files to check", len(deletion_files),
                 len(served_files), len(files))
    with beam.Pipeline(options=beam_options) as pipeline:
        newest = deletions_in_force(pipeline, "Deletions", deletion_files)
        served, _ = read_records(pipeline, "Served", served_files)
        erased = served | "Erased" >> ErasedImpressions(newest)
        outcomes = (pipeline | "Files" >> beam.Create(files)
                    | "Rewrite" >> beam.ParDo(RewriteFile(), newest, beam.pvalue.AsList(erased)))
        (pipeline | "One" >> beam.Create([None])
         | "Report" >> beam.Map(lambda _, outcome_list, users, erased_list: json.dumps(
             summarise(outcome_list, len(users), len(erased_list)), indent=2),
             outcome_list=beam.pvalue.AsList(outcomes), users=newest, erased_list=beam.pvalue.AsList(erased))
         | "WriteReport" >> beam.io.WriteToText(f"{out}/report", file_name_suffix=".json", shard_name_template=""))
    with FileSystems.open(f"{out}/report.json") as f:
        report = json.loads(f.read())
    logging.info("archive erasure: %s", report)
    return report


if __name__ == "__main__":
    run_as_main("pipelines.archive_erasure")
