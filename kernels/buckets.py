"""External sort of (row, column) entries: spill to row-range buckets, then sort a bucket.

Used by the table converter (``ooc_lowrank.io.tables``, kind ``interactions``).  The kernels
are O(n) counting sorts plus short per-row sorts, instead of an O(n log n) sort of 64-bit keys
(about 6x faster at a few million entries here); a bucket with long rows (16 entries or more
per row on average) is sorted by counting sorts only (:func:`radix_sort_pairs`: the column's
digits, then the row).  NumPy twins live in ``tests/test_tables.py`` (``naive_bucket_csr``,
stable lexsorts, argsorts by bucket).
"""

from __future__ import annotations

import numpy as np

from ._numba import njit
from ._prefetch import prefetch

#: The merge of ``bucket_csr`` prefetches the record this many entries ahead (its gather of
#: values in sorted order reads the bucket at random).
_AHEAD = 16

#: Rows with at most this many entries are sorted by insertion sort, longer ones by mergesort.
_SHORT_ROW = 32


@njit
def _partition(bucket_of, items, counts):
    """``counts[b]``: how many of ``items`` fall in bucket ``bucket_of[item]``; returns the
    first slot of every bucket in a partition of them (bucket 0 first)."""
    nb = counts.size
    for b in range(nb):
        counts[b] = 0
    for i in range(items.size):
        counts[bucket_of[items[i]]] += 1
    nxt = np.empty(nb, np.int64)
    acc = 0
    for b in range(nb):
        nxt[b] = acc
        acc += counts[b]
    return nxt


@njit
def scatter_buckets(rows, starts, words, out, counts):
    """Stable partition of records by row range.

    ``rows`` int64 ``(n,)``: each record's row; ``starts`` int64 ``(n_buckets + 1,)``: the row
    boundaries of the buckets; ``words`` int64 ``(n, k)``: the records as rows of 8-byte words.
    Writes the records to ``out`` ``(n, k)``, those of bucket 0 first, read order kept within a
    bucket; ``counts[b]``: the records of bucket ``b``.
    """
    n, k = words.shape
    bucket = np.searchsorted(starts, rows, side="right") - 1
    nxt = _partition(bucket, np.arange(n), counts)
    for i in range(n):
        j = nxt[bucket[i]]
        nxt[bucket[i]] = j + 1
        for f in range(k):
            out[j, f] = words[i, f]


@njit
def _row_pointer(rows, n_rows, ptr):
    """Writes ``ptr`` ``(n_rows + 1,)``, the CSR row pointer of entries in rows ``rows``
    (``[0, n_rows)``); returns a copy of its first ``n_rows`` slots (the next free slot of every
    row, for a counting sort by row)."""
    for r in range(n_rows + 1):
        ptr[r] = 0
    for i in range(rows.size):
        ptr[rows[i] + 1] += 1
    for r in range(n_rows):
        ptr[r + 1] += ptr[r]
    return ptr[:-1].copy()


@njit
def sort_bucket(rows, cols, n_rows, ptr, perm, cols_sorted):
    """Order of the entries of one bucket by (row, column, position), stably.

    ``rows`` int64 ``(n,)`` in ``[0, n_rows)``, ``cols`` int64 ``(n,)``.  Writes ``ptr``
    ``(n_rows + 1,)`` (the CSR row pointer), ``perm`` ``(n,)`` (positions in sorted order: equal
    (row, column) pairs keep their read order) and ``cols_sorted = cols[perm]``.
    """
    n = rows.size
    nxt = _row_pointer(rows, n_rows, ptr)
    wide = False
    for i in range(n):
        if cols[i] >= 2**31:
            wide = True
            break
    if n < 2**32 and not wide:
        # one int64 per entry, (column << 32) | position, unique: sorting it within each row
        # sorts by (column, read order), in place on contiguous memory
        key = cols_sorted
        for i in range(n):  # counting sort by row
            r = rows[i]
            key[nxt[r]] = (cols[i] << 32) | i
            nxt[r] += 1
        for r in range(n_rows):
            lo, hi = ptr[r], ptr[r + 1]
            if hi - lo <= _SHORT_ROW:
                for j in range(lo + 1, hi):
                    x = key[j]
                    k = j - 1
                    while k >= lo and key[k] > x:
                        key[k + 1] = key[k]
                        k -= 1
                    key[k + 1] = x
            else:
                key[lo:hi] = np.sort(key[lo:hi])
        mask = (1 << 32) - 1
        for j in range(n):
            perm[j] = key[j] & mask
            key[j] = key[j] >> 32
        return
    for i in range(n):  # counting sort by row: positions ascend within a row
        r = rows[i]
        perm[nxt[r]] = i
        nxt[r] += 1
    for r in range(n_rows):
        lo, hi = ptr[r], ptr[r + 1]
        if hi - lo <= _SHORT_ROW:  # stable insertion sort by column
            for j in range(lo, hi):
                cols_sorted[j] = cols[perm[j]]
            for j in range(lo + 1, hi):
                c, p = cols_sorted[j], perm[j]
                k = j - 1
                while k >= lo and cols_sorted[k] > c:
                    cols_sorted[k + 1] = cols_sorted[k]
                    perm[k + 1] = perm[k]
                    k -= 1
                cols_sorted[k + 1] = c
                perm[k + 1] = p
        else:
            seg = perm[lo:hi].copy()
            c = cols[seg]
            order = np.argsort(c, kind="mergesort")
            for j in range(hi - lo):
                perm[lo + j] = seg[order[j]]
                cols_sorted[lo + j] = c[order[j]]


#: ``bucket_csr`` sorts a bucket by :func:`radix_sort_pairs` when it holds at least this many
#: entries and at least ``_RADIX_ROW`` entries per row on average (shorter rows: insertion
#: sorts per row are cheaper than the radix passes over the whole bucket).
_RADIX_MIN = 1 << 12
_RADIX_ROW = 16


@njit
def radix_sort_pairs(key, row, key2, row2, top, n_rows, ptr):
    """Stable sort of entries by (row, column) with counting sorts only (LSD radix).

    ``key`` int64 ``(n,)``: ``column << 32 | position`` of every entry (positions distinct, in
    read order; columns ``<= top < 2**31``), ``row`` int64 ``(n,)`` its row in ``[0, n_rows)``;
    ``key2``, ``row2``: scratch of the same size.  All four are overwritten.  Passes: the
    column's digits (at most 11 bits each, least significant first), then the row (a counting
    sort, which writes ``ptr`` ``(n_rows + 1,)``, the CSR row pointer).  Returns ``(perm,
    cols_sorted)``, two of the four arrays: positions in (row, column, read order) and their
    columns; the same order as :func:`sort_bucket`, without its per-row comparison sorts
    (about 1.5x faster at 50 entries per row).
    """
    n = key.size
    bits = 1
    while (1 << bits) <= top:
        bits += 1
    n_pass = -(-bits // 11)
    width = -(-bits // n_pass)
    n_dig = 1 << width
    dmask = n_dig - 1
    cnt = np.empty(n_dig, np.int64)
    a_key, a_row, b_key, b_row = key, row, key2, row2
    for p in range(n_pass):
        shift = 32 + p * width
        cnt[:] = 0
        for i in range(n):
            cnt[(a_key[i] >> shift) & dmask] += 1
        s = 0
        for d in range(n_dig):
            c = cnt[d]
            cnt[d] = s
            s += c
        for i in range(n):
            x = a_key[i]
            d = (x >> shift) & dmask
            j = cnt[d]
            cnt[d] = j + 1
            b_key[j] = x
            b_row[j] = a_row[i]
        a_key, b_key = b_key, a_key
        a_row, b_row = b_row, a_row
    nxt = _row_pointer(a_row, n_rows, ptr)
    for i in range(n):  # the last, stable pass by row; a_row is free after it
        r = a_row[i]
        j = nxt[r]
        nxt[r] = j + 1
        b_key[j] = a_key[i]
    mask = (1 << 32) - 1
    for j in range(n):
        x = b_key[j]
        a_row[j] = x & mask
        b_key[j] = x >> 32
    return a_row, b_key


@njit
def cut_buckets(counts, bucket_nnz, starts):
    """Greedy cut of rows into consecutive ranges of at most ``bucket_nnz`` entries (a row with
    more forms its own range); writes the boundaries to ``starts`` and returns their number."""
    m = 1
    starts[0] = 0
    acc = 0
    for i in range(counts.size):
        c = counts[i]
        if acc > 0 and acc + c > bucket_nnz:
            starts[m] = i
            m += 1
            acc = 0
        acc += c
    starts[m] = counts.size
    return m + 1


@njit
def count_into(keys, lo, counts):
    """``counts[k - lo] += 1`` for every ``k`` of ``keys`` (all within the array's range)."""
    for i in range(keys.size):
        counts[keys[i] - lo] += 1


@njit
def bucket_csr(
    words, rfield, cfield, packed, r0, n_rows, fvals, vfields, policy, ptr, cols_out, vals_out,
    work,
):  # fmt: skip
    """One spilled bucket to CSR parts, duplicates merged: sort by (row, column, read order)
    fused with the merge of runs of equal (row, column): ``sort_bucket``, then one pass that
    reads the sorted columns in order and gathers only the values (no gather of whole records,
    no NumPy passes for the merge).

    ``words`` int64 ``(n, k)``: the records as 8-byte words; the row is word ``rfield`` and the
    column word ``cfield``, or with ``packed`` word ``rfield`` holds ``row << 32 | column``; rows
    count from ``r0`` and lie in ``[r0, r0 + n_rows)``.  ``fvals`` float64 ``(n, k)``: the same
    memory as floats, the values in words ``vfields``.  ``policy``: 0 ``"error"`` (merged as
    ``"last"``; the caller compares the entry counts), 1 ``"last"``, 2 ``"sum"``, 3 ``"mean"``.
    Writes ``ptr`` ``(n_rows + 1,)``, ``cols_out`` ``(n,)``, ``vals_out`` ``(len(vfields), n)``
    (any integer / float dtypes: sums and means are taken in float64, then stored); ``work``
    int64 ``(>= 4 n,)``: scratch, reused by the caller across buckets (fresh pages are slow
    here).  Returns the number of merged entries.
    """
    n = words.shape[0]
    nv = vfields.size
    rows = work[:n]
    cols = work[n : 2 * n]
    perm = work[2 * n : 3 * n]
    sorted_cols = work[3 * n : 4 * n]
    acc = np.empty(max(nv, 1), np.float64)
    top = 0
    for i in range(n):
        if packed:
            w = words[i, rfield]
            rows[i] = (w >> 32) - r0
            cols[i] = w & 0xFFFFFFFF
        else:
            rows[i] = words[i, rfield] - r0
            cols[i] = words[i, cfield]
        top = max(top, cols[i])
    if n >= _RADIX_MIN and n >= _RADIX_ROW * n_rows and top < 2**31 and n < 2**32:
        # long rows on average: radix sort (work's four slabs reused; same order as below)
        for i in range(n):
            cols[i] = (cols[i] << 32) | i
        perm, sorted_cols = radix_sort_pairs(cols, rows, perm, sorted_cols, top, n_rows, ptr)
    else:
        sort_bucket(rows, cols, n_rows, ptr, perm, sorted_cols)
    # merge runs of equal (row, column): sorted_cols read in order, the values gathered
    flat = fvals.reshape(fvals.size)
    k = fvals.shape[1]
    m = 0
    lo = 0
    for r in range(n_rows):
        hi = ptr[r + 1]
        ptr[r] = m
        j = lo
        while j < hi:
            if j + _AHEAD < n and nv:
                prefetch(flat, perm[j + _AHEAD] * k + vfields[0])
            c = sorted_cols[j]
            p = perm[j]
            cols_out[m] = c
            for f in range(nv):
                acc[f] = fvals[p, vfields[f]]
            run = 1
            j += 1
            while j < hi and sorted_cols[j] == c:
                p = perm[j]
                for f in range(nv):
                    if policy >= 2:
                        acc[f] += fvals[p, vfields[f]]
                    else:
                        acc[f] = fvals[p, vfields[f]]
                run += 1
                j += 1
            if policy == 3 and run > 1:
                for f in range(nv):
                    acc[f] /= run
            for f in range(nv):
                vals_out[f, m] = acc[f]
            m += 1
        lo = hi
    ptr[n_rows] = m
    return m


@njit
def bucket_of_rows(starts, n_rows, out):
    """``out[r]`` (``(n_rows,)``): the bucket holding row ``r``, for the boundaries ``starts``."""
    for b in range(starts.size - 1):
        for r in range(starts[b], min(starts[b + 1], n_rows)):
            out[r] = b


@njit
def spill_pairs(ri, ci, packed, vbits, row_bucket, out, counts):
    """The records of a batch of entries, built and partitioned by bucket in one kernel.

    ``ri``, ``ci`` int64 ``(n,)``: row and column indices; ``vbits`` int64 ``(n_fields, n)``:
    the value fields' bits (float64 viewed as int64); ``row_bucket`` ``(n_rows,)``: the bucket
    of every row (:func:`bucket_of_rows`).  Writes ``out`` int64 ``(n, k)``, one record per
    row: ``row << 32 | column`` (``packed``) or row and column in two words, then the fields;
    the records of bucket 0 first, read order kept within a bucket (the stable partition of
    :func:`scatter_buckets`); ``counts[b]``: the records of bucket ``b``.
    """
    n = ri.size
    nv = vbits.shape[0]
    f0 = 1 if packed else 2
    # each entry's bucket looked up once (row_bucket is read at random: 16 MB at 4M rows),
    # kept in a small array read in order by the scatter (200M-row shape: 45 -> 17 ns/entry)
    bucket = np.empty(n, row_bucket.dtype)
    for b in range(counts.size):
        counts[b] = 0
    for i in range(n):
        b = row_bucket[ri[i]]
        bucket[i] = b
        counts[b] += 1
    nxt = np.empty(counts.size, np.int64)
    acc = 0
    for b in range(counts.size):
        nxt[b] = acc
        acc += counts[b]
    for i in range(n):
        b = bucket[i]
        j = nxt[b]
        nxt[b] = j + 1
        if packed:
            out[j, 0] = (ri[i] << 32) | ci[i]
        else:
            out[j, 0] = ri[i]
            out[j, 1] = ci[i]
        for f in range(nv):
            out[j, f0 + f] = vbits[f, i]


@njit
def lookup_dense(keys, lo, lut, out):
    """``out[i] = lut[keys[i] - lo]``, or -1 when the key falls outside the table."""
    size = lut.size
    for i in range(keys.size):
        j = keys[i] - lo
        out[i] = lut[j] if 0 <= j < size else -1


@njit
def intern_dense(keys, lo, lut, n_keys, key_of, out):
    """Ids of integer keys in first-seen order through a dense table: ``lut`` (int32 or int64)
    holds the id of key ``lo + j`` at slot ``j``, or -1; a key seen first gets id ``n_keys``
    (then ``n_keys + 1``, ...) and ``key_of[id] = key``.  The caller makes ``lut`` cover every
    key and ``key_of`` hold ``n_keys + keys.size`` ids.  Writes ``out[i]``, the id of
    ``keys[i]``; returns the number of keys now."""
    for i in range(keys.size):
        j = keys[i] - lo
        k = lut[j]
        if k < 0:
            k = n_keys
            lut[j] = k
            key_of[k] = keys[i]
            n_keys += 1
        out[i] = k
    return n_keys


@njit
def string_order_keys(data, offsets, i0, i1, out):
    """``out[i - i0]`` (int64) for the strings ``i0 .. i1 - 1`` of ``data`` / ``offsets``: their
    first 8 bytes read big-endian (zero-padded) with the top bit flipped, so that the int64
    order of the results never contradicts the byte order of the strings (equal results for
    strings sharing their first 8 bytes)."""
    for i in range(i0, i1):
        s0, sn = offsets[i], offsets[i + 1] - offsets[i]
        w = np.uint64(0)
        for j in range(8):
            b = np.uint64(data[s0 + j]) if j < sn else np.uint64(0)
            w = (w << np.uint64(8)) | b
        out[i - i0] = np.int64(w ^ np.uint64(1 << 63))


@njit
def remap_packed(words, row_of, col_of):
    """Packed records ``(n, k)`` (word 0: ``row << 32 | column``) mapped in place to
    ``row_of[row] << 32 | col_of[column]`` (integer tables, int32 to halve what is read at
    random: first-seen id -> final index)."""
    for i in range(words.shape[0]):
        w = words[i, 0]
        words[i, 0] = (np.int64(row_of[w >> 32]) << 32) | np.int64(col_of[w & 0xFFFFFFFF])
