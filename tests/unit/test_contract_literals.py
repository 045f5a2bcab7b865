"""Topic names, record types and Redis keys are said once: schemas/topics.py names every Kafka topic and the Avro
record type of its values, and streams/redis_keys.py builds every Redis key, so every other file of the project,
tests and their fixtures included, refers to them through those two modules (a renamed topic, record type or a
migrated key format is then one edit).

Read from the source (every tracked .py file outside schemas/ and streams/, parsed), a string literal fails here
when it
- is a topic name of schemas.topics.TOPICS, or a comma-separated list of them ("ad.served, ad.events");
- has no whitespace and holds a topic name as a whole token, a name derived from the topic ("{topic}|{key}",
  "{topic}-000.avro", "/{topic}/dt=", "topic={topic}"); prose (help texts, docstrings, log lines) has spaces
  and may name a topic;
- is a Redis key: it begins with a key prefix of streams.redis_keys ("fc:", "user:", ...) and has no whitespace,
  as the leading constant of an f-string does (f"fc:{user}").
The one exception is the key builders' own test, which states each key format as a literal on purpose.

A string literal that is exactly a topic's record type ("AdEvent", the `record_type` of a TopicSpec of TOPICS)
fails in every tracked .py file outside schemas/ and core/, streams/ included: it is derived from its topic,
schemas.topics.record_type(schemas.topics.AD_EVENTS). core/ is exempt because it sits below schemas in the
layering (tests/unit/test_layering.py) and may not import it; records of no topic ("PacerState", a job's state
schema) and prose that names a type are not record type literals."""
from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path
from typing import Callable

from schemas import topics
from streams import redis_keys

ROOT = Path(__file__).resolve().parents[2]
OWNERS = ("schemas/", "streams/")
RECORD_TYPE_OWNERS = ("schemas/", "core/")  # core may not import schemas (the layering)
# The key builders' test: each format written out, so a change to a builder shows up as the storage migration it is.
FORMAT_SPECS = frozenset({"tests/unit/test_redis_keys.py"})

TOPIC_CONSTANTS = {value: f"schemas.topics.{name}" for name, value in vars(topics).items()
                   if name.isupper() and isinstance(value, str) and value in topics.TOPICS_BY_NAME}
RECORD_TYPES = {spec.record_type: f"schemas.topics.record_type({TOPIC_CONSTANTS[spec.name]})"
                for spec in topics.TOPICS if spec.record_type}
# Every *_PREFIX of streams.redis_keys begins a key, except the prefixes of fields inside a hash.
FIELD_PREFIXES = frozenset({"PACING_MINUTE_PREFIX"})
KEY_PREFIXES = {value: f"streams.redis_keys.{name}" for name, value in vars(redis_keys).items()
                if name.endswith("_PREFIX") and name not in FIELD_PREFIXES}
TOPIC_TOKEN = re.compile(r"(?<![\w.])(" + "|".join(re.escape(name) for name in sorted(
    topics.TOPICS_BY_NAME, key=len, reverse=True)) + r")(?!\w)")


def _tracked_sources(owners: tuple[str, ...] = OWNERS, exempt: frozenset[str] = FORMAT_SPECS) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, capture_output=True, check=True)
    return [name for name in listed.stdout.decode().split("\0")
            if name and not name.startswith(owners) and name not in exempt and (ROOT / name).is_file()]


def contract_literal(text: str) -> str | None:
    """What `text` writes out that schemas.topics or streams.redis_keys owns, or None."""
    items = [item.strip() for item in text.split(",")]
    if all(item in topics.TOPICS_BY_NAME for item in items):
        return "topic " + ", ".join(TOPIC_CONSTANTS[item] for item in items)
    if re.search(r"\s", text):
        return None
    for prefix, constant in KEY_PREFIXES.items():
        if text.startswith(prefix):
            return f"Redis key built from {constant} (use the streams.redis_keys builder)"
    token = TOPIC_TOKEN.search(text)
    if token:
        return f"name derived from topic {TOPIC_CONSTANTS[token.group(1)]}"
    return None


def record_type_literal(text: str) -> str | None:
    """The derivation from schemas.topics of the record type `text` is exactly, or None."""
    derivation = RECORD_TYPES.get(text)
    return f"record type; use {derivation}" if derivation else None


def contract_literals(source: str, filename: str, rule: Callable[[str], str | None] = contract_literal) -> list[str]:
    """`filename:line: 'literal' is ...` for each string literal in `source` that `rule` flags."""
    hits = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            text = node.value if isinstance(node.value, str) else node.value.decode("latin-1")
            found = rule(text)
            if found:
                hits.append((node.lineno, f"{filename}:{node.lineno}: {text[:60]!r} is a {found}"))
    return [hit for _, hit in sorted(hits)]


def test_no_file_outside_schemas_and_streams_writes_a_topic_name_or_a_redis_key_as_a_literal():
    hits = [hit for name in _tracked_sources() for hit in contract_literals((ROOT / name).read_text(), name)]
    assert not hits, ("topic names and Redis keys written as literals; refer to them through schemas.topics and "
                      "streams.redis_keys:\n" + "\n".join(hits))


def test_no_file_outside_schemas_and_core_writes_a_record_type_as_a_literal():
    hits = [hit for name in _tracked_sources(RECORD_TYPE_OWNERS, frozenset())
            for hit in contract_literals((ROOT / name).read_text(), name, record_type_literal)]
    assert not hits, ("record types written as literals; derive each from its topic through "
                      "schemas.topics.record_type:\n" + "\n".join(hits))


def test_the_rule_flags_topic_names_derived_names_and_keys_but_not_prose():
    name, prefix = topics.AD_EVENTS, redis_keys.FREQUENCY_RECORD_PREFIX
    flagged = [name, f"{name}, {topics.AD_SERVED}", f"{name}-000.avro", f"/{name}/dt=", f"topic={name}",
               f"{topics.CDC_CAMPAIGNS}|7", prefix, f"{prefix}u-1", redis_keys.user_profile("{user}")]
    prose = [f"the {name} topic", f"{name}: ad 7 not indexed", f"{name}, campaigns -> counts", f"x{name}",
             f"{name}_total", "user: the id", "redis://user:pw@host:6379/0", redis_keys.pacing_minute_field(7)]
    assert [text for text in flagged if not contract_literal(text)] == []
    assert [text for text in prose if contract_literal(text)] == []


def test_a_literal_is_named_by_file_and_line():
    source = f"KEY = {redis_keys.audience_member('m')!r}\n\nTOPIC = {topics.AD_FEEDBACK!r}\n"
    assert [hit.split(" is ")[0] for hit in contract_literals(source, "x.py")] == [
        f"x.py:1: {redis_keys.audience_member('m')!r}", f"x.py:3: {topics.AD_FEEDBACK!r}"]


def test_the_record_type_rule_flags_every_topics_record_type_but_not_other_schemas_or_prose():
    ad_event = topics.record_type(topics.AD_EVENTS)
    flagged = [spec.record_type for spec in topics.TOPICS if spec.record_type]
    prose = ["PacerState", f"an {ad_event} record", f"{ad_event}s", ad_event.lower(), "", topics.AD_EVENTS]
    assert flagged and [text for text in flagged if not record_type_literal(text)] == []
    assert [text for text in prose if record_type_literal(text)] == []
    assert record_type_literal(ad_event) == "record type; use schemas.topics.record_type(schemas.topics.AD_EVENTS)"


def test_a_record_type_literal_is_named_by_file_and_line():
    record_type = topics.record_type(topics.AD_FEEDBACK)
    source = f"STATE = 'PacerState'\n\nTYPE = {record_type!r}\n"
    assert contract_literals(source, "x.py", record_type_literal) == [
        f"x.py:3: {record_type!r} is a record type; use schemas.topics.record_type(schemas.topics.AD_FEEDBACK)"]
