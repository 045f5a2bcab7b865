"""Side files a job reads at start (the budget job's traffic curves): from a local path, a file:// URL or an
object-storage URL (gs://, s3://, ...) through Beam's FileSystems, which PyFlink's workers already carry (gs://
and s3:// need Beam's gcp or aws extras on the worker).

A URI that was given must be read: a missing or unreadable one raises InvalidSettings naming the setting, so a
job fails at start instead of running on a silent fallback. Only an empty URI means "none"."""
from __future__ import annotations

from urllib.parse import unquote, urlparse

from core.errors import InvalidSettings

READ_CHUNK_BYTES = 1 << 20  # a compressed file of Beam's reads only in sized pieces


def read_side_file(uri: str, setting: str) -> bytes | None:
    """The bytes at `uri`, or None when `uri` is empty (no file configured).

    `setting` names the flag and environment variable the URI came from (e.g. "--curves / ADSERVE_CURVES"),
    for the error a user sees when the file cannot be read."""
    if not uri:
        return None
    from apache_beam.io.filesystems import FileSystems

    path = local_path(uri, setting)
    try:
        if not FileSystems.exists(path):
            raise InvalidSettings(f"{setting}: {uri} does not exist (give a readable local path, file:// or "
                                  f"object-storage URL, or leave it empty)")
        with FileSystems.open(path) as handle:  # compression by the name's suffix (.gz, .bz2), as Beam reads
            return b"".join(iter(lambda: handle.read(READ_CHUNK_BYTES), b""))
    except InvalidSettings:
        raise
    except Exception as exc:  # noqa: BLE001 - Beam's filesystems raise many types (unknown scheme, IOError,
        # missing extras, credentials); each means the configured file cannot be read, and the job must not start
        raise InvalidSettings(f"{setting}: cannot read {uri}: {type(exc).__name__}: {exc}") from exc


def local_path(uri: str, setting: str) -> str:
    """A file:// URL as the local path Beam's local filesystem reads (it knows no file:// scheme); any other URI
    as it is."""
    if not uri.startswith("file://"):
        return uri
    parsed = urlparse(uri)
    if parsed.netloc not in ("", "localhost"):
        raise InvalidSettings(f"{setting}: {uri}: a file:// URL names a file on this machine (file:///path), not on "
                              f"{parsed.netloc}")
    return unquote(parsed.path)
