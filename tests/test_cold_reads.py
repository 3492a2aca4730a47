"""Cold reads (issue 25): ``storage.drop_page_cache`` makes the next read come from disk."""

from __future__ import annotations

import os

import numpy as np
import pytest

from ooc_lowrank.storage import drop_page_cache, open_dataset, process_read_bytes, write_arrays


def _fs_type(path) -> str | None:
    """Filesystem type of the mount holding ``path`` (longest mount point prefix)."""
    try:
        with open("/proc/mounts") as fh:
            mounts = [line.split()[1:3] for line in fh]
    except OSError:
        return None
    path = os.path.realpath(path)
    best = max((m for m in mounts if path == m[0] or path.startswith(m[0].rstrip("/") + "/")),
               key=lambda m: len(m[0]), default=None)
    return best[1] if best else None


def test_drop_page_cache_makes_the_next_read_come_from_disk(tmp_path):
    if process_read_bytes() is None:
        pytest.skip("/proc/self/io read_bytes is not available here: disk reads cannot be counted")
    if _fs_type(tmp_path) in (None, "tmpfs", "ramfs", "overlay", "9p", "nfs", "fuse"):
        pytest.skip(f"tmp_path is on {_fs_type(tmp_path)!r}: page-cache drops are not observable")
    X = np.random.default_rng(0).standard_normal((8192, 256)).astype(np.float32)  # 8 MiB
    write_arrays(tmp_path / "s.zarr", {"X": X}, block_rows=2048)
    ds = open_dataset(tmp_path / "s.zarr")
    r0 = process_read_bytes()
    warm = ds["X"].read()
    r1 = process_read_bytes()
    advised = drop_page_cache(ds)
    r2 = process_read_bytes()
    cold = ds["X"].read()
    r3 = process_read_bytes()
    np.testing.assert_array_equal(cold, warm)
    assert advised >= X.nbytes
    assert r1 - r0 < X.nbytes // 10, "the store just written should be read from the page cache"
    assert r3 - r2 >= 0.9 * X.nbytes, (r3 - r2, X.nbytes)


def test_drop_page_cache_refuses_a_remote_store():
    with pytest.raises(ValueError, match="local store"):
        drop_page_cache("s3://bucket/store.zarr")
