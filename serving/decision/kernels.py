"""Compiled (numba) kernels of the targeting index's broad-ad retrieval. Pure: arrays in, arrays out.

The partitions (serving/decision/partitions.py) hold, per key (location value, placement, language), the
entries of the broad ads whose targeting allows that key, ascending by row (= static-score order). An entry
is (row, sig, term start, term count): `sig` packs the ad's closed-vocabulary attributes (age band, gender,
device) as bits, with one "unconstrained" bit per attribute, and a flag saying whether the ad needs the exact
check of its remaining terms. `scan` reads the request's segments a row range at a time (best static scores
first), tests sig against the request's masks, collects the rows that need their remaining terms checked,
checks those against the request's hit table reading each row's term list from the term arena (prefetched a
few rows ahead: those reads are the cache misses that dominate), and stops once k rows matched."""
from __future__ import annotations

import numba as nb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

# Term kinds (the term_kind table of the index): what the exact check does with a term of a row.
KIND_KEY = 0  # an include term of a key attribute: satisfied by the segment the entry came from
KIND_EXCLUDED = 255  # an excluded term: a hit rejects the row
# 1..30: an include term of the attribute with this slot: a row constraining the slot needs a hit in it
MAX_SLOTS = 30
SIG_NEEDS_CHECK = np.uint32(1 << 31)  # the row's remaining terms must be checked
PREFETCH_AHEAD = 12


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
def _terms_pass(start: int, count: int, arena, term_kind, hit) -> bool:
    constrained = 0
    satisfied = 0
    for q in range(start, start + count):
        term = arena[q]
        kind = term_kind[term]
        if kind == KIND_KEY:
            continue
        if kind == KIND_EXCLUDED:
            if hit[term]:
                return False
            continue
        constrained |= 1 << kind
        if hit[term]:
            satisfied |= 1 << kind
    return constrained == satisfied


@nb.njit(cache=True, nogil=True)
def scan(bounds, entry_row, entry_sig, entry_start, entry_count, masks, arena, term_kind, hit,
         k: int, chunk_rows: int, row_limit: int, out, pending):
    """Rows of the entries in the segments `bounds` ([begin0, end0, begin1, end1, ...] into the entry arrays)
    that pass every sig mask and the exact check, ascending, deduplicated, at most the k smallest.

    masks: one uint32 per closed-vocabulary attribute (the request's value bits and the attribute's
    "unconstrained" bit); an entry passes when it shares a bit with each. A row range's matches are marked in
    a bitmap of the range (an ad read from two segments is marked twice) and read back in order. out and
    pending are scratch buffers of at least the total entries in the segments. Returns how many rows of out
    hold the result."""
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
            while i < end:
                row = entry_row[i]
                if row >= limit:
                    break
                sig = entry_sig[i]
                ok = True
                for m in range(masks.shape[0]):
                    if (sig & masks[m]) == 0:
                        ok = False
                        break
                if ok:
                    if sig & SIG_NEEDS_CHECK:
                        pending[waiting] = i
                        waiting += 1
                    else:
                        word = (row - base) >> 6
                        marks[word] |= np.uint64(1) << np.uint64((row - base) & 63)
                        low_word = min(low_word, word)
                        high_word = max(high_word, word)
                i += 1
            cursor[s] = i
        for j in range(waiting):
            if j + PREFETCH_AHEAD < waiting:  # every 64-byte line of that row's term list
                ahead = pending[j + PREFETCH_AHEAD]
                for q in range(entry_start[ahead], entry_start[ahead] + entry_count[ahead], 16):
                    _prefetch(arena, q)
            i = pending[j]
            if _terms_pass(entry_start[i], entry_count[i], arena, term_kind, hit):
                row = entry_row[i]
                word = (row - base) >> 6
                marks[word] |= np.uint64(1) << np.uint64((row - base) & 63)
                low_word = min(low_word, word)
                high_word = max(high_word, word)
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
def row_signatures(term_start, term_count, arena, sig_attribute, sig_bit, check, unconstrained, needs_check_flag):
    """Every row's sig (the bulk build's version of partitions.SigLayout.of_ad): per closed-vocabulary
    attribute the bits of the values it allows, or its unconstrained bit when the row does not constrain it
    or allows a value outside the vocabulary; plus needs_check_flag when a term needs the exact check."""
    rows = term_start.shape[0]
    attributes = unconstrained.shape[0]
    out = np.zeros(rows, np.uint32)
    bits = np.zeros(attributes, np.uint32)
    outside = np.zeros(attributes, np.bool_)
    for row in range(rows):
        bits[:] = 0
        outside[:] = False
        needs = False
        for q in range(term_start[row], term_start[row] + term_count[row]):
            term = arena[q]
            if check[term]:
                needs = True
            a = sig_attribute[term]
            if a >= 0:
                if sig_bit[term] == 0:
                    outside[a] = True
                bits[a] |= sig_bit[term]
        sig = needs_check_flag if needs else np.uint32(0)
        for a in range(attributes):
            sig |= unconstrained[a] if (outside[a] or bits[a] == 0) else bits[a]
        out[row] = sig
    return out
