"""Feature hashing of strings: FNV-1a over the UTF-8 bytes, then the splitmix64 finalizer.

The strings come as Arrow's two buffers (``offsets`` int64 ``(n + 1,)``, ``data`` uint8), so a
column of a record batch is hashed without a Python object per value.  The NumPy twin lives in
``tests/test_tables.py`` (``naive_hash_strings``).  Integers are hashed in NumPy by
:func:`ooc_lowrank.io.tables.hash_keys` with the same finalizer.
"""

from __future__ import annotations

import numpy as np

from ._numba import njit

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
def lookup_keys(data, offsets, hashes, table, qdata, qoffsets, qhashes, out):
    """``out[i]``: the index of query string ``i`` (``qdata`` / ``qoffsets``, hashes
    ``qhashes``) among the keys of a :func:`build_key_table` table (``data`` / ``offsets``,
    ``hashes``), -1 if absent.  Equal hashes are confirmed byte by byte."""
    mask = np.uint64(table.size - 1)
    for i in range(qhashes.size):
        h = qhashes[i]
        s = h & mask
        out[i] = -1
        q0, qn = qoffsets[i], qoffsets[i + 1] - qoffsets[i]
        while table[s] != 0:
            k = table[s] - 1
            if hashes[k] == h and offsets[k + 1] - offsets[k] == qn:
                k0 = offsets[k]
                same = True
                for j in range(qn):
                    if data[k0 + j] != qdata[q0 + j]:
                        same = False
                        break
                if same:
                    out[i] = k
                    break
            s = (s + np.uint64(1)) & mask
