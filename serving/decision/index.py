"""The in-memory targeting index: exactly the ads whose expression a request satisfies.

Structure (why: docs/decision-engine.md). Ads live in rows of numpy columns,
never as a Python object per ad. Rows are assigned in descending static-score
order when the index is built (`build`), so "the best K by static score" is
"the K smallest row numbers". Postings are pyroaring bitmaps of rows:
  include[(attribute, value)]  ads that allow the value
  constrained[attribute]       ads that constrain the attribute at all
  exclude[(attribute, value)]  ads that exclude the value
An ad satisfies attribute A for a request with values V iff it does not
constrain A, or it allows some value of V; it fails if the request carries
any value it excludes.

Retrieval evaluates those set operations on a candidate bitmap that starts
small: "narrow" ads (those targeting custom audiences, core.targeting.
NARROW_ATTRIBUTES) are seeded from the request's own audience postings and
always evaluated completely; "broad" ads are evaluated chunk by chunk of rows
(best static scores first) and retrieval stops once K of them matched, so
long broad lists are never read to the end, and no broad ad can crowd out a
narrow one. For the low-cardinality attributes the set "rows satisfying the
attribute for these request values" is kept in a bounded LRU cache, so a
request mostly intersects ready bitmaps in C.

Updates are in place and versioned: an older or equal version never
overwrites a newer one. A changed static score keeps its row until the next
`compact()` (rows reflect static scores as of the last build); new ads append
rows. Pure: no I/O, no clock."""
from __future__ import annotations

import array
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
from pyroaring import BitMap

from core.targeting import NARROW_ATTRIBUTES, Targeting
from serving.decision.columns import Column, IdMap, RowTable, StringArena

BID_TYPES = ("CPM", "CPC", "CPA")
BID_TYPE_CODE = {name: code for code, name in enumerate(BID_TYPES)}
DEFAULT_K = 10_000
# Attributes in the order retrieval applies them: the most selective first on typical traffic,
# interests (many values per request) last when the candidate set is already small.
EVALUATION_ORDER = ("placement", "location", "language", "device", "age_band", "gender", "interest", "audience")
# Attributes with few values: the set of ads satisfying "attribute has value v" (ads that allow v, plus ads
# that do not constrain the attribute) is kept per value, so a request intersects a handful of ready bitmaps
# in one C-level call. For locations this holds for countries; regions and cities add their own postings.
SATISFIED_CACHED = ("placement", "language", "device", "age_band", "gender", "location")
SATISFIED_CACHE_ENTRIES = 256  # at 10 M ads a dense entry is ~1.25 MB: at most ~320 MB, counted in memory_bytes
CHUNK_ROWS = 1 << 21  # broad ads are evaluated 2 M rows (32 roaring containers) at a time


@dataclass
class AdRecord:
    """What the index keeps of one serving.ads record."""

    ad_id: int
    campaign_id: int
    version: int
    bid_type: str
    bid_micros: int
    quality_micros: int
    static_score: float
    targeting: Targeting
    creative_ref: str = ""
    landing_url: str = ""
    ctr_prior: float = 0.01
    embedding: Sequence[float] = ()
    exclusion_category: int = 0  # competitive-exclusion category (0: none)
    removed: bool = False


@dataclass
class _Terms:
    """term key -> id, and id -> key (keys are (attribute, value, excluded))."""

    ids: dict[tuple[str, str, bool], int] = field(default_factory=dict)
    keys: list[tuple[str, str, bool]] = field(default_factory=list)

    def id_of(self, key: tuple[str, str, bool]) -> int:
        term = self.ids.get(key)
        if term is None:
            term = len(self.keys)
            self.ids[key] = term
            self.keys.append(key)
        return term


def _bitmap(rows: np.ndarray) -> BitMap:
    return BitMap(array.array("I", np.ascontiguousarray(rows, dtype=np.uint32).tobytes()))


def _rows(bitmap: BitMap) -> np.ndarray:
    return np.frombuffer(bitmap.to_array(), dtype=np.uint32).astype(np.int32)


class TargetingIndex:
    """Ads in rows, targeting postings in bitmaps; see the module docstring."""

    def __init__(self, embedding_dim: int = 8, capacity: int = 1024):
        self.embedding_dim = embedding_dim
        self.size = 0  # rows allocated
        self.ids = IdMap()
        self.ad_id = Column(np.int64, capacity=capacity)
        self.version = Column(np.int64, capacity=capacity, fill=-1)
        # What filters and the pre-ranker read per candidate, stored row by row (see RowTable).
        self.hot = RowTable({"campaign_id": (np.int64,), "bid_micros": (np.int64,), "bid_type": (np.int8,),
                             "quality_micros": (np.int32,), "static_score": (np.float32,),
                             "ctr_prior": (np.float32,), "exclusion_category": (np.int32,),
                             "embedding": (np.float16, (embedding_dim,))}, capacity)
        self.campaign_id = self.hot.field("campaign_id")
        self.bid_type = self.hot.field("bid_type")
        self.bid_micros = self.hot.field("bid_micros")
        self.quality_micros = self.hot.field("quality_micros")
        self.static_score = self.hot.field("static_score")
        self.ctr_prior = self.hot.field("ctr_prior")
        self.exclusion_category = self.hot.field("exclusion_category")
        self.embedding = self.hot.field("embedding")
        self.strings = StringArena(capacity)  # creative_ref + "\n" + landing_url
        self.term_start = Column(np.int64, capacity=capacity)
        self.term_count = Column(np.uint16, capacity=capacity)
        self.term_arena = Column(np.uint32, capacity=capacity * 16)
        self.term_arena_used = 0
        self.terms = _Terms()
        self.postings: list[BitMap] = []  # by term id (include and exclude terms alike)
        self.constrained: dict[str, BitMap] = {}
        self.alive = BitMap()
        self.narrow = BitMap()
        # (attribute, request values) -> rows satisfying the attribute for them (rows that do not constrain
        # it, or allow one of the values); least recently used first, kept current by every update
        self.satisfied: OrderedDict[tuple[str, frozenset[str]], BitMap] = OrderedDict()

    # ------------------------------------------------------------------ build
    @classmethod
    def build(cls, records: Iterable[AdRecord], embedding_dim: int = 8) -> "TargetingIndex":
        """An index of these ads, rows in descending static-score order."""
        live = sorted((r for r in records if not r.removed), key=lambda r: (-r.static_score, r.ad_id))
        index = cls(embedding_dim, capacity=max(1024, len(live)))
        for record in live:
            index._append(record)
        return index

    @classmethod
    def from_columns(cls, *, ad_id: np.ndarray, campaign_id: np.ndarray, version: np.ndarray, bid_type: np.ndarray,
                     bid_micros: np.ndarray, quality_micros: np.ndarray, static_score: np.ndarray,
                     ctr_prior: np.ndarray, embedding: np.ndarray, term_keys: Sequence[tuple[str, str, bool]],
                     term_counts: np.ndarray, terms_flat: np.ndarray,
                     exclusion_category: np.ndarray | None = None) -> "TargetingIndex":
        """Bulk build from columns (millions of ads), rows already in descending static-score order.

        Targeting comes row-major: row r has term ids terms_flat[start_r : start_r + term_counts[r]],
        each an index into term_keys ((attribute, value, excluded))."""
        n = len(ad_id)
        index = cls(embedding.shape[1], capacity=max(1024, n))
        index.size = n
        for column, values in ((index.ad_id, ad_id), (index.campaign_id, campaign_id), (index.version, version),
                               (index.bid_type, bid_type), (index.bid_micros, bid_micros),
                               (index.quality_micros, quality_micros), (index.static_score, static_score),
                               (index.ctr_prior, ctr_prior), (index.embedding, embedding)):
            column.data[:n] = values
        if exclusion_category is not None:
            index.exclusion_category.data[:n] = exclusion_category
        index.ids.bulk(ad_id, np.arange(n, dtype=np.int32))
        for key in term_keys:
            index.terms.id_of(key)
        terms_flat = np.ascontiguousarray(terms_flat, dtype=np.uint32)
        index.term_count.data[:n] = term_counts
        index.term_start.data[:n] = np.concatenate(([0], np.cumsum(term_counts, dtype=np.int64)[:-1]))
        index.term_arena.data = terms_flat
        index.term_arena_used = len(terms_flat)
        order = np.argsort(terms_flat, kind="stable")  # rows stay ascending within a term
        rows_by_term = np.repeat(np.arange(n, dtype=np.uint32), term_counts)[order]
        boundaries = np.searchsorted(terms_flat[order], np.arange(len(term_keys) + 1, dtype=np.uint32))
        del order
        index.postings = [_bitmap(rows_by_term[boundaries[t]: boundaries[t + 1]]) for t in range(len(term_keys))]
        del rows_by_term
        by_attribute: dict[str, list[BitMap]] = {}
        for term, (attribute, _, excluded) in enumerate(term_keys):
            if not excluded:
                by_attribute.setdefault(attribute, []).append(index.postings[term])
        index.constrained = {a: BitMap.union(*maps) for a, maps in by_attribute.items()}
        index.alive = BitMap(range(n))
        for attribute in NARROW_ATTRIBUTES:
            index.narrow |= index.constrained.get(attribute, BitMap())
        for bitmap in (*index.postings, *index.constrained.values(), index.alive, index.narrow):
            bitmap.run_optimize()
        return index

    # ---------------------------------------------------------------- updates
    def upsert(self, record: AdRecord) -> bool:
        """Apply a record if its version is newer than what the index holds; True if applied."""
        row = self.ids.get(record.ad_id)
        if row is not None and record.version <= self.version.data[row]:
            return False
        if record.removed:
            if row is not None:
                self._unindex(row)
                self.version.data[row] = record.version
            else:  # remember the tombstone's version so an older add cannot resurrect the ad
                row = self._append(record, index_terms=False)
            return True
        if row is None:
            self._append(record)
        else:
            self._unindex(row)
            self._write(row, record)
            self._index(row, record.targeting)
        return True

    def _append(self, record: AdRecord, index_terms: bool = True) -> int:
        row = self.size
        self.size += 1
        for column in self._row_columns():
            column.ensure(self.size)
        self.ids.put(record.ad_id, row)
        self._write(row, record)
        if index_terms and not record.removed:
            self._index(row, record.targeting)
        return row

    def _row_columns(self) -> tuple[Column, ...]:
        return (self.ad_id, self.campaign_id, self.version, self.bid_type, self.bid_micros, self.quality_micros,
                self.static_score, self.ctr_prior, self.exclusion_category, self.embedding, self.term_start,
                self.term_count)

    def _write(self, row: int, r: AdRecord) -> None:
        self.ad_id.data[row] = r.ad_id
        self.campaign_id.data[row] = r.campaign_id
        self.version.data[row] = r.version
        self.bid_type.data[row] = BID_TYPE_CODE[r.bid_type.upper()]
        self.bid_micros.data[row] = r.bid_micros
        self.quality_micros.data[row] = r.quality_micros
        self.static_score.data[row] = r.static_score
        self.ctr_prior.data[row] = r.ctr_prior
        self.exclusion_category.data[row] = r.exclusion_category
        if len(r.embedding):
            self.embedding.data[row] = r.embedding
        self.strings.set(row, f"{r.creative_ref}\n{r.landing_url}")

    def _index(self, row: int, targeting: Targeting) -> None:
        keys = [(a, v, False) for a, vs in targeting.include.items() for v in vs]
        keys += [(a, v, True) for a, vs in targeting.exclude.items() for v in vs]
        term_ids = [self.terms.id_of(k) for k in keys]
        while len(self.postings) < len(self.terms.keys):
            self.postings.append(BitMap())
        for term in term_ids:
            self.postings[term].add(row)
        for attribute in targeting.include:
            self.constrained.setdefault(attribute, BitMap()).add(row)
        self.alive.add(row)
        if targeting.narrow:
            self.narrow.add(row)
        for (attribute, values), rows in self.satisfied.items():
            allowed = targeting.include.get(attribute)
            if allowed is None or not allowed.isdisjoint(values):
                rows.add(row)
        start = self.term_arena_used
        self.term_arena.ensure(start + len(term_ids))
        self.term_arena.data[start: start + len(term_ids)] = term_ids
        self.term_arena_used += len(term_ids)
        self.term_start.data[row] = start
        self.term_count.data[row] = len(term_ids)

    def _unindex(self, row: int) -> None:
        start, count = int(self.term_start.data[row]), int(self.term_count.data[row])
        for term in self.term_arena.data[start: start + count]:
            self.postings[int(term)].discard(row)
        for bitmap in self.constrained.values():
            bitmap.discard(row)
        self.alive.discard(row)
        self.narrow.discard(row)
        for rows in self.satisfied.values():
            rows.discard(row)
        self.term_count.data[row] = 0

    # -------------------------------------------------------------- retrieval
    def _posting(self, attribute: str, value: str, excluded: bool = False) -> BitMap | None:
        term = self.terms.ids.get((attribute, value, excluded))
        return None if term is None else self.postings[term]

    def _satisfied(self, attribute: str, values: frozenset[str]) -> BitMap:
        """Rows satisfying the attribute for these request values (LRU-cached): rows that do not constrain
        it, or allow one of the values."""
        key = (attribute, values)
        rows = self.satisfied.get(key)
        if rows is not None:
            self.satisfied.move_to_end(key)
            return rows
        parts = [self.alive - self.constrained.get(attribute, BitMap())]
        parts += [p for p in (self._posting(attribute, v) for v in values) if p is not None]
        rows = BitMap.union(*parts) if len(parts) > 1 else parts[0]
        rows.run_optimize()
        self.satisfied[key] = rows
        while len(self.satisfied) > SATISFIED_CACHE_ENTRIES:
            self.satisfied.popitem(last=False)
        return rows

    def _fast_sets(self, terms: Mapping[str, frozenset[str]]) -> tuple[list[BitMap], set[str]]:
        """Ready bitmaps for the low-cardinality attributes of a request, and the attributes they cover."""
        sets = [self._satisfied(a, terms.get(a, frozenset())) for a in SATISFIED_CACHED if a in self.constrained]
        return sets, {a for a in SATISFIED_CACHED if a in self.constrained}

    def _apply_rest(self, candidates: BitMap, terms: Mapping[str, frozenset[str]], covered: set[str]) -> BitMap:
        for attribute in EVALUATION_ORDER:
            if not candidates:
                return candidates
            constrained = self.constrained.get(attribute)
            if attribute in covered or constrained is None:
                continue
            allowed = [p for p in (self._posting(attribute, v) for v in terms.get(attribute, ())) if p is not None]
            kept = candidates - constrained
            if allowed:
                kept |= BitMap.union(*(candidates & p for p in allowed))
            candidates = kept
        return self._drop_excluded(candidates, terms)

    def _drop_excluded(self, candidates: BitMap, terms: Mapping[str, frozenset[str]]) -> BitMap:
        for attribute, values in terms.items():
            for value in values:
                banned = self._posting(attribute, value, excluded=True)
                if banned is not None and candidates:
                    candidates -= banned
        return candidates

    def retrieve_bitmap(self, terms: Mapping[str, frozenset[str]], k: int = DEFAULT_K) -> BitMap:
        """Rows of every matching narrow ad and of the best k matching broad ads (by static score)."""
        result = BitMap()
        # Narrow ads: seeded from the request's own audience postings, always read completely.
        for attribute in NARROW_ATTRIBUTES:
            seeds = [p for p in (self._posting(attribute, v) for v in terms.get(attribute, ())) if p is not None]
            if seeds:
                result |= self._apply_rest(BitMap.union(*seeds) & self.narrow, terms, covered={attribute})
        # Broad ads, a chunk of rows at a time (rows are in static-score order): the ready low-cardinality
        # sets intersected in C, smallest first, then the remaining attributes on what is left; stop once
        # k matched.
        fast, covered = self._fast_sets(terms)
        fast.sort(key=len)
        broad_found = BitMap()
        for begin in range(0, self.size, CHUNK_ROWS):
            chunk = BitMap(range(begin, min(self.size, begin + CHUNK_ROWS)))
            for rows in fast:
                chunk &= rows
                if not chunk:
                    break
            chunk = chunk - self.narrow if fast else chunk & self.alive - self.narrow
            broad_found |= self._apply_rest(chunk, terms, covered)
            if len(broad_found) >= k:
                break
        if len(broad_found) > k:
            broad_found = broad_found & BitMap(range(0, broad_found[k]))
        return result | broad_found

    def retrieve(self, terms: Mapping[str, frozenset[str]], k: int = DEFAULT_K) -> np.ndarray:
        """Matching rows, ascending (best static score first), as int32."""
        return _rows(self.retrieve_bitmap(terms, k))

    # ---------------------------------------------------------------- access
    def row_of(self, ad_id: int) -> int | None:
        row = self.ids.get(ad_id)
        return row if row is not None and row in self.alive else None

    def creative(self, row: int) -> tuple[str, str]:
        creative_ref, _, landing_url = self.strings.get(row).partition("\n")
        return creative_ref, landing_url

    def __len__(self) -> int:
        return len(self.alive)

    def memory_bytes(self) -> dict[str, int]:
        """Bytes held, by part: numpy columns, bitmaps (serialized size), term arena, strings, id map."""
        columns = sum(c.nbytes for c in self._row_columns()) + self.hot.nbytes
        bitmaps = sum(len(b.serialize()) for b in (*self.postings, *self.constrained.values(), self.alive,
                                                   self.narrow))
        cache = sum(len(b.serialize()) for b in self.satisfied.values())
        return {"columns": columns, "postings": bitmaps, "term_arena": self.term_arena.nbytes,
                "strings": self.strings.nbytes, "id_map": self.ids.nbytes, "satisfied_cache": cache}
