"""Out-of-core proof: a Gram reduction over a store >= 4x a worker's memory limit stays under it."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from ooc_lowrank import engine
from ooc_lowrank.storage import DatasetWriter

MEMORY_LIMIT = 350 * 2**20  # bytes; an idle worker already holds ~120-150 MiB


def _gram(Xb):
    from scipy.linalg.blas import ssyrk

    return np.triu(ssyrk(1.0, Xb, trans=1)).astype(np.float64)


def _peak_rss_bytes():
    """This process's peak RSS (VmHWM).

    Not ``getrusage().ru_maxrss``: Linux carries ru_maxrss over exec from the forking parent, so
    a worker started by a big pytest process would report the parent's peak.
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@pytest.mark.timeout(300)
@pytest.mark.slow  # 10 s warm: an out-of-core acceptance run (CONTRIBUTING.md)
def test_gram_over_store_four_times_worker_memory(tmp_path):
    distributed = pytest.importorskip("distributed")
    d, block = 256, 8192  # 8 MiB blocks
    n = 4 * MEMORY_LIMIT // (d * 4) + 3 * block + 17
    url = str(tmp_path / "big.zarr")
    rng = np.random.default_rng(0)
    base = rng.standard_normal((block, d)).astype(np.float32)
    with DatasetWriter(url, block_rows=block) as w:
        w.add_dense("X", d, "float32")
        s = 0
        while s < n:
            e = min(n, s + block)
            Xb = base[: e - s] * np.float32(1 + (s // block) % 5)
            w.append(X=Xb)
            s = e
    from ooc_lowrank.storage import open_dataset

    ds = open_dataset(url)
    store_bytes = ds.info()["bytes_on_disk"]
    assert store_bytes >= 4 * MEMORY_LIMIT

    with (
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=2,
            processes=True,
            memory_limit=MEMORY_LIMIT,
            dashboard_address=None,
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        before = max(client.run(_peak_rss_bytes).values())
        G = engine.map_reduce(_gram, ds["X"], client=client)
        peak = max(client.run(_peak_rss_bytes).values())
    # every block is a scaled prefix of `base`; compare with a float64 reference per row weight
    w = np.zeros(block)
    s = 0
    while s < n:
        e = min(n, s + block)
        w[: e - s] += float(np.float32(1 + (s // block) % 5)) ** 2
        s = e
    b64 = base.astype(np.float64)
    ref = (b64 * w[:, None]).T @ b64
    np.testing.assert_allclose(np.triu(G), np.triu(ref), rtol=0, atol=1e-5 * np.abs(ref).max())
    print(
        f"store {store_bytes / 2**20:.0f} MiB, worker limit {MEMORY_LIMIT / 2**20:.0f} MiB, "
        f"worker peak RSS {peak / 2**20:.0f} MiB (idle {before / 2**20:.0f} MiB)"
    )
    assert peak < MEMORY_LIMIT
