"""Training examples as the click model's trainer and evaluator read them: Avro container files of
TrainingExample records, the keep rate they were down-sampled at, and the train/validation split.

Owns the file format on the model's side (fastavro with the registry's TrainingExample schema) and the rules
that decide which examples the trainer learns from; never decides a label or a sample weight (core.training
does, for every join alike). The records become columns in serving.model.examples.ExampleTable."""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from core import training
from core.errors import AdserveError
from schemas import topics

TRAINING_EXAMPLE = topics.record_type(topics.TRAINING_EXAMPLES)


class ExamplesInvalid(AdserveError):
    """Training examples that cannot be trained on or evaluated as they are."""


def _schema():
    import fastavro

    from schemas.codec import default_registry, plain_timestamps

    return fastavro.parse_schema(plain_timestamps(default_registry().schema(TRAINING_EXAMPLE)))


def read_examples(path: Path) -> list[dict[str, Any]]:
    """The TrainingExample records of one Avro container file (resolved against the current schema)."""
    import fastavro

    try:
        with open(path, "rb") as f:
            return list(fastavro.reader(f, reader_schema=_schema()))
    except OSError as exc:
        raise ExamplesInvalid(f"cannot read training examples {path}: {exc.strerror or exc}") from exc
    except (ValueError, EOFError, fastavro.read.SchemaResolutionError) as exc:
        raise ExamplesInvalid(f"{path} is not an Avro file of TrainingExample records: {exc}") from exc


def write_examples(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """An Avro container file of TrainingExample records (tests, synthetic days)."""
    import fastavro

    with open(path, "wb") as f:
        fastavro.writer(f, _schema(), records, codec="deflate")


def truth_column(impression_ids: Sequence[str], truth: Mapping[str, float], what: str) -> np.ndarray:
    """The true probability of each impression from a simulated day's truth file (impression id -> p);
    ExamplesInvalid naming `what` when the file lacks any of them."""
    missing = [i for i in impression_ids if i not in truth]
    if missing:
        raise ExamplesInvalid(f"the {what} file lacks {len(missing):,} of {len(impression_ids):,} impressions "
                              f"(first: {missing[0]}); is it the same day's?")
    return np.array([truth[i] for i in impression_ids], dtype=np.float64)


def by_task(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(click examples, conversion examples); a record without a task (schema version 1) is a click example."""
    clicks, conversions = [], []
    for r in records:
        (conversions if r.get("task", training.CLICK) == training.CONVERSION else clicks).append(r)
    return clicks, conversions


def keep_rate_of(records: Sequence[dict[str, Any]]) -> float:
    """The keep rate w the negatives were down-sampled at, read from their sample weight (1 / w).
    1.0 when nothing was down-sampled; raises when the negatives disagree (use harmonise_keep_rate)."""
    weights = {round(float(r["sample_weight"]), 9) for r in by_task(records)[0] if r["label"] == 0}
    if not weights:
        return 1.0
    if len(weights) > 1:
        raise ExamplesInvalid(f"negatives carry different sample weights {sorted(weights)[:5]}: the examples were "
                              f"down-sampled at different keep rates")
    return 1.0 / weights.pop()


def harmonise_keep_rate(parts: Sequence[Sequence[dict[str, Any]]]) -> tuple[list[dict[str, Any]], float]:
    """Files down-sampled at different keep rates, brought to the smallest one: a negative kept at rate w_i
    is kept again only when core.training.keeps_negative says so at w_min, which (the rule being a hash
    threshold) is exactly the set a w_min join would have kept. Unweighted training then sees one population
    and the q correction applies with one w."""
    rates = [keep_rate_of(p) for p in parts]
    keep_rate = min(rates) if rates else 1.0
    merged: list[dict[str, Any]] = []
    for part, rate in zip(parts, rates):
        if rate == keep_rate:
            merged.extend(part)
            continue
        for r in part:
            if r["label"] == 1 or r.get("task", training.CLICK) == training.CONVERSION:  # never down-sampled
                merged.append(r)
            elif training.keeps_negative(r["impression_id"], keep_rate):
                merged.append({**r, "sample_weight": 1.0 / keep_rate})
    return merged, keep_rate


def validation_mask(request_ids: Sequence[str], share: float = 0.1) -> np.ndarray:
    """True for the examples of the validation split: a hash of the request id, so one request's slots stay
    on one side (they share the user and the context) and the split is the same in every run."""
    threshold = int(share * 2**32)
    return np.fromiter((zlib.crc32(r.encode()) < threshold for r in request_ids), dtype=bool,
                       count=len(request_ids))
