"""Stable operator uids for a job's whole graph, so a savepoint taken by one build of a job restores into the next.

Flink matches the state in a savepoint to operators by uid. Without one, an operator's id is a hash of its
place in the graph, and any change upstream (one more operator, one less) moves every id after it; Flink then
refuses the restore, or with --allow-non-restored-state drops the state. The jobs pin the uid of each stateful
DataStream operator they create in code (`.uid(...)`, never changed once deployed). Every other transformation,
the SQL ones included, gets its uid here, before the job is submitted, from what the code names it:

- a Kafka or filesystem source or sink: its table's name (`source:spend_in`, `sink:billed_out`), so the
  offsets and the transactions of a sink survive any change of the SQL between them;
- anything else: its name without the planner's node number (`op:WindowAggregate`); where that name repeats,
  with the sources it reads from (`op:spend_in/Calc`, `sink:archive_in_ad.served/end`), and numbered in the
  order the job builds them where even that repeats (`op:events_in/Calc#2`). A change then moves only the
  uids of operators of the same name over the same sources.

Flink's own table.exec.uid.generation=ALWAYS numbers SQL operators by the planner's node counter instead, which
moves every uid after a statement that was added; a compiled plan would pin them, but a plan cannot hold the
DataStream parts these jobs are made of."""
from __future__ import annotations

import re
from collections import defaultdict

# Transformations that become no operator of their own (Flink keeps them as virtual nodes): no uid to give.
VIRTUAL = frozenset({"PartitionTransformation", "UnionTransformation", "SideOutputTransformation"})
SOURCES = frozenset({"SourceTransformation", "LegacySourceTransformation"})
SINKS = frozenset({"SinkTransformation", "LegacySinkTransformation"})
_PLANNER_NUMBER = re.compile(r"\[\d+\]|\$\d+")  # "Calc[12]", "*anonymous_datastream_source$2*"


def base_uid(kind: str, name: str) -> str:
    """The uid of a transformation of `kind` (its Java class's simple name) named `name`, before numbering."""
    plain = _plain(name)
    if kind in SOURCES:
        return f"source:{plain}"
    if kind in SINKS:
        return f"sink:{plain}"
    return f"op:{plain}"


def numbered(keys: list[str]) -> list[str]:
    """Each key as it is when it is unique, else with its rank among the equal ones (`op:Calc#2`)."""
    counts: dict[str, int] = defaultdict(int)
    for key in keys:
        counts[key] += 1
    seen: dict[str, int] = defaultdict(int)
    out = []
    for key in keys:
        seen[key] += 1
        out.append(key if counts[key] == 1 else f"{key}#{seen[key]}")
    return out


def _all_transformations(j_env) -> list:
    """Every transformation of the environment's graph, in the order the job created them."""
    by_id = {}
    for sink in j_env.getTransformations().toArray():
        for transformation in sink.getTransitivePredecessors().toArray():
            by_id[transformation.getId()] = transformation
    return [by_id[i] for i in sorted(by_id)]


def _plain(name: str) -> str:
    return _PLANNER_NUMBER.sub("", name).strip().strip("*")


def _sources_of(transformation) -> str:
    """The tables a transformation reads from, as one name (`events_in+campaigns_in`, sorted)."""
    names = {_plain(t.getName()) for t in transformation.getTransitivePredecessors().toArray()
             if t.getClass().getSimpleName() in SOURCES}
    return "+".join(sorted(names))


def qualified(keys: list[str], sources: list[str]) -> list[str]:
    """Each key as it is when it is unique, else with the sources its transformation reads (`op:a/Calc`)."""
    counts: dict[str, int] = defaultdict(int)
    for key in keys:
        counts[key] += 1
    out = []
    for key, read in zip(keys, sources):
        kind, _, name = key.partition(":")
        out.append(key if counts[key] == 1 or not read else f"{kind}:{read}/{name}")
    return out


def assign_stable_uids(env) -> dict[str, str]:
    """Give every transformation of `env` (a PyFlink StreamExecutionEnvironment, its job built) that has no uid
    its stable one; returns {uid: name} of every operator, the pinned ones included."""
    pending, named = [], {}
    for transformation in _all_transformations(env._j_stream_execution_environment):
        kind = transformation.getClass().getSimpleName()
        if kind in VIRTUAL:
            continue
        if transformation.getUid() is not None:
            named[transformation.getUid()] = transformation.getName()
        else:
            pending.append((transformation, base_uid(kind, transformation.getName())))
    keys = qualified([key for _, key in pending],
                     [_sources_of(t) if kind not in SOURCES else "" for t, kind in
                      ((t, t.getClass().getSimpleName()) for t, _ in pending)])
    for (transformation, _), uid in zip(pending, numbered(keys)):
        transformation.setUid(uid)
        named[uid] = transformation.getName()
    return named
