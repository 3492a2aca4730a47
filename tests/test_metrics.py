"""Metrics (SPEC 1.7 / 5.4): in memory against the naive twins, block-wise via the engine."""

from __future__ import annotations

import naive_gimc as nv
import numpy as np
import pytest
import scipy.sparse as sp

from ooc_lowrank import engine, metrics


def test_spec_toy_values():
    sc = np.array([[0.9, 0.1, 0.5, 0.3], [0.2, 0.8, 0.7, 0.1]])
    Y = np.array([[1, 0, 0, 1], [0, 1, 0, 0]])
    assert metrics.precision_at_k(Y, sc, 1) == 1.0
    assert metrics.precision_at_k(sp.csr_matrix(Y), sc, 3) == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert metrics.accuracy([0, 2], sc) == 0.5
    assert metrics.accuracy([0, 2], [0, 2]) == 1.0


@pytest.mark.parametrize("k", [1, 3, 5, 12])
def test_against_naive(rng, k):
    S = rng.standard_normal((80, 10))
    Y = (rng.random((80, 10)) < 0.2).astype(float)
    Y[:3] = 0  # rows without positives count as 0
    assert metrics.precision_at_k(Y, S, k) == pytest.approx(nv.precision_at_k(S, Y, k))
    assert metrics.precision_at_k(sp.csr_matrix(Y), S, k) == pytest.approx(
        nv.precision_at_k(S, Y, k)
    )
    assert metrics.ndcg_at_k(sp.csr_matrix(Y), S, k) == pytest.approx(nv.ndcg_at_k(S, Y, k))


def test_ties_break_to_lower_index():
    S = np.zeros((1, 4))
    assert metrics.topk_from_scores(S, 2).tolist() == [[0, 1]]


def test_parse_metrics_and_errors():
    assert metrics.parse_metrics("p@1, ndcg@3,accuracy") == [("p", 1), ("ndcg", 3), ("accuracy", 0)]
    with pytest.raises(ValueError, match="unknown metric 'p@0'; use p@K"):
        metrics.parse_metrics(["p@0"])
    with pytest.raises(ValueError, match="unknown metric 'recall@5'"):
        metrics.parse_metrics("recall@5")


@pytest.mark.parametrize("block_rows", [7, 33, 100])
def test_blockwise_equals_in_memory(rng, block_rows):
    S = rng.standard_normal((100, 9))
    Y = sp.csr_matrix((rng.random((100, 9)) < 0.3).astype(np.float32))
    parsed = metrics.parse_metrics("p@1,p@3,ndcg@5")
    top = metrics.topk_from_scores(S, 5)

    def fn(Tb, Yb):
        return metrics.metric_sums_block(Yb, Tb, parsed)

    sums = engine.map_reduce(
        fn, engine.as_blocked(top.astype(np.float64), block_rows=block_rows), Y, shapes=[(3,)]
    )
    res = metrics.finalize(np.ravel(sums), 100, parsed)
    assert res["p@1"] == pytest.approx(nv.precision_at_k(S, Y, 1))
    assert res["p@3"] == pytest.approx(nv.precision_at_k(S, Y, 3))
    assert res["ndcg@5"] == pytest.approx(nv.ndcg_at_k(S, Y, 5))


def test_multiclass_codes_blocks(rng):
    S = rng.standard_normal((50, 4))
    y = rng.integers(0, 4, 50)
    top = metrics.topk_from_scores(S, 2)
    parsed = metrics.parse_metrics(["accuracy", "p@2"])
    res = metrics.finalize(
        metrics.metric_sums_block(y[:, None], top, parsed, codes=True), 50, parsed
    )
    assert res["accuracy"] == pytest.approx(nv.accuracy(S, y))
    assert res["p@2"] == pytest.approx(np.mean((top == y[:, None]).any(1)) / 2)


@pytest.mark.parametrize("block_rows", [7, 100])
def test_ranking_loss_through_parse_metrics_equals_score_based(rng, block_rows):
    """``ranking_loss`` from the full top-k order (what GIMC's evaluate feeds) equals the
    score-based metric when scores have no ties, block-wise; rows with no positive or no
    negative are not counted (averaged over the counted rows, not all rows)."""
    S = rng.standard_normal((100, 9))
    Y = (rng.random((100, 9)) < 0.3).astype(np.float64)
    Y[:4] = 0.0
    Y[4] = 1.0
    parsed = metrics.parse_metrics("p@1,ranking_loss")
    assert parsed == [("p", 1), ("ranking_loss", 0), ("ranking_loss_rows", 0)]
    assert metrics.parse_metrics("RL") == parsed[1:]
    K = min(metrics.max_k(parsed), 9)
    assert K == 9
    top = metrics.topk_from_scores(S, K)

    def fn(Tb, Yb):
        return metrics.metric_sums_block(Yb, Tb, parsed)

    sums = engine.map_reduce(
        fn, engine.as_blocked(top.astype(np.float64), block_rows=block_rows), sp.csr_matrix(Y),
        shapes=[(3,)],
    )  # fmt: skip
    res = metrics.finalize(np.ravel(sums), 100, parsed)
    assert set(res) == {"p@1", "ranking_loss"}
    assert res["ranking_loss"] == pytest.approx(metrics.ranking_loss(Y, S), rel=1e-12)
    assert res["p@1"] == pytest.approx(nv.precision_at_k(S, Y, 1))
    with pytest.raises(ValueError, match="ranking_loss needs the rank of every label"):
        metrics.metric_sums_block(sp.csr_matrix(Y), top[:, :3], parsed)


def test_gimc_evaluate_ranking_loss(rng):
    from ooc_lowrank.gimc import GIMC

    X = rng.standard_normal((120, 5))
    Y = (X @ rng.standard_normal((5, 6)) > 0.5).astype(np.float64)
    est = GIMC(n_features_map=8, max_iter=2, random_state=0).fit(X, Y)
    res = est.evaluate(X, "ranking_loss,p@1", Y=Y)
    assert res["ranking_loss"] == pytest.approx(
        metrics.ranking_loss(Y, est.decision_function(X)), rel=1e-9
    )
    assert 0.0 <= res["ranking_loss"] < 0.5 and "p@1" in res
