"""Growable numpy columns and a string arena: per-ad data without a Python object per ad."""
from __future__ import annotations

import numpy as np


class Column:
    """A numpy array that grows by doubling; `view` is the used prefix."""

    def __init__(self, dtype, width: int = 0, capacity: int = 1024, fill=0):
        self.dtype, self.width, self.fill = np.dtype(dtype), width, fill
        shape = (capacity, width) if width else (capacity,)
        self.data = np.full(shape, fill, dtype=self.dtype)

    def ensure(self, size: int) -> None:
        if size <= len(self.data):
            return
        capacity = max(size, 2 * len(self.data))
        shape = (capacity, self.width) if self.width else (capacity,)
        grown = np.full(shape, self.fill, dtype=self.dtype)
        grown[: len(self.data)] = self.data
        self.data = grown

    def shrink(self, size: int) -> None:
        self.data = self.data[:size].copy()

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


class StringArena:
    """Strings of many rows in one bytearray: an offset and a length per row (rewrites append)."""

    def __init__(self, capacity: int = 1024):
        self.buffer = bytearray()
        self.offsets = Column(np.int64, capacity=capacity)
        self.lengths = Column(np.uint16, capacity=capacity)

    def set(self, row: int, value: str) -> None:
        data = value.encode()
        if len(data) > 65535:
            raise ValueError("string longer than 65,535 bytes")
        self.offsets.ensure(row + 1)
        self.lengths.ensure(row + 1)
        self.offsets.data[row] = len(self.buffer)
        self.lengths.data[row] = len(data)
        self.buffer += data

    def get(self, row: int) -> str:
        start = int(self.offsets.data[row])
        return self.buffer[start: start + int(self.lengths.data[row])].decode()

    @property
    def nbytes(self) -> int:
        return len(self.buffer) + self.offsets.nbytes + self.lengths.nbytes


class IdMap:
    """External int64 id -> row without a dict entry per id: a sorted base array plus a small dict of later adds."""

    def __init__(self):
        self.keys = np.empty(0, dtype=np.int64)
        self.rows = np.empty(0, dtype=np.int32)
        self.recent: dict[int, int] = {}

    def bulk(self, ids: np.ndarray, rows: np.ndarray) -> None:
        order = np.argsort(ids, kind="stable")
        self.keys, self.rows = ids[order].astype(np.int64), rows[order].astype(np.int32)
        if len(self.keys) > 1 and np.any(self.keys[1:] == self.keys[:-1]):
            raise ValueError("duplicate ids")
        self.recent = {}

    def get(self, key: int) -> int | None:
        found = self.recent.get(key)
        if found is not None:
            return found
        i = int(np.searchsorted(self.keys, key))
        if i < len(self.keys) and self.keys[i] == key:
            return int(self.rows[i])
        return None

    def get_many(self, keys: np.ndarray) -> np.ndarray:
        """Rows of many ids at once (-1 where unknown)."""
        out = np.full(len(keys), -1, dtype=np.int32)
        if len(self.keys):
            i = np.searchsorted(self.keys, keys).clip(0, len(self.keys) - 1)
            hit = self.keys[i] == keys
            out[hit] = self.rows[i[hit]]
        if self.recent:
            for j in np.flatnonzero(out < 0):
                row = self.recent.get(int(keys[j]))
                if row is not None:
                    out[j] = row
        return out

    def put(self, key: int, row: int) -> None:
        if self.get(key) is None:
            self.recent[key] = row

    def __len__(self) -> int:
        return len(self.keys) + len(self.recent)

    @property
    def nbytes(self) -> int:
        return int(self.keys.nbytes + self.rows.nbytes) + 100 * len(self.recent)
