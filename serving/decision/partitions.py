"""Broad ads partitioned by key, so a request reads only the entries that can match it.

A key is (location value, placement, language), each "*" when the ad does not constrain the attribute; an
ad has one entry per key its targeting allows (the cross product of its locations, placements and
languages: ~5 on the benchmark's shape). A request reads the segments of its own keys: each level of its
location and "*", its placement and "*", each of its languages and "*". That is exact for the three key
attributes: an ad allows a request's location, placement and language iff one of its keys is among the
request's keys.

An entry carries what the compiled scan (serving/decision/kernels.py) tests without touching the ad's row:
the row, `sig` (bits of the ad's closed-vocabulary attributes, see SigLayout), and where the terms of the
exact check (interests, exclusions and anything else; first in the ad's term list) start in the index's term
arena and how many there are (`count`).

Segments live in one set of entry arrays, each a slice [start, start + length) with spare capacity, ascending
by row. Updates are in place: an insert shifts the segment's tail by one (a segment that is full moves to
the end of the arrays with twice the room), a removal shifts it back; moved-out space is reclaimed by
`compact` once it is half of the arrays. Pure: no I/O."""
from __future__ import annotations

import itertools
from typing import Iterable, Mapping

import numpy as np

from core.errors import CapacityExceeded
from core.targeting import CLOSED_VOCABULARIES

KEY_ATTRIBUTES = ("location", "placement", "language")
SIG_ATTRIBUTES = tuple(sorted(CLOSED_VOCABULARIES))  # age_band, device, gender
ANY = "*"


class SigLayout:
    """Bit positions of the closed-vocabulary attributes in an entry's uint32 sig.

    Per attribute: one bit per vocabulary value and one "does not constrain it" bit. An ad's sig has the
    bits of the values it allows (or the unconstrained bit); a request's mask for the attribute has its
    values' bits and the unconstrained bit, so an ad passes iff it shares a bit with every mask. A value
    outside the vocabulary (not produced by compile_targeting, but the index does not rely on that) sets the
    unconstrained bit instead, and the exact check decides."""

    def __init__(self, vocabularies: Mapping[str, Iterable[str]] = CLOSED_VOCABULARIES):
        self.attributes = tuple(sorted(vocabularies))
        self.unconstrained: dict[str, int] = {}
        self.value_bit: dict[tuple[str, str], int] = {}
        bit = 0
        for attribute in self.attributes:
            self.unconstrained[attribute] = 1 << bit
            bit += 1
            for value in sorted(vocabularies[attribute]):
                self.value_bit[(attribute, value)] = 1 << bit
                bit += 1
        if bit > 31:
            raise CapacityExceeded(f"closed vocabularies need {bit} sig bits; 31 are available")

    def masks(self, terms: Mapping[str, frozenset[str]]) -> np.ndarray:
        out = np.empty(len(self.attributes), dtype=np.uint32)
        for i, attribute in enumerate(self.attributes):
            mask = self.unconstrained[attribute]
            for value in terms.get(attribute, ()):
                mask |= self.value_bit.get((attribute, value), 0)
            out[i] = mask
        return out


class Partitions:
    """Segments of entries by key; see the module docstring."""

    FIELDS = (("row", np.int32), ("sig", np.uint32), ("start", np.uint32), ("count", np.uint16))
    COMPACT_AFTER = 1024  # moved-out entry slots tolerated before compact() (and at most half of the slots)

    def __init__(self, capacity: int = 1024):
        self.segment_of: dict[tuple[str, str, str], int] = {}
        self.seg_start = np.zeros(64, dtype=np.int64)
        self.seg_length = np.zeros(64, dtype=np.int64)
        self.seg_capacity = np.zeros(64, dtype=np.int64)
        self.row = np.zeros(capacity, dtype=np.int32)
        self.sig = np.zeros(capacity, dtype=np.uint32)
        self.start = np.zeros(capacity, dtype=np.uint32)
        self.count = np.zeros(capacity, dtype=np.uint16)
        self.used = 0  # entry slots handed out (live entries, spare capacity and moved-out space)
        self.garbage = 0

    # --------------------------------------------------------------- keys
    @staticmethod
    def keys_of(include: Mapping[str, Iterable[str]]) -> list[tuple[str, str, str]]:
        """The keys an ad's targeting allows: the cross product of its key attributes' values ("*" if free)."""
        return list(itertools.product(*(sorted(include[a]) if a in include else [ANY] for a in KEY_ATTRIBUTES)))

    @staticmethod
    def request_keys(terms: Mapping[str, frozenset[str]]) -> Iterable[tuple[str, str, str]]:
        return itertools.product(*((*terms.get(a, ()), ANY) for a in KEY_ATTRIBUTES))

    def bounds(self, terms: Mapping[str, frozenset[str]]) -> np.ndarray:
        """[begin, end, ...] of the request's non-empty segments, for kernels.scan."""
        out = []
        for key in self.request_keys(terms):
            segment = self.segment_of.get(key)
            if segment is not None and self.seg_length[segment]:
                begin = int(self.seg_start[segment])
                out += (begin, begin + int(self.seg_length[segment]))
        return np.array(out, dtype=np.int64)

    def _segment(self, key: tuple[str, str, str]) -> int:
        segment = self.segment_of.get(key)
        if segment is None:
            segment = len(self.segment_of)
            self.segment_of[key] = segment
            if segment >= len(self.seg_start):
                for name in ("seg_start", "seg_length", "seg_capacity"):
                    old = getattr(self, name)
                    grown = np.zeros(2 * len(old), dtype=np.int64)
                    grown[: len(old)] = old
                    setattr(self, name, grown)
            self.seg_start[segment] = self.used
        return segment

    # --------------------------------------------------------------- bulk build
    @classmethod
    def from_entries(cls, segment_keys: list[tuple[str, str, str]], key_ids: np.ndarray, rows: np.ndarray,
                     sigs: np.ndarray, starts: np.ndarray, counts: np.ndarray) -> "Partitions":
        """Segments from entry columns (any order): key_ids index segment_keys."""
        order = np.lexsort((rows, key_ids))
        n = len(order)
        parts = cls(capacity=max(1024, n))
        parts.row[:n] = rows[order]
        parts.sig[:n] = sigs[order]
        parts.start[:n] = starts[order]
        parts.count[:n] = counts[order]
        parts.used = n
        sorted_keys = key_ids[order]
        del order
        boundaries = np.searchsorted(sorted_keys, np.arange(len(segment_keys) + 1))
        for key_id, key in enumerate(segment_keys):
            segment = parts._segment(key)
            parts.seg_start[segment] = boundaries[key_id]
            parts.seg_length[segment] = parts.seg_capacity[segment] = boundaries[key_id + 1] - boundaries[key_id]
        return parts

    # --------------------------------------------------------------- updates
    def _ensure(self, size: int) -> None:
        if size <= len(self.row):
            return
        capacity = max(size, 2 * len(self.row))
        for name, dtype in self.FIELDS:
            old = getattr(self, name)
            grown = np.zeros(capacity, dtype=dtype)
            grown[: self.used] = old[: self.used]
            setattr(self, name, grown)

    def add(self, key: tuple[str, str, str], row: int, sig: int, start: int, count: int) -> None:
        segment = self._segment(key)
        begin, length, capacity = (int(x[segment]) for x in (self.seg_start, self.seg_length, self.seg_capacity))
        if length == capacity:  # move the segment to the end with twice the room
            capacity = max(4, 2 * capacity)
            self._ensure(self.used + capacity)
            for name, _ in self.FIELDS:
                column = getattr(self, name)
                column[self.used: self.used + length] = column[begin: begin + length]
            self.garbage += int(self.seg_capacity[segment])
            begin = self.seg_start[segment] = self.used
            self.seg_capacity[segment] = capacity
            self.used += capacity
        at = begin + int(np.searchsorted(self.row[begin: begin + length], row))
        end = begin + length
        for name, value in (("row", row), ("sig", sig), ("start", start), ("count", count)):
            column = getattr(self, name)
            column[at + 1: end + 1] = column[at: end]  # numpy copies overlapping slices safely
            column[at] = value
        self.seg_length[segment] = length + 1

    def remove(self, key: tuple[str, str, str], row: int) -> None:
        segment = self.segment_of.get(key)
        if segment is None:
            return
        begin, length = int(self.seg_start[segment]), int(self.seg_length[segment])
        at = begin + int(np.searchsorted(self.row[begin: begin + length], row))
        end = begin + length
        if at >= end or self.row[at] != row:
            return
        for name, _ in self.FIELDS:
            column = getattr(self, name)
            column[at: end - 1] = column[at + 1: end]
        self.seg_length[segment] = length - 1
        if self.garbage > self.COMPACT_AFTER and 2 * self.garbage > self.used:
            self.compact()

    def compact(self) -> None:
        """Rewrite the segments back to back with a quarter spare each, dropping moved-out space."""
        segments = range(len(self.segment_of))
        lengths = self.seg_length[: len(self.segment_of)]
        capacities = np.maximum(4, lengths + lengths // 4)
        starts = np.concatenate(([0], np.cumsum(capacities)[:-1])).astype(np.int64)
        total = int(capacities.sum())
        for name, dtype in self.FIELDS:
            old = getattr(self, name)
            new = np.zeros(max(1024, total), dtype=dtype)
            for segment in segments:
                begin, length = int(self.seg_start[segment]), int(lengths[segment])
                new[starts[segment]: starts[segment] + length] = old[begin: begin + length]
            setattr(self, name, new)
        self.seg_start[: len(starts)] = starts
        self.seg_capacity[: len(capacities)] = capacities
        self.used, self.garbage = total, 0

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name, _ in self.FIELDS) + 3 * self.seg_start.nbytes
