"""GIMC's BLAS work per pass (issue 25): each pass multiplies each block by U exactly once."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import GIMC
from ooc_lowrank.gimc import _blocks


@pytest.mark.parametrize("n_trials", [1, 3])
def test_each_pass_makes_one_projection_per_block_and_trial(rng, monkeypatch, n_trials):
    # the line-search pass used to compute X U and X direction for any number of trials: for
    # the default single trial that was a second n d m GEMM per block (13 % of an iteration)
    X = rng.standard_normal((300, 6)).astype(np.float32)
    Y = sp.csr_matrix((np.cos(X @ rng.standard_normal((6, 5))) > 0.5).astype(np.float32))
    calls = []
    dot = _blocks._dot
    monkeypatch.setattr(_blocks, "_dot", lambda Xb, U: calls.append(Xb.shape[0]) or dot(Xb, U))
    g = GIMC(n_features_map=8, max_iter=3, tol=0.0, random_state=0, n_trials=n_trials,
             block_rows=100).fit(X, Y)
    n_blocks = 3
    stats_passes = g.n_passes_ - 1 - g.n_iter_  # init pass + one gradient pass per iteration
    # a gradient pass after a single-trial pass (the init pass, and every line-search pass of
    # n_trials=1) uses the features that pass kept: no product
    grad_products = 0 if n_trials == 1 else g.n_iter_ - 1
    expected = n_blocks * (1 + grad_products + stats_passes * n_trials)
    assert len(calls) == expected, (len(calls), expected, g.n_passes_, g.n_iter_)
