"""`adserve users delete` and `adserve users apply-deletions`: a user's deletion request, and the daily job that
applies the requests to Redis and rewrites the archive without them (the shell around streams.user_deletions
and pipelines.archive_erasure; the rule is core.privacy's, the design in docs/storage.md)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import KafkaException

from core.errors import AdserveError
from infra.platform import PlatformSettings
from schemas import topics
from streams.endpoints import current

PORTS_HELP = "Platform ports come from ADSERVE_* variables (see `adserve up --help`)."
APPLY_HELP = """Applies the deletion requests (topic privacy.deletions) that no run has applied yet, then
commits them (consumer group adserve-user-deletions), so a failed run applies them again next time:

  Redis     the users' keys user:{ID} and fc:{ID} are deleted (one pipelined round trip).
  archive   pipelines.archive_erasure rewrites the archive's hourly files (ad.served, ad.events,
            ad.conversions, ad.feedback, training.examples) without every record the requests in force erase,
            and writes its report under --report-dir.

The streaming jobs apply a request on their own as they read it (training_join drops the user's examples,
the features job forgets the user's window). Run this at least daily (e.g. from cron): a request is erased
everywhere within a day of being made only if it is."""


def register(sub) -> None:
    u = sub.add_parser("users", help="user deletion: requests and the daily job that applies them")
    usub = u.add_subparsers(dest="action", required=True)
    d = usub.add_parser("delete", help="request that a user be forgotten (applied everywhere within a day)",
                        description="Produces a deletion request (topic privacy.deletions, compacted, keyed by the "
                                    "user id) and prints its request id. The training join and the features job "
                                    "apply it as they read it; `adserve users apply-deletions` (daily) removes the "
                                    "user's Redis keys and rewrites the archive without the user's records.",
                        epilog=PORTS_HELP)
    d.add_argument("user_id")
    d.add_argument("--reason", help="why the user asked (free text, kept with the request)")
    d.add_argument("--topic", default=topics.PRIVACY_DELETIONS, help=argparse.SUPPRESS)
    d.set_defaults(handler=cmd_users_delete)
    a = usub.add_parser("apply-deletions", help="apply pending deletion requests to Redis and the archive (daily)",
                        description=APPLY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter,
                        epilog=PORTS_HELP)
    a.add_argument("--archive", help="the archiver's root (default: ADSERVE_ARCHIVE_DIR or the platform's "
                                     "archive folder); a folder that does not exist is skipped")
    a.add_argument("--report-dir", type=Path, help="where the archive erasure's report goes (default: "
                                                   "<archive>/_erasure/<time>)")
    a.add_argument("--skip-archive", action="store_true", help="apply to Redis only")
    a.add_argument("--topic", default=topics.PRIVACY_DELETIONS, help=argparse.SUPPRESS)
    a.add_argument("--group-id", default=None, help=argparse.SUPPRESS)
    a.set_defaults(handler=cmd_users_apply_deletions)


def cmd_users_delete(args: argparse.Namespace) -> int:
    from core import privacy
    from core.errors import InvalidField
    from streams.user_deletions import request_deletion

    bootstrap = current().kafka.bootstrap_servers
    try:
        request = privacy.deletion_request(args.user_id, int(time.time() * 1000), str(uuid.uuid4()), args.reason)
    except InvalidField as exc:
        print(f"adserve users delete: {exc}", file=sys.stderr)
        return 2
    try:
        request_deletion(bootstrap, request, args.topic)
    except (KafkaException, AdserveError) as exc:
        print(f"adserve users delete: the request was not taken, nothing was requested: {exc}", file=sys.stderr)
        return 1
    print(f"deletion requested for user {request.user_id}: request id {request.request_id}; erased everywhere "
          f"within a day (by {_utc(privacy.erasure_due_ms(request))})")
    return 0


def cmd_users_apply_deletions(args: argparse.Namespace) -> int:
    from redis.exceptions import RedisError

    try:
        return _apply_deletions(args)
    except (KafkaException, AdserveError, RedisError, OSError) as exc:
        print(f"adserve users apply-deletions: stopped, the pending requests stay pending: {exc}", file=sys.stderr)
        return 1


def _apply_deletions(args: argparse.Namespace) -> int:
    from core import privacy
    from streams import user_deletions

    settings, endpoints = PlatformSettings.from_env(), current()
    now_ms = int(time.time() * 1000)
    pending = user_deletions.PendingDeletions(endpoints.kafka.bootstrap_servers, args.topic,
                                              args.group_id or user_deletions.APPLIER_GROUP)
    try:
        requests = pending.read()
        removed_keys = user_deletions.erase_from_redis(endpoints.redis.url, requests)
        print(f"{len(requests)} pending request(s): {removed_keys} Redis key(s) removed"
              + (f"; {pending.corrupt} undecodable record(s) skipped" if pending.corrupt else ""))
        late = privacy.overdue(requests, (), now_ms)
        if late:
            print(f"{len(late)} request(s) applied past their day: oldest {late[0].request_id} of "
                  f"{_utc(late[0].requested_at_ms)}", file=sys.stderr)
        if not args.skip_archive:
            archive = args.archive or os.environ.get("ADSERVE_ARCHIVE_DIR") or str(settings.home / "archive")
            if "://" in archive or Path(archive).is_dir():
                report = erase_archive(endpoints.kafka.bootstrap_servers, args.topic, archive,
                                       args.report_dir or Path(archive) / "_erasure" / str(now_ms))
                print(f"archive {archive}: {report['files_rewritten']} file(s) rewritten, records removed "
                      f"{json.dumps(report['removed'])}")
            else:
                print(f"no archive at {archive}: nothing to rewrite")
        pending.commit()
    finally:
        pending.close()
    return 0


def erase_archive(bootstrap: str, topic: str, archive: str, report_dir: Path) -> dict:
    """Every request in force (the compacted topic) written to a file, and the archive's erasure run on it."""
    import tempfile

    import fastavro

    from pipelines import archive_erasure
    from schemas.codec import AvroCodec, plain_timestamps
    from streams.user_deletions import all_requests

    requests = all_requests(bootstrap, topic)
    if not requests:
        return {"users": 0, "erased_impressions": 0, "files_scanned": 0, "files_rewritten": 0, "removed": {},
                "undecodable_kept": 0}
    schema = plain_timestamps(AvroCodec().registry.schema(topics.record_type(topics.PRIVACY_DELETIONS)))
    with tempfile.TemporaryDirectory(prefix="adserve-deletions-") as folder:
        deletions = Path(folder) / "deletions.avro"
        with open(deletions, "wb") as f:
            fastavro.writer(f, schema, [r.as_record() for r in requests])
        return archive_erasure.run(["--archive", archive, "--deletions", str(deletions), "--output",
                                    str(report_dir)], save_main_session=False)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
