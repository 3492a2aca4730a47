"""Feature hashing of strings: FNV-1a over the UTF-8 bytes, then the splitmix64 finalizer.

The strings come as Arrow's two buffers (``offsets`` int64 ``(n + 1,)``, ``data`` uint8), so a
column of a record batch is hashed without a Python object per value.  The NumPy twin lives in
``tests/test_tables.py`` (``naive_hash_strings``).  Integers are hashed in NumPy by
:func:`ooc_lowrank.io.tables.hash_keys` with the same finalizer.
"""

from __future__ import annotations

import numpy as np

from ._numba import njit
from ._prefetch import prefetch

#: Probing kernels prefetch the slot of the query this many ahead (random reads of a table far
#: bigger than the caches then overlap instead of waiting one by one).
_AHEAD = 16

FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@njit
def hash_strings(data, offsets, seed, out):
    """``out[i]`` = splitmix64(FNV-1a(seed-prefixed bytes of string ``i``)); uint64."""
    prime = np.uint64(0x100000001B3)
    for i in range(offsets.size - 1):
        h = np.uint64(0xCBF29CE484222325) ^ seed
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * prime
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        out[i] = h ^ (h >> np.uint64(31))


@njit
def build_key_table(hashes, table):
    """Open-addressing table of the keys with uint64 ``hashes``: ``table`` int64 (a power of
    two, at least twice the keys, zero-filled) gets ``index + 1`` of every key at the first
    free slot from ``hash & (size - 1)`` on (linear probing)."""
    mask = np.uint64(table.size - 1)
    for i in range(hashes.size):
        s = hashes[i] & mask
        while table[s] != 0:
            s = (s + np.uint64(1)) & mask
        table[s] = i + 1


@njit
def _equal_bytes(a, a0, b, b0, n):
    """Whether ``a[a0:a0 + n]`` equals ``b[b0:b0 + n]``."""
    for j in range(n):
        if a[a0 + j] != b[b0 + j]:
            return False
    return True


@njit
def lookup_keys(data, offsets, hashes, table, qdata, qoffsets, qhashes, out):
    """``out[i]``: the index of query string ``i`` (``qdata`` / ``qoffsets``, hashes
    ``qhashes``) among the keys of a :func:`build_key_table` table (``data`` / ``offsets``,
    ``hashes``), -1 if absent.  Equal hashes are confirmed byte by byte."""
    mask = np.uint64(table.size - 1)
    nq = qhashes.size
    for i in range(nq):
        if i + _AHEAD < nq:
            prefetch(table, np.int64(qhashes[i + _AHEAD] & mask))
        h = qhashes[i]
        s = h & mask
        out[i] = -1
        q0, qn = qoffsets[i], qoffsets[i + 1] - qoffsets[i]
        while table[s] != 0:
            k = table[s] - 1
            if (
                hashes[k] == h
                and offsets[k + 1] - offsets[k] == qn
                and _equal_bytes(data, offsets[k], qdata, q0, qn)
            ):
                out[i] = k
                break
            s = (s + np.uint64(1)) & mask


#: ``intern_strings`` slots: the id (plus one) in the low bits of word 1, the key's length
#: above them (``_LONG`` for a key longer than 16 bytes, kept out of the slot).
_ID_BITS = 40
_LONG = (1 << 24) - 1


@njit
def _pack16(data, q0, qn):
    """The first 16 bytes from ``data[q0]`` (``qn`` of them at most) as two little-endian
    uint64 words, zero-padded."""
    w0 = np.uint64(0)
    w1 = np.uint64(0)
    for j in range(min(qn, 16)):
        b = np.uint64(data[q0 + j]) << np.uint64(8 * (j % 8))
        if j < 8:
            w0 |= b
        else:
            w1 |= b
    return w0, w1


@njit
def _put_slot(slots, s, h, k, data, k0, kn):
    slots[s, 0] = h
    slots[s, 1] = np.uint64(k + 1) | (np.uint64(kn if kn <= 16 else _LONG) << 40)
    if kn <= 16:
        slots[s, 2], slots[s, 3] = _pack16(data, k0, kn)


@njit
def intern_strings(qdata, qoffsets, qhashes, start, slots, kdata, koffsets, khashes, n_keys, out):
    """Ids of query strings in a growing set of distinct keys, numbered in first-seen order.

    Queries: ``qdata`` / ``qoffsets`` (Arrow's buffers), uint64 hashes ``qhashes``, from query
    ``start`` on.  The set: ``n_keys`` keys in ``kdata`` / ``koffsets`` / ``khashes`` and the
    open-addressing table ``slots`` uint64 ``(size, 4)`` (``size`` a power of two, linear
    probing): per key its hash, ``id + 1 | length << 40`` (0: a free slot) and, for a key of at
    most 16 bytes, the key itself in two words, so that a probe reads one slot and no key
    buffer (a key longer than 16 bytes is compared in ``kdata``).  A query absent from the set
    is appended to it.  Writes ``out[i]``, the id of query ``i``.  Returns ``(n_keys, i)``: the
    keys now and the query where it stopped (``qhashes.size`` when done; before that, a new key
    would fill the table beyond half or overflow ``kdata`` / ``khashes``: the caller grows them
    and calls again from ``i``).
    """
    size = slots.shape[0]
    mask = np.uint64(size - 1)
    idmask = np.uint64((1 << _ID_BITS) - 1)
    nq = qhashes.size
    flat = slots.reshape(size * 4)
    for i in range(start, nq):
        if i + _AHEAD < nq:
            prefetch(flat, np.int64(qhashes[i + _AHEAD] & mask) * 4)
        h = qhashes[i]
        s = np.int64(h & mask)
        q0, qn = qoffsets[i], qoffsets[i + 1] - qoffsets[i]
        short = qn <= 16
        w0, w1 = _pack16(qdata, q0, qn)
        qlen = np.uint64(qn if short else _LONG)
        while True:
            meta = slots[s, 1]
            if meta == 0:  # absent: a new key
                k = n_keys
                k0 = koffsets[k]
                if 2 * (k + 1) > size or k + 1 >= khashes.size or k0 + qn > kdata.size:
                    return n_keys, i
                for j in range(qn):
                    kdata[k0 + j] = qdata[q0 + j]
                koffsets[k + 1] = k0 + qn
                khashes[k] = h
                _put_slot(slots, s, h, k, qdata, q0, qn)
                n_keys += 1
                out[i] = k
                break
            if slots[s, 0] == h and (meta >> np.uint64(_ID_BITS)) == qlen:
                k = np.int64(meta & idmask) - 1
                if short:
                    if slots[s, 2] == w0 and slots[s, 3] == w1:
                        out[i] = k
                        break
                elif koffsets[k + 1] - koffsets[k] == qn and _equal_bytes(
                    kdata, koffsets[k], qdata, q0, qn
                ):
                    out[i] = k
                    break
            s = (s + 1) & (size - 1)
    return n_keys, nq


@njit
def rehash_slots(kdata, koffsets, khashes, n_keys, slots):
    """Fill the zeroed table ``slots`` (see :func:`intern_strings`) with keys ``0..n_keys-1``."""
    size = slots.shape[0]
    mask = np.uint64(size - 1)
    for k in range(n_keys):
        h = khashes[k]
        s = np.int64(h & mask)
        while slots[s, 1] != 0:
            s = (s + 1) & (size - 1)
        _put_slot(slots, s, h, k, kdata, koffsets[k], koffsets[k + 1] - koffsets[k])
