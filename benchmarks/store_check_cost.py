"""Cost of the store-identity check (issue 23 item 2): one GIMC pass streamed from a store
(``cache_bytes=0``) with the check as shipped and with it switched off, alternating, in one
process.  ``python -m benchmarks.store_check_cost [--rows N] [--repeats R] [--out PATH]``."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=None)
    a = p.parse_args(argv)

    from ooc_lowrank import GIMC, storage
    from ooc_lowrank.generators import generate_multilabel

    work = tempfile.mkdtemp(prefix="ooc-sc-")
    path = os.path.join(work, "s.zarr")
    generate_multilabel(path, n_rows=a.rows, n_features=100, n_labels=50, seed=0)
    ds = storage.open_dataset(path)
    original = storage._StoreVersion.check

    def fit():
        m = GIMC(n_features_map=200, max_iter=1, cache_bytes=0, random_state=0)
        t = time.perf_counter()
        m.fit(ds["X"], ds["Y"])
        return time.perf_counter() - t, m.n_passes_

    fit()  # warm-up (JIT, page cache)
    on, off, passes = [], [], None
    for r in range(a.repeats):  # alternating, and which one runs first alternates too
        for check_on in (r % 2 == 0, r % 2 == 1):
            storage._StoreVersion.check = original if check_on else (lambda self, *a, **k: None)
            s, passes = fit()
            (on if check_on else off).append(s)
    storage._StoreVersion.check = original
    t = time.perf_counter()
    version = ds["X"]._version
    for _ in range(10000):
        version.check("X")
    check_us = (time.perf_counter() - t) / 10000 * 1e6
    res = {
        "rows": a.rows,
        "passes_per_fit": passes,
        "seconds_check_on": on,
        "seconds_check_off": off,
        "median_on": statistics.median(on),
        "median_off": statistics.median(off),
        "ratio_on_over_off": statistics.median(on) / statistics.median(off),
        "one_check_microseconds": check_us,
        "block_reads_per_pass": 2 * ds.info()["n_blocks"],
    }
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
