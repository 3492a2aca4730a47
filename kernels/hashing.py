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
