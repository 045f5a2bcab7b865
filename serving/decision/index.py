"""The in-memory targeting index: exactly the ads whose expression a request satisfies.

Structure (why: docs/decision-engine.md). Ads live in rows of numpy columns,
never as a Python object per ad. Rows are assigned in descending static-score
order when the index is built (`build`), so "the best K by static score" is
"the K smallest row numbers". Postings are pyroaring bitmaps of rows:
  include[(attribute, value)]  ads that allow the value
  exclude[(attribute, value)]  ads that exclude the value
An ad satisfies attribute A for a request with values V iff it does not
constrain A, or it allows some value of V; it fails if the request carries
any value it excludes.

Retrieval: "narrow" ads (those targeting custom audiences, core.targeting.NARROW_ATTRIBUTES) are seeded
from the request's own audience postings and checked completely (every term of the row, by the compiled
check the broad ads use), so no broad ad can crowd them out. "Broad" ads are also kept in partitions by
(location value, placement, language) (serving/decision/partitions.py): a request reads only the entries of
its own keys, a row range at a time in static-score order, in a compiled scan (serving/decision/kernels.py)
that tests the closed-vocabulary attributes from bits inside each entry and checks the remaining terms
(interests, exclusions) of the rows that pass against the term arena, where each row keeps those terms
first; it stops once K broad ads matched, so long broad lists are never read to the end.

Updates are in place and versioned: an older or equal version never
overwrites a newer one. A changed static score keeps its row until the index
is rebuilt (rows reflect static scores as of the last build); new ads append
rows. Each row's click-rate estimate, its Beta posterior and its quality term are replaced whenever an
ad-feature snapshot arrives (`apply_learned`) and then outlive edits of the ad's record; a new ad starts from
its record's ctr_prior with a weak posterior. Retrievals and updates may come from several threads: they take
one lock.
Pure: no I/O, no clock."""
from __future__ import annotations

import array
import threading
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import numpy as np
from pyroaring import BitMap

from core.arrays import distinct_keys
from core.errors import CapacityExceeded, InvalidArgument
from core.exploration import weak_posterior
from core.targeting import NARROW_ATTRIBUTES, Targeting
from serving.decision import kernels
from serving.decision.columns import Column, IdMap, RowTable, StringArena
from serving.decision.partitions import ANY, KEY_ATTRIBUTES, Partitions, SigLayout

BID_TYPES = ("CPM", "CPC", "CPA")
BID_TYPE_CODE = {name: code for code, name in enumerate(BID_TYPES)}
DEFAULT_K = 10_000
CHUNK_ROWS = 1 << 17  # broad ads are scanned 131,072 rows at a time; retrieval stops after the range that reached K
MAX_TERM_ARENA = (1 << 32) - 1  # an entry keeps its row's term-arena start as uint32
MAX_TERMS_PER_ROW = (1 << 16) - 1  # a row's term count is a uint16 (the API allows far fewer: MAX_TERMS_PER_AD)


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


@dataclass(frozen=True)
class AdColumns:
    """The ads of a bulk build (TargetingIndex.from_columns), one value per ad, rows in descending static-score
    order. Without `ctr_alpha` and `ctr_beta`, each ad's posterior is the weak prior at its ctr_prior
    (core.exploration.weak_posterior)."""

    ad_id: np.ndarray
    campaign_id: np.ndarray
    version: np.ndarray
    bid_type: np.ndarray
    bid_micros: np.ndarray
    quality_micros: np.ndarray
    static_score: np.ndarray
    ctr_prior: np.ndarray
    embedding: np.ndarray
    exclusion_category: np.ndarray | None = None
    ctr_alpha: np.ndarray | None = None
    ctr_beta: np.ndarray | None = None


@dataclass(frozen=True)
class TargetingColumns:
    """The targeting of a bulk build, row-major: row r has term ids terms_flat[start_r : start_r +
    term_counts[r]], each an index into term_keys ((attribute, value, excluded))."""

    term_keys: Sequence[tuple[str, str, bool]]
    term_counts: np.ndarray
    terms_flat: np.ndarray


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


def _with_any(rows: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row, value) pairs of the wanted rows, sorted by row, with value -1 ("*") for a row that has none."""
    keep = wanted[rows]
    rows, values = rows[keep], values[keep]
    has = np.zeros(len(wanted), dtype=np.bool_)
    has[rows] = True
    missing = np.flatnonzero(wanted & ~has)
    rows = np.concatenate((rows, missing))
    values = np.concatenate((values, np.full(len(missing), -1, dtype=np.int64)))
    order = np.argsort(rows, kind="stable")
    return rows[order], values[order]


def _cross(left_rows: np.ndarray, right_rows: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of a left and a right element of the same row (both sorted by row, every row on both
    sides): the pairs' rows and, per pair, the left and the right element's position."""
    right_count = np.bincount(right_rows, minlength=n)
    right_first = np.concatenate(([0], np.cumsum(right_count)[:-1]))
    repeat = right_count[left_rows]
    left = np.repeat(np.arange(len(left_rows)), repeat)
    rows = left_rows[left]
    within = np.arange(len(left)) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    return rows, left, right_first[rows] + within


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
                             "ctr_prior": (np.float32,), "ctr_alpha": (np.float32,), "ctr_beta": (np.float32,),
                             "exclusion_category": (np.int32,), "embedding": (np.float16, (embedding_dim,))},
                            capacity)
        self.campaign_id = self.hot.field("campaign_id")
        self.bid_type = self.hot.field("bid_type")
        self.bid_micros = self.hot.field("bid_micros")
        self.quality_micros = self.hot.field("quality_micros")
        self.static_score = self.hot.field("static_score")
        self.ctr_prior = self.hot.field("ctr_prior")
        # the Beta posterior of ctr_prior (its mean), which the exploration slice samples from (core.exploration)
        self.ctr_alpha = self.hot.field("ctr_alpha")
        self.ctr_beta = self.hot.field("ctr_beta")
        self.exclusion_category = self.hot.field("exclusion_category")
        self.embedding = self.hot.field("embedding")
        # rows whose ctr_prior, posterior and quality came from an ad-feature snapshot (apply_learned): an update
        # of the ad's record keeps them, since serving.ads carries no learned estimate
        self.learned = Column(np.bool_, capacity=capacity)
        self.strings = StringArena(capacity)  # creative_ref + "\n" + landing_url
        self.term_start = Column(np.int64, capacity=capacity)
        self.term_count = Column(np.uint16, capacity=capacity)
        self.term_arena = Column(np.uint32, capacity=capacity * 16)
        self.term_arena_used = 0
        self.terms = _Terms()
        self.postings: list[BitMap] = []  # by term id (include and exclude terms alike)
        self.alive = BitMap()
        self.narrow = BitMap()
        # Broad ads by key, and what the compiled scan's exact check needs per term id (kernels.passes): its
        # word (the constrained bit of its attribute's slot, plus the hit bit while a request carries it) and
        # the bits a request carrying it sets.
        self.partitions = Partitions(capacity)
        self.sig_layout = SigLayout()
        self.term_bits = Column(np.uint32, capacity=256)
        self.hit_bits = Column(np.uint32, capacity=256)
        self.slots: dict[str, int] = {}
        # Per term id, what decides whether the exact check reads it (kernels.check_terms_first) and its bit in
        # the sig (kernels.row_signatures): one rule for the bulk build and for updates.
        self.term_sig_attribute = Column(np.int8, capacity=256, fill=-1)  # its closed-vocabulary attribute
        self.term_sig_bit = Column(np.uint32, capacity=256)  # its value's sig bit (0: outside the vocabulary)
        self.term_always_checked = Column(np.bool_, capacity=256)  # excluded, or neither a key nor in the sig
        self._unconstrained = np.array([self.sig_layout.unconstrained[a] for a in self.sig_layout.attributes],
                                       dtype=np.uint32)
        # The hit bits are set in the shared per-term words while one request is scanned, and the compiled scan
        # releases the GIL: a second thread's request waits here instead of reading the first one's hits, and an
        # update waits instead of moving the words or the entries under the scan (a grown word array would keep
        # the scanning request's hits for good).
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ terms
    def _term_id(self, key: tuple[str, str, bool]) -> int:
        term = self.terms.ids.get(key)
        if term is None:
            term = self.terms.id_of(key)
            self._set_bits(term, key)
        return term

    def _set_bits(self, term: int, key: tuple[str, str, bool]) -> None:
        attribute, value, excluded = key
        for column in (self.term_bits, self.hit_bits, self.term_sig_attribute, self.term_sig_bit,
                       self.term_always_checked):
            column.ensure(term + 1)
        layout = self.sig_layout
        if excluded or (attribute not in KEY_ATTRIBUTES and attribute not in layout.attributes):
            self.term_always_checked.data[term] = True
        elif attribute in layout.attributes:
            self.term_sig_attribute.data[term] = layout.attributes.index(attribute)
            self.term_sig_bit.data[term] = layout.value_bit.get((attribute, value), 0)
        if excluded:
            self.hit_bits.data[term] = kernels.EXCLUDED_HIT
        else:  # key terms too: the broad check never reads them (their segment settles them), the narrow one does
            slot = self.slots.get(attribute)
            if slot is None:
                slot = self.slots[attribute] = len(self.slots)
                if slot >= kernels.MAX_SLOTS:
                    raise CapacityExceeded(f"more than {kernels.MAX_SLOTS} targeting attributes")
            self.term_bits.data[term] = kernels.constrained_bit(slot)
            self.hit_bits.data[term] = kernels.hit_bit(slot)

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
    def from_columns(cls, ads: AdColumns, targeting: TargetingColumns) -> "TargetingIndex":
        """Bulk build from columns (millions of ads), rows already in descending static-score order.

        A uint32 terms_flat becomes the index's term arena without a copy, and each row's terms are reordered
        within the row (the exact check's terms first)."""
        ad_id, embedding, ctr_alpha, ctr_beta = ads.ad_id, ads.embedding, ads.ctr_alpha, ads.ctr_beta
        term_keys, term_counts, terms_flat = targeting.term_keys, targeting.term_counts, targeting.terms_flat
        n = len(ad_id)
        index = cls(embedding.shape[1], capacity=max(1024, n))
        index.size = n
        for column, values in ((index.ad_id, ad_id), (index.campaign_id, ads.campaign_id),
                               (index.version, ads.version), (index.bid_type, ads.bid_type),
                               (index.bid_micros, ads.bid_micros), (index.quality_micros, ads.quality_micros),
                               (index.static_score, ads.static_score), (index.ctr_prior, ads.ctr_prior),
                               (index.embedding, embedding)):
            column.data[:n] = values
        if ads.exclusion_category is not None:
            index.exclusion_category.data[:n] = ads.exclusion_category
        if (ctr_alpha is None) != (ctr_beta is None):
            raise InvalidArgument("ctr_alpha and ctr_beta: give both (a Beta posterior) or neither")
        if ctr_alpha is None:
            ctr_alpha, ctr_beta = weak_posterior(index.ctr_prior.data[:n])
        index.ctr_alpha.data[:n] = ctr_alpha
        index.ctr_beta.data[:n] = ctr_beta
        index.ids.bulk(ad_id, np.arange(n, dtype=np.int32))
        for key in term_keys:
            index._term_id(key)
        terms_flat = np.ascontiguousarray(terms_flat, dtype=np.uint32)
        if n and int(np.max(term_counts)) > MAX_TERMS_PER_ROW:
            row = int(np.argmax(term_counts))
            raise CapacityExceeded(f"ad {int(ad_id[row])} has {int(term_counts[row]):,} targeting terms: a row holds "
                                   f"at most {MAX_TERMS_PER_ROW:,} (uint16)")
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
        index.alive = BitMap(range(n))
        index.narrow = BitMap.union(BitMap(), *(index.postings[term] for term, (attribute, _, excluded)
                                                 in enumerate(term_keys)
                                                 if attribute in NARROW_ATTRIBUTES and not excluded))
        for bitmap in (*index.postings, index.alive, index.narrow):
            bitmap.run_optimize()
        index._partition_bulk(term_keys, term_counts, terms_flat)
        return index

    def _partition_bulk(self, term_keys: Sequence[tuple[str, str, bool]], term_counts: np.ndarray,
                        terms_flat: np.ndarray) -> None:
        """Entries of every broad row at once (from_columns): the same entries _index adds one by one."""
        n = self.size
        if self.term_arena_used > MAX_TERM_ARENA:
            raise CapacityExceeded("term arena beyond 2**32 terms: too many ads for one index")
        key_attribute = np.array([KEY_ATTRIBUTES.index(attribute) if attribute in KEY_ATTRIBUTES and not excluded
                                  else -1 for attribute, _, excluded in term_keys], dtype=np.int8)
        sigs, check_counts = self._check_layout(0, n)
        broad = np.ones(n, dtype=np.bool_)
        broad[_rows(self.narrow)] = False
        rows_flat = np.repeat(np.arange(n, dtype=np.int64), term_counts)
        attribute_of = key_attribute[terms_flat]
        rows: np.ndarray | None = None
        values: list[np.ndarray] = []  # per key attribute, each entry's term id (-1: "*")
        for a in range(len(KEY_ATTRIBUTES)):
            chosen = attribute_of == a
            a_rows, a_values = _with_any(rows_flat[chosen], terms_flat[chosen].astype(np.int64), broad)
            if rows is None:
                rows, values = a_rows, [a_values]
            else:
                rows, taken, other = _cross(rows, a_rows, n)
                values = [v[taken] for v in values] + [a_values[other]]
        del rows_flat, attribute_of
        key_terms, key_ids = distinct_keys(values)  # per key, each attribute's term id (-1: "*")
        segment_keys = [tuple(ANY if term < 0 else term_keys[term][1] for term in key) for key in key_terms]
        rows32 = rows.astype(np.int32)
        self.partitions = Partitions.from_entries(
            segment_keys, key_ids.astype(np.int64), rows32, sigs[rows], self.term_start.data[rows].astype(np.uint32),
            check_counts[rows])

    # ---------------------------------------------------------------- updates
    def upsert(self, record: AdRecord) -> bool:
        """Apply a record if its version is newer than what the index holds; True if applied. Safe beside
        retrievals on other threads (it waits for a running scan)."""
        with self._lock:
            return self._upsert(record)

    def _upsert(self, record: AdRecord) -> bool:
        if not record.removed and record.targeting.term_count() > MAX_TERMS_PER_ROW:  # before anything is written
            raise CapacityExceeded(f"ad {record.ad_id} has {record.targeting.term_count():,} targeting terms: a row "
                                   f"holds at most {MAX_TERMS_PER_ROW:,} (uint16)")
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
                self.static_score, self.ctr_prior, self.ctr_alpha, self.ctr_beta, self.exclusion_category,
                self.embedding, self.term_start, self.term_count, self.learned)

    def _write(self, row: int, r: AdRecord) -> None:
        self.ad_id.data[row] = r.ad_id
        self.campaign_id.data[row] = r.campaign_id
        self.version.data[row] = r.version
        self.bid_type.data[row] = BID_TYPE_CODE[r.bid_type.upper()]
        self.bid_micros.data[row] = r.bid_micros
        self.static_score.data[row] = r.static_score
        if not self.learned.data[row]:  # a snapshot's estimates outlive an edit of the ad (apply_learned)
            self.quality_micros.data[row] = r.quality_micros
            self.ctr_prior.data[row] = r.ctr_prior
            alpha, beta = weak_posterior(np.float32(r.ctr_prior))
            self.ctr_alpha.data[row], self.ctr_beta.data[row] = alpha, beta
        self.exclusion_category.data[row] = r.exclusion_category
        if len(r.embedding):
            self.embedding.data[row] = r.embedding
        self.strings.set(row, f"{r.creative_ref}\n{r.landing_url}")

    def _check_layout(self, begin: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """For rows begin..end-1 (their terms in the arena): reorder each row's terms so the ones the exact check
        reads come first, and return the rows' sigs (with the needs-check flag) and check-term counts."""
        n = len(self.terms.keys)
        tables = (self.term_sig_attribute.data[:n], self.term_sig_bit.data[:n])
        starts, counts = self.term_start.data[begin:end], self.term_count.data[begin:end]
        arena = self.term_arena.data
        sigs = kernels.row_signatures(starts, counts, arena, *tables, self._unconstrained)
        check_counts = kernels.check_terms_first(starts, counts, arena, *tables, self.term_always_checked.data[:n],
                                                 len(self.sig_layout.attributes))
        sigs[check_counts > 0] |= kernels.SIG_NEEDS_CHECK
        return sigs, check_counts

    def _index(self, row: int, targeting: Targeting) -> None:
        keys = [(a, v, True) for a, vs in targeting.exclude.items() for v in vs]
        keys += [(a, v, False) for a, vs in targeting.include.items() for v in vs]
        term_ids = [self._term_id(k) for k in keys]
        while len(self.postings) < len(self.terms.keys):
            self.postings.append(BitMap())
        for term in term_ids:
            self.postings[term].add(row)
        self.alive.add(row)
        if targeting.narrow:
            self.narrow.add(row)
        start = self.term_arena_used
        if start + len(term_ids) > MAX_TERM_ARENA:
            raise CapacityExceeded("term arena beyond 2**32 terms: compact or rebuild the index")
        self.term_arena.ensure(start + len(term_ids))
        self.term_arena.data[start: start + len(term_ids)] = term_ids
        self.term_arena_used += len(term_ids)
        self.term_start.data[row] = start
        self.term_count.data[row] = len(term_ids)
        if not targeting.narrow:
            sigs, check_counts = self._check_layout(row, row + 1)
            for key in Partitions.keys_of(targeting.include):
                self.partitions.add(key, row, int(sigs[0]), start, int(check_counts[0]))

    def _unindex(self, row: int) -> None:
        start, count = int(self.term_start.data[row]), int(self.term_count.data[row])
        if row in self.alive and row not in self.narrow:
            include: dict[str, set[str]] = {}
            for term in self.term_arena.data[start: start + count]:
                attribute, value, excluded = self.terms.keys[int(term)]
                if attribute in KEY_ATTRIBUTES and not excluded:
                    include.setdefault(attribute, set()).add(value)
            for key in Partitions.keys_of(include):
                self.partitions.remove(key, row)
        for term in self.term_arena.data[start: start + count]:
            self.postings[int(term)].discard(row)
        self.alive.discard(row)
        self.narrow.discard(row)
        self.term_count.data[row] = 0

    # ------------------------------------------------------------ learned estimates
    def apply_learned(self, ad_ids: np.ndarray, ctr_prior: np.ndarray, ctr_alpha: np.ndarray, ctr_beta: np.ndarray,
                      quality_micros: np.ndarray) -> int:
        """Set the click-rate estimate, its Beta posterior and the quality term of these ads (an ad-feature
        snapshot's columns, one value per id); ids the index does not hold are ignored. Vectorised: one id lookup
        for all, one write per column. Those rows keep these values through later updates of the ads' records,
        until the next snapshot. Returns how many rows changed."""
        ids = np.asarray(ad_ids, dtype=np.int64).reshape(-1)
        values = {"ctr_prior": ctr_prior, "ctr_alpha": ctr_alpha, "ctr_beta": ctr_beta,
                  "quality_micros": quality_micros}
        arrays = {name: np.asarray(v, dtype=np.float64).reshape(-1) for name, v in values.items()}
        for name, array in arrays.items():
            if len(array) != len(ids):
                raise InvalidArgument(f"{name}: {len(array)} values for {len(ids)} ad ids")
            if not np.isfinite(array).all():
                raise InvalidArgument(f"{name}: not finite for ad {int(ids[~np.isfinite(array)][0])}")
        prior, alpha, beta = arrays["ctr_prior"], arrays["ctr_alpha"], arrays["ctr_beta"]
        for name, bad in (("ctr_prior", (prior < 0) | (prior > 1)), ("ctr_alpha", alpha <= 0),
                          ("ctr_beta", beta <= 0)):
            if bad.any():
                raise InvalidArgument(f"{name}: {arrays[name][bad][0]} for ad {int(ids[bad][0])} "
                                      f"({'a rate in [0, 1]' if name == 'ctr_prior' else 'above 0'})")
        quality = np.clip(np.rint(arrays["quality_micros"]), np.iinfo(np.int32).min, np.iinfo(np.int32).max)
        with self._lock:
            rows = self.ids.get_many(ids)
            held = rows >= 0
            rows = rows[held]
            new = {"ctr_prior": prior[held].astype(np.float32), "ctr_alpha": alpha[held].astype(np.float32),
                   "ctr_beta": beta[held].astype(np.float32), "quality_micros": quality[held].astype(np.int32)}
            changed = np.zeros(len(rows), dtype=bool)
            for name, column in (("ctr_prior", self.ctr_prior), ("ctr_alpha", self.ctr_alpha),
                                 ("ctr_beta", self.ctr_beta), ("quality_micros", self.quality_micros)):
                changed |= column.data[rows] != new[name]
                column.data[rows] = new[name]
            self.learned.data[rows] = True
        return int(len(np.unique(rows[changed])))

    # -------------------------------------------------------------- retrieval
    def _posting(self, attribute: str, value: str, excluded: bool = False) -> BitMap | None:
        term = self.terms.ids.get((attribute, value, excluded))
        return None if term is None else self.postings[term]

    def _narrow_seeds(self, terms: Mapping[str, frozenset[str]]) -> np.ndarray:
        """Narrow rows sharing an audience with the request (only they can match it), ascending."""
        seeds = [p for a in NARROW_ATTRIBUTES for p in (self._posting(a, v) for v in terms.get(a, ()))
                 if p is not None]
        if not seeds:
            return np.empty(0, dtype=np.int32)
        return _rows(BitMap.union(*seeds) & self.narrow)

    def _request_hits(self, terms: Mapping[str, frozenset[str]]) -> np.ndarray:
        """Ids of the terms (included and excluded) the request carries."""
        ids = self.terms.ids
        return np.array([t for t in (ids.get((a, v, x)) for a, vs in terms.items() for v in vs
                                     for x in (False, True)) if t is not None], dtype=np.int64)

    def retrieve(self, terms: Mapping[str, frozenset[str]], k: int = DEFAULT_K) -> np.ndarray:
        """Matching rows, ascending (best static score first), as int32.

        Every matching narrow ad (its seeds checked completely: each of its terms, by the same per-term words
        as the broad check) plus the best k matching broad ads (the compiled scan over the request's
        segments)."""
        seeds = self._narrow_seeds(terms)
        bounds = self.partitions.bounds(terms) if k > 0 else np.empty(0, dtype=np.int64)
        if not len(seeds) and not len(bounds):
            return np.empty(0, dtype=np.int32)
        hits = self._request_hits(terms)
        masks = self.sig_layout.masks(terms)
        size = int((bounds[1::2] - bounds[0::2]).sum())
        broad = np.empty(size, dtype=np.int32)
        narrow = np.empty(len(seeds), dtype=np.int32)
        with self._lock:
            words, hit_bits = self.term_bits.data, self.hit_bits.data[hits]
            words[hits] |= hit_bits
            try:
                kept = kernels.check_rows(seeds, self.term_start.data, self.term_count.data, self.term_arena.data,
                                          words, narrow) if len(seeds) else 0
                partitions = self.partitions
                entries = (partitions.row, partitions.sig, partitions.start, partitions.count)
                found = kernels.scan(bounds, entries, masks, (self.term_arena.data, words), k, CHUNK_ROWS, self.size,
                                     (broad, np.empty(size, dtype=np.int64))) if size else 0
            finally:
                words[hits] &= ~hit_bits
        broad, narrow = broad[:found], narrow[:kept]
        if not kept:
            return broad
        # narrow rows are never in the partitions, so never among the broad rows: merged without a sort
        return np.insert(broad, np.searchsorted(broad, narrow), narrow)

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
        bitmaps = sum(len(b.serialize()) for b in (*self.postings, self.alive, self.narrow))
        return {"columns": columns, "postings": bitmaps, "term_arena": self.term_arena.nbytes,
                "strings": self.strings.nbytes, "id_map": self.ids.nbytes, "partitions": self.partitions.nbytes,
                "term_tables": sum(c.nbytes for c in (self.term_bits, self.hit_bits, self.term_sig_attribute,
                                                       self.term_sig_bit, self.term_always_checked))}
