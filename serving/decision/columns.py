"""Growable numpy columns and a string arena: per-ad data without a Python object per ad."""
from __future__ import annotations

import numpy as np

from core.errors import CapacityExceeded, InvalidArgument


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
            raise CapacityExceeded("a string column holds at most 65,535 bytes per value")
        self.offsets.ensure(row + 1)
        self.lengths.ensure(row + 1)
        self.offsets.data[row] = len(self.buffer)
        self.lengths.data[row] = len(data)
        self.buffer += data

    def bulk(self, values: list[str]) -> None:
        """Rows 0..len(values)-1 at once (an empty arena; bulk builds)."""
        encoded = [v.encode() for v in values]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        if len(lengths) and lengths.max() > 65535:
            raise CapacityExceeded("a string column holds at most 65,535 bytes per value")
        self.offsets.ensure(len(values))
        self.lengths.ensure(len(values))
        self.offsets.data[:len(values)] = np.concatenate(([0], np.cumsum(lengths)[:-1])) if len(values) else []
        self.lengths.data[:len(values)] = lengths
        self.buffer = bytearray(b"".join(encoded))

    def get(self, row: int) -> str:
        start = int(self.offsets.data[row])
        return self.buffer[start: start + int(self.lengths.data[row])].decode()

    @property
    def nbytes(self) -> int:
        return len(self.buffer) + self.offsets.nbytes + self.lengths.nbytes


class IdMap:
    """External int64 id -> row without a dict entry per id.

    While the ids are dense (database sequences: the largest id at most 4x the
    count), a direct-address int32 array answers with one memory access;
    otherwise a sorted array (binary search) plus a small dict of later adds."""

    DENSITY = 4
    SLACK = 1024

    def __init__(self):
        self.count = 0
        self.direct: np.ndarray | None = np.full(0, -1, dtype=np.int32)
        self.keys = np.empty(0, dtype=np.int64)
        self.rows = np.empty(0, dtype=np.int32)
        self.recent: dict[int, int] = {}

    def _dense_enough(self, max_key: int, count: int) -> bool:
        return max_key <= self.DENSITY * count + self.SLACK

    def bulk(self, ids: np.ndarray, rows: np.ndarray) -> None:
        ids, rows = np.asarray(ids, dtype=np.int64), np.asarray(rows, dtype=np.int32)
        if len(np.unique(ids)) != len(ids):
            raise InvalidArgument("duplicate ids in a bulk id map")
        self.count, self.recent = len(ids), {}
        if not len(ids) or (ids.min() >= 0 and self._dense_enough(int(ids.max()), len(ids))):
            self.direct = np.full(int(ids.max()) + 1 if len(ids) else 0, -1, dtype=np.int32)
            self.direct[ids] = rows
            self.keys, self.rows = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int32)
        else:
            order = np.argsort(ids, kind="stable")
            self.direct, self.keys, self.rows = None, ids[order], rows[order]

    def get(self, key: int) -> int | None:
        if self.direct is not None:
            row = int(self.direct[key]) if 0 <= key < len(self.direct) else -1
            return row if row >= 0 else None
        found = self.recent.get(key)
        if found is not None:
            return found
        i = int(np.searchsorted(self.keys, key))
        return int(self.rows[i]) if i < len(self.keys) and self.keys[i] == key else None

    def get_many(self, keys: np.ndarray) -> np.ndarray:
        """Rows of many ids at once (-1 where unknown)."""
        keys = np.asarray(keys, dtype=np.int64)
        if self.direct is not None:
            inside = (keys >= 0) & (keys < len(self.direct))
            out = np.full(len(keys), -1, dtype=np.int32)
            out[inside] = self.direct[keys[inside]]
            return out
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
        """Map a new id (an id already present keeps its row)."""
        if self.get(key) is not None:
            return
        if self.direct is not None:
            if key >= 0 and self._dense_enough(key, self.count + 1):
                if key >= len(self.direct):
                    grown = np.full(max(key + 1, 2 * len(self.direct)), -1, dtype=np.int32)
                    grown[: len(self.direct)] = self.direct
                    self.direct = grown
                self.direct[key] = row
                self.count += 1
                return
            present = np.flatnonzero(self.direct >= 0)  # ids turned sparse: leave direct addressing
            self.keys, self.rows, self.direct = present.astype(np.int64), self.direct[present], None
        self.recent[key] = row
        self.count += 1

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        direct = 0 if self.direct is None else int(self.direct.nbytes)
        return int(self.keys.nbytes + self.rows.nbytes) + direct + 100 * len(self.recent)


class RowTable:
    """Several per-row fields stored together (one numpy structured array, packed).

    The fields a request reads together for the same rows (a candidate's bid,
    CTR prior, quality, ...) then share cache lines: the first field read for a
    row brings the others with it. Each field is exposed as a column-like
    object whose `data` is a view of the field."""

    def __init__(self, fields: dict[str, tuple], capacity: int = 1024):
        self.dtype = np.dtype([(name, spec[0], spec[1]) if len(spec) > 1 and spec[1] else (name, spec[0])
                               for name, spec in fields.items()])
        self.fills = {name: (spec[2] if len(spec) > 2 else 0) for name, spec in fields.items()}
        self.array = self._blank(capacity)

    def _blank(self, capacity: int) -> np.ndarray:
        array = np.zeros(capacity, dtype=self.dtype)
        for name, fill in self.fills.items():
            if fill:
                array[name] = fill
        return array

    def ensure(self, size: int) -> None:
        if size <= len(self.array):
            return
        grown = self._blank(max(size, 2 * len(self.array)))
        grown[: len(self.array)] = self.array
        self.array = grown

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The records of these rows as a compact structured copy (a byte-row take: numpy's
        structured fancy indexing is ~10x slower)."""
        raw = self.array.view(np.uint8).reshape(len(self.array), self.dtype.itemsize)
        return np.take(raw, rows, axis=0).view(self.dtype).reshape(-1)

    def field(self, name: str) -> "FieldColumn":
        return FieldColumn(self, name)

    @property
    def nbytes(self) -> int:
        return int(self.array.nbytes)


class FieldColumn:
    """One field of a RowTable, used like a Column."""

    def __init__(self, table: RowTable, name: str):
        self.table, self.name = table, name

    @property
    def data(self) -> np.ndarray:
        return self.table.array[self.name]

    def ensure(self, size: int) -> None:
        self.table.ensure(size)

    @property
    def nbytes(self) -> int:
        return 0  # counted once, by the table
