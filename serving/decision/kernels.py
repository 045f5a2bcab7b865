"""Compiled (numba) kernels of the targeting index's broad-ad retrieval. Pure: arrays in, arrays out.

The partitions (serving/decision/partitions.py) hold, per key (location value, placement, language), the
entries of the broad ads whose targeting allows that key, ascending by row (= static-score order). An entry
is (row, sig, check start, check count): `sig` packs the ad's closed-vocabulary attributes (age band, gender,
device) as bits, with one "unconstrained" bit per attribute, and a flag saying whether the ad needs the exact
check of its remaining terms. Those terms (interests, exclusions, anything the key and the sig bits do not
settle) come first in the row's term list, so the check reads only them: `check count` of them.

`scan` reads the request's segments a row range at a time (best static scores first), tests sig against the
request's masks without a branch per attribute, collects the rows that need the exact check, checks those,
and stops once k rows matched. The exact check is an OR over the row's check terms of a per-term word (see
`passes`), reading each row's terms from the term arena (prefetched for a batch of rows at once: those reads
are the cache misses that dominate)."""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

# The per-term words of the exact check. Each attribute the check decides has a slot s (0..MAX_SLOTS-1)
# and two bits: 2s "the row constrains it" (in the term's static word) and 2s+1 "the request carries one of
# the row's values" (in the word while a request that carries the term is served). An excluded term the
# request carries sets EXCLUDED_HIT. A row passes iff no EXCLUDED_HIT and every constrained slot is hit.
MAX_SLOTS = 15
CONSTRAINED_BITS = np.uint32(0x15555555)  # bit 2s of every slot
EXCLUDED_HIT = np.uint32(1 << 31)
SIG_NEEDS_CHECK = np.uint32(1 << 31)  # the row's check terms must be read
PREFETCH_BATCH = 64  # pending rows whose check terms are requested from memory together


def constrained_bit(slot: int) -> int:
    return 1 << (2 * slot)


def hit_bit(slot: int) -> int:
    return 1 << (2 * slot + 1)


@intrinsic
def _prefetch(typingctx, array, position):
    """A hint to load array[position] into the cache (LLVM's prefetch for read, high locality)."""
    signature = types.void(array, position)

    def codegen(context, builder, sig, args):
        array_type = sig.args[0]
        array_struct = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array_struct, [args[1]])
        byte_pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer.type, i32, i32, i32]), "llvm.prefetch.p0i8")
        builder.call(function, [byte_pointer, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


@nb.njit(cache=True, nogil=True)
def passes(start: int, count: int, arena, term_bits) -> bool:
    """The exact check of one row: OR the words of its check terms (no branch per term), then every
    constrained slot must be hit and no excluded term carried."""
    acc = np.uint32(0)
    for q in range(start, start + count):
        acc |= term_bits[arena[q]]
    constrained = acc & CONSTRAINED_BITS
    return (acc & EXCLUDED_HIT) == 0 and ((acc >> np.uint32(1)) & CONSTRAINED_BITS) == constrained


@nb.njit(cache=True, nogil=True)
def check_rows(rows, term_start, term_count, arena, term_bits, out) -> int:
    """The rows (ascending) whose whole term list passes the exact check, into out; returns how many. For the
    narrow ads, which have no partition entries: every term is read, key attributes included."""
    kept = 0
    for j in range(rows.shape[0]):
        row = rows[j]
        if passes(term_start[row], term_count[row], arena, term_bits):
            out[kept] = row
            kept += 1
    return kept


@nb.njit(cache=True, nogil=True)
def scan(bounds, entries, masks, terms, k: int, chunk_rows: int, row_limit: int, buffers):
    """Rows of the entries in the segments `bounds` ([begin0, end0, begin1, end1, ...] into the entry arrays)
    that pass every sig mask and the exact check, ascending, deduplicated, at most the k smallest.

    entries = (row, sig, start, count): the partitions' entry arrays. masks: one uint32 per closed-vocabulary
    attribute (the request's value bits and the attribute's "unconstrained" bit); an entry passes when it shares
    a bit with each. terms = (arena, term_bits): the term arena and the per-term words with the request's hits
    set (see `passes`). A row range's matches are marked in a bitmap of the range (an ad read from two segments
    is marked twice) and read back in order. buffers = (out, pending): scratch of at least the total entries in
    the segments. Returns how many rows of out hold the result. (Plain tuples: numba types them as fast as
    separate arrays, a named tuple it types in Python, slower per call.)"""
    entry_row, entry_sig, entry_start, entry_count = entries
    arena, term_bits = terms
    out, pending = buffers
    segments = bounds.shape[0] // 2
    cursor = np.empty(segments, np.int64)
    for s in range(segments):
        cursor[s] = bounds[2 * s]
    marks = np.zeros(chunk_rows // 64 + 1, np.uint64)
    found = 0
    base = 0
    while base < row_limit:
        limit = base + chunk_rows
        waiting = 0
        low_word = marks.shape[0]
        high_word = -1
        for s in range(segments):
            i = cursor[s]
            end = bounds[2 * s + 1]
            while i < end:  # no branch on the outcome: it is unpredictable, and a mispredicted branch costs more
                row = entry_row[i]
                if row >= limit:
                    break
                sig = entry_sig[i]
                ok = True
                for m in range(masks.shape[0]):
                    ok &= (sig & masks[m]) != 0
                check = np.int64(sig >> np.uint32(31))  # SIG_NEEDS_CHECK
                passed = np.int64(ok)
                pending[waiting] = i
                waiting += passed & check
                word = (row - base) >> 6
                marks[word] |= np.uint64(passed & (check ^ 1)) << np.uint64((row - base) & 63)
                i += 1
            if i > cursor[s]:
                low_word = min(low_word, (entry_row[cursor[s]] - base) >> 6)
                high_word = max(high_word, (entry_row[i - 1] - base) >> 6)
            cursor[s] = i
        for first in range(0, waiting, PREFETCH_BATCH):  # load a batch's check terms at once, then check them
            last = min(waiting, first + PREFETCH_BATCH)
            for j in range(first, last):
                i = pending[j]
                for q in range(entry_start[i], entry_start[i] + entry_count[i], 16):
                    _prefetch(arena, q)
                _prefetch(arena, entry_start[i] + entry_count[i] - 1)
            for j in range(first, last):
                i = pending[j]
                if passes(entry_start[i], entry_count[i], arena, term_bits):
                    row = entry_row[i]
                    marks[(row - base) >> 6] |= np.uint64(1) << np.uint64((row - base) & 63)
        for word in range(low_word, high_word + 1):
            bits = marks[word]
            while bits:
                out[found] = base + (word << 6) + trailing_zeros(bits)
                found += 1
                bits &= bits - np.uint64(1)
            marks[word] = 0
        if found >= k:
            return k
        base = limit
    return found


@nb.njit(cache=True, nogil=True)
def _outside(start: int, count: int, arena, sig_attribute, sig_bit, outside) -> None:
    """outside[a]: the row allows a value of closed-vocabulary attribute a that has no sig bit."""
    outside[:] = False
    for q in range(start, start + count):
        term = arena[q]
        a = sig_attribute[term]
        if a >= 0 and sig_bit[term] == 0:
            outside[a] = True


@nb.njit(cache=True, nogil=True)
def row_signatures(term_start, term_count, arena, sig_attribute, sig_bit, unconstrained):
    """Every row's sig without the needs-check flag (that comes from check_terms_first's counts): per
    closed-vocabulary attribute the bits of the values it allows (partitions.SigLayout), or its unconstrained
    bit when the row does not constrain it or allows a value outside the vocabulary. The index calls it for
    the bulk build and for each updated row."""
    rows = term_start.shape[0]
    attributes = unconstrained.shape[0]
    out = np.zeros(rows, np.uint32)
    bits = np.zeros(attributes, np.uint32)
    outside = np.zeros(attributes, np.bool_)
    for row in range(rows):
        bits[:] = 0
        _outside(term_start[row], term_count[row], arena, sig_attribute, sig_bit, outside)
        for q in range(term_start[row], term_start[row] + term_count[row]):
            term = arena[q]
            a = sig_attribute[term]
            if a >= 0:
                bits[a] |= sig_bit[term]
        sig = np.uint32(0)
        for a in range(attributes):
            sig |= unconstrained[a] if (outside[a] or bits[a] == 0) else bits[a]
        out[row] = sig
    return out


@nb.njit(cache=True, nogil=True)
def check_terms_first(term_start, term_count, arena, sig_attribute, sig_bit, always_checked, attributes: int):
    """Reorder each row's terms in place so the ones the exact check reads come first; returns how many
    per row (uint16). Checked: always_checked terms (excluded, or of an attribute neither a key nor a
    closed vocabulary), and every term of a closed-vocabulary attribute for which the row allows a value
    outside the vocabulary (the sig cannot decide that attribute, so the check needs all its values)."""
    rows = term_start.shape[0]
    counts = np.zeros(rows, np.uint16)
    outside = np.zeros(attributes, np.bool_)
    longest = int(term_count.max()) if rows else 0
    buffer = np.empty(longest, arena.dtype)
    for row in range(rows):
        start, count = term_start[row], term_count[row]
        _outside(start, count, arena, sig_attribute, sig_bit, outside)
        first, last = 0, count
        for q in range(start, start + count):
            term = arena[q]
            a = sig_attribute[term]
            if always_checked[term] or (a >= 0 and outside[a]):
                buffer[first] = term
                first += 1
            else:
                last -= 1
                buffer[last] = term
        arena[start: start + count] = buffer[:count]
        counts[row] = first
    return counts
