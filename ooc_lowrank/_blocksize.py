"""Row-block sizing shared by the engine and the store writer (imports nothing of ours).

The engine and :mod:`ooc_lowrank.storage` both size row blocks from a byte target; this module
sits below both so that neither imports the other for it (STYLE.md: imports only point down).
"""

from __future__ import annotations

#: Target size of one row block in bytes (PERF_NOTES: 8-32 MB blocks read fastest here).
TARGET_BLOCK_BYTES = 16 * 2**20


def default_block_rows(row_bytes: float, target_bytes: int = TARGET_BLOCK_BYTES) -> int:
    """Rows per block so that one block holds about ``target_bytes`` (clamped to [256, 2**20])."""
    rows = int(target_bytes // max(float(row_bytes), 1.0))
    return int(min(max(rows, 256), 1 << 20))
