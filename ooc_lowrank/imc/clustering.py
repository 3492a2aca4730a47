"""Semi-supervised clustering with GIMC (SPEC 1.5.4, 1.5.5, 1.7): Algorithm 2.

Constraints are observed entries of the ``n x n`` matrix ``S`` (1 = same cluster, 0 = different),
each unordered pair stored once as ``(i, j)`` with ``i < j`` (``symmetrize=True`` adds
``(j, i)``).  :class:`GIMCClustering` fits two-sided IMC with ``X_row = X_col = X`` (two feature
maps of the same items), reads the top-``k`` left singular vectors of ``P Q^T`` exactly from two
thin QRs of the ``n x k`` factors (or the paper's ``svds(Phi_U W)``), then runs scikit-learn's
``MiniBatchKMeans`` over row blocks (``partial_fit``) with restarts.  The clustering error
(``1 - Rand index``) comes from the contingency table, never from ``n x n`` pairs.
"""

from __future__ import annotations

import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin

from ooc_lowrank import _base
from ooc_lowrank._validation import check_auto, check_random_state, check_scalar, param_error
from ooc_lowrank.glrl.estimator import _obs_handle
from ooc_lowrank.imc.estimator import (
    InductiveMatrixCompletion,
    _SharedParams,
    _side_features,
    features_of,
)

READOUTS = ("exact", "svds")
#: The paper's lam grid for clustering (SPEC 1.7).
PAPER_LAM_GRID = (0.1, 0.5, 1.0, 5.0, 10.0)
#: ``alpha="auto"``: the candidates per feature map, the held-out share of the constraints and
#: the outer iterations of each selection fit (the refit uses ``max_iter``).  With Fourier
#: features (GIMC-LFF, IMC-RFF) lam = 5 and 10 never had a held-out error below the best of
#: (0.1, 0.5, 1) in over 100 selections on Segment, Mushroom, mfeat and mfeat-kar (in the
#: defaults runs they were the two worst every time), so they are dropped; with the identity
#: map (MCCC) they were strictly best in 11 of 50, and the Nystrom map has no evidence: both
#: keep the paper's grid.  Only held-out constraint errors were used for this, never labels.
#: Evidence: docs/imc.md "Built-in lam selection", ``benchmarks/results/imc_clustering_*.json``.
LAM_GRIDS = {
    "fourier": (0.1, 0.5, 1.0),
    "nystrom": PAPER_LAM_GRID,
    "identity": PAPER_LAM_GRID,
}
HOLDOUT = 0.2
SELECT_ITER = 5
_KM_ROWS = 65536
#: k-means of at most this many rows runs on one OpenMP thread: scikit-learn's threads cost
#: more than they give on a few thousand rows of k columns (Segment, 2,310 x 7: 10 restarts x 5
#: epochs spent 6-11 s in ``_labels_inertia`` with two threads on a busy 2-core machine).
_KM_SERIAL_ROWS = 65536


def sample_constraints(labels, n_pairs, *, random_state=None, symmetrize=False):
    """``n_pairs`` random unordered pairs ``i < j`` labelled 1 (same class) or 0 (different).

    Parameters
    ----------
    labels : array-like of shape (n_samples,)
    n_pairs : int
        ``|Omega|`` (the paper uses ``c * n`` with ``c`` in {1, 5, 10, 15, 20}).
    random_state : int, RandomState, Generator or None
    symmetrize : bool
        Also store ``(j, i)`` for every pair.

    Returns
    -------
    rows, cols : ndarray of int64
    values : ndarray of float64
    """
    y = np.asarray(labels).reshape(-1)
    n = y.shape[0]
    if n < 2:
        raise param_error("labels", "must hold at least 2 items to form pairs", n)
    check_scalar(
        n_pairs, "n_pairs", kind=numbers.Integral, low=1, high=n * (n - 1) // 2,
        fix=f"{n} items form at most {n * (n - 1) // 2} distinct pairs; the paper uses "
        "c * n pairs with c in {1, 5, 10, 15, 20}",
    )  # fmt: skip
    rs = check_random_state(random_state)
    rng = np.random.default_rng(rs.randint(2**31 - 1))
    i = rng.integers(0, n, size=2 * int(n_pairs) + 16)
    j = rng.integers(0, n, size=i.size)
    keep = i != j
    i, j = i[keep][: int(n_pairs)], j[keep][: int(n_pairs)]
    while i.size < n_pairs:  # pragma: no cover - only for n = 2 with bad luck
        a, b = rng.integers(0, n, size=2)
        if a != b:
            i, j = np.append(i, a), np.append(j, b)
    r, c = np.minimum(i, j), np.maximum(i, j)
    v = (y[r] == y[c]).astype(np.float64)
    if symmetrize:
        r, c, v = np.concatenate([r, c]), np.concatenate([c, r]), np.concatenate([v, v])
    return r.astype(np.int64), c.astype(np.int64), v


def clustering_error(labels_pred, labels_true):
    """``1 - Rand index`` over unordered pairs (SPEC 1.7), from the contingency table.

    Disagreeing pairs = pairs together in one partition only
    ``= sum_a C(t_a, 2) + sum_b C(p_b, 2) - 2 sum_ab C(n_ab, 2)``.
    """
    p = np.asarray(labels_pred).reshape(-1)
    t = np.asarray(labels_true).reshape(-1)
    if p.shape != t.shape:
        raise ValueError(
            f"labels_pred and labels_true must have the same length; got {p.size} and {t.size}"
        )
    n = p.size
    if n < 2:
        return 0.0
    _, pi = np.unique(p, return_inverse=True)
    _, ti = np.unique(t, return_inverse=True)
    C = sp.coo_matrix((np.ones(n), (ti, pi))).tocsr()
    C.sum_duplicates()

    def pairs(x):
        x = np.asarray(x, dtype=np.float64)
        return float(np.sum(x * (x - 1.0) / 2.0))

    both = pairs(C.data)
    same_t = pairs(np.asarray(C.sum(axis=1)).ravel())
    same_p = pairs(np.asarray(C.sum(axis=0)).ravel())
    return (same_t + same_p - 2.0 * both) / (n * (n - 1) / 2.0)


def constraint_error(labels_pred, rows, cols, values):
    """Fraction of violated constraints: same cluster with ``S = 0`` or different with ``S = 1``
    (SPEC 1.7, the model-selection error)."""
    p = np.asarray(labels_pred)
    same = p[np.asarray(rows)] == p[np.asarray(cols)]
    return float(np.mean(same != (np.asarray(values) == 1)))


def split_constraints(n_pairs, holdout, rng):
    """``(train, held_out)`` index arrays: a random ``holdout`` share of ``n_pairs`` constraints
    (at least one) held out, the rest (at least one) to fit on."""
    perm = rng.permutation(int(n_pairs))
    n_val = max(1, int(round(holdout * n_pairs)))
    if n_pairs - n_val < 1:
        raise param_error(
            "constraints", "are too few to hold some out (alpha selection needs at least 2)",
            int(n_pairs), "Pass more constraints, or a fixed alpha (e.g. alpha=1.0)",
        )  # fmt: skip
    return np.sort(perm[n_val:]), np.sort(perm[:n_val])


def best_lam(errors):
    """The ``lam`` of lowest held-out error; ties go to the candidate nearest 1.0 in log scale
    (the former fixed default), then to the larger ``lam``."""
    low = min(errors.values())
    tied = [lam for lam, e in errors.items() if e == low]
    return min(tied, key=lambda lam: (abs(np.log(lam)), -lam))


def check_lam(lam):
    """``alpha`` (SPEC 1.7's ``lam``) as ``(grid, fixed)``: ``"auto"`` gives
    ``("auto", None)``, a sequence its candidates (positive) and ``None``, a number (>= 0)
    ``None`` and the number.  Errors name ``alpha``."""
    fix = (
        'Use alpha="auto" (chosen on held-out constraints), a positive number such as 1.0, or a '
        "list of positive candidates"
    )
    rule = 'must be "auto", a positive number or a list of them'
    if check_auto(lam, "alpha", rule, fix):
        return "auto", None
    if isinstance(lam, numbers.Real) and not isinstance(lam, bool):
        check_scalar(lam, "alpha", low=0.0, fix=fix)
        return None, float(lam)
    try:
        grid = [float(x) if isinstance(x, numbers.Real) and not isinstance(x, bool) else x
                for x in lam]  # fmt: skip
    except TypeError:
        raise param_error("alpha", rule, lam, fix, exc=TypeError) from None
    if not grid:
        raise param_error("alpha", "must hold at least one candidate", lam, fix)
    for x in grid:
        check_scalar(x, "alpha[i]", low=0.0, low_inclusive=False, fix=fix)
    return tuple(grid), None


def leading_subspace(P, Q, k, method="exact"):
    """Top-``k`` left singular vectors of ``P Q^T`` (SPEC 1.5.4) from ``n x k`` factors.

    ``"exact"``: thin QRs ``P = Q_a R_a``, ``Q = Q_b R_b``, SVD of ``R_a R_b^T``; ``"svds"``: the
    paper's ``svds(Phi_U W)``, the left singular vectors of ``P`` alone.
    """
    if method not in READOUTS:
        raise param_error("readout", f"must be one of {READOUTS}", method)
    Qa, Ra = np.linalg.qr(P)
    if method == "exact":
        Qb, Rb = np.linalg.qr(Q)
        Us, _, _ = np.linalg.svd(Ra @ Rb.T)
    else:
        Us, _, _ = np.linalg.svd(Ra)
    return Qa @ Us[:, :k]


def kmeans_blocks(T, k, *, n_init=10, n_epochs=5, block_rows=_KM_ROWS, random_state=None):
    """k-means of the rows of ``T`` by scikit-learn's ``MiniBatchKMeans.partial_fit`` over row
    blocks (``n_epochs`` sweeps), best of ``n_init`` restarts by inertia; labels in blocks.
    Up to :data:`_KM_SERIAL_ROWS` rows run on one OpenMP thread."""
    import contextlib

    from ooc_lowrank.engine import _blas_controller

    serial = T.shape[0] <= _KM_SERIAL_ROWS
    ctx = _blas_controller().limit(limits=1, user_api="openmp") if serial else None
    with ctx or contextlib.nullcontext():
        return _kmeans_blocks(T, k, n_init, n_epochs, block_rows, random_state)


def _kmeans_blocks(T, k, n_init, n_epochs, block_rows, random_state):
    from sklearn.cluster import MiniBatchKMeans

    rs = check_random_state(random_state)
    n = T.shape[0]
    bounds = list(range(0, n, block_rows)) + [n]
    best, best_inertia = None, np.inf
    for _ in range(int(n_init)):
        km = MiniBatchKMeans(
            n_clusters=int(k),
            random_state=rs.randint(2**31 - 1),
            batch_size=min(block_rows, n),
            n_init=1,
        )
        for _ep in range(int(n_epochs)):
            for s, e in zip(bounds[:-1], bounds[1:], strict=True):
                km.partial_fit(T[s:e])
        inertia = -sum(km.score(T[s:e]) for s, e in zip(bounds[:-1], bounds[1:], strict=True))
        if inertia < best_inertia:
            best, best_inertia = km, inertia
    labels = np.concatenate(
        [best.predict(T[s:e]) for s, e in zip(bounds[:-1], bounds[1:], strict=True)]
    )
    return labels.astype(np.int64), best, float(best_inertia)


def select_lam(
    estimator,
    X,
    constraints,
    *,
    alphas=(0.1, 0.5, 1, 5, 10),
    holdout=0.2,
    random_state=None,
    select_params=None,
):
    """The paper's model selection (SPEC 1.7) for any estimator settings: hold out ``holdout`` of
    the constraints, pick ``alpha`` by the constraint error on them, then refit on all constraints.
    ``GIMCClustering(alpha="auto")`` does this inside ``fit``; this function is for other grids,
    hold-out shares or selection settings.

    ``select_params`` (e.g. ``{"max_iter": 5}``) are set on the selection fits only, to make the
    grid cheaper; the refit uses the estimator's own parameters.

    Returns
    -------
    estimator : the refitted clone (``alpha`` set to the winner)
    errors : dict alpha -> validation constraint error
    """
    from sklearn.base import clone

    r, c, v = (np.asarray(a) for a in constraints)
    check_scalar(holdout, "holdout", low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    lams = list(np.atleast_1d(np.asarray(alphas, dtype=object)).ravel())
    if not lams:
        raise param_error(
            "alphas", "must hold at least one value", lams, "e.g. alphas=(0.1, 1, 10)"
        )
    for lam in lams:
        check_scalar(lam, "alphas[i]", low=0.0, low_inclusive=False)
    rs = check_random_state(random_state)
    tr, va = split_constraints(r.size, holdout, np.random.default_rng(rs.randint(2**31 - 1)))
    errors = {}
    for lam in lams:
        m = clone(estimator).set_params(alpha=lam, **(select_params or {}))
        m.fit(X, constraints=(r[tr], c[tr], v[tr]))
        errors[lam] = constraint_error(m.labels_, r[va], c[va], v[va])
    best = min(errors, key=errors.get)
    return clone(estimator).set_params(alpha=best).fit(X, constraints=(r, c, v)), errors


def _constraints_in_memory(store, lam):
    """A constraint store's ``(rows, cols, values)`` in row-major order, for the selection
    (which holds out a random share of the pairs); refused by name above the cache budget."""
    from ooc_lowrank.engine import DEFAULT_CACHE_BYTES

    need = 24 * int(store.nnz or 0)  # int64 row, int64 col, float64 value
    if need > DEFAULT_CACHE_BYTES:
        raise param_error(
            "alpha", f"must be a number for constraint stores larger than the cache budget "
            f"({need / 2**20:.0f} MiB > {DEFAULT_CACHE_BYTES / 2**20:.0f} MiB; the selection "
            "holds the constraints in memory to hold out a random 20 % of them)", lam,
            "Pass alpha=1.0 (or the alpha_ of a fit on a sample of the constraints), or raise "
            "OOC_LOWRANK_CACHE_BYTES",
        )  # fmt: skip
    coo = store.read().tocoo()
    return coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float64)


@_base.params
class GIMCClustering(ClusterMixin, BaseEstimator, _SharedParams):
    """Semi-supervised clustering with GIMC (Algorithm 2, SPEC 1.5.5).

    Parameters
    ----------
    n_clusters : int, default=2
        k: clusters and the IMC rank.
    alpha : float, "auto" or sequence of float, default="auto"
        Regularization of W and H.  ``"auto"``: the paper's selection (SPEC 1.7): hold out a
        random 20 % of the constraints (seeded by ``random_state``), fit on the rest once per
        candidate, keep the ``alpha`` whose clustering violates the fewest held-out constraints
        (ties: the one nearest 1.0), then refit on all constraints.  Candidates
        (:data:`LAM_GRIDS`): (0.1, 0.5, 1) for ``features="fourier"``, where 5 and 10 never won
        on held-out constraints across four datasets; the paper's (0.1, 0.5, 1, 5, 10) for
        "identity" and "nystrom".  A sequence selects among its own candidates the same way; a
        number is used as it is.  A constraint store is read into memory for the selection
        (refused by name above the engine's cache budget).

        **Cost of the selection**: one fit per candidate on 80 % of the constraints with at
        most :data:`SELECT_ITER` = 5 outer iterations (the refit runs ``max_iter`` = 20), each
        with its k-means read-out; the training constraints are validated and blocked once for
        all candidates, and every candidate starts from the same feature maps, initial
        features and initialization, made once (and shares the CG preconditioner, see
        ``cg_iter``); the refit reuses the maps and initial features.  Measured with five
        candidates on four datasets (busy 2-core machine, docs/imc.md): the selection took
        1.3-1.4 times the refit; with the three Fourier candidates about 0.8 times, so
        ``alpha="auto"`` costs about 1.8 fits at a fixed ``alpha`` (Segment at 10n: 277
        selection passes and 367 for the refit, against 365 for a fit at ``alpha=1.0``;
        1,003 in all before issue 24's one-pass feature steps, docs/imc.md).
        ``selection_passes_`` and ``selection_time_`` report it; ``alpha=1.0`` skips it.
    features : {"fourier", "nystrom", "identity"}, default="fourier"
        Feature map of both sides; "identity" is the MCCC stand-in (SPEC 1.6).
    learn_features : bool, default=True
        GIMC-LFF; False gives IMC-RFF.
    n_features_map : int, default=500
        m: Fourier projections (2m features) or Nystrom landmarks.
    gamma : float or None, default=None
        RBF width; None: the median heuristic.
    max_iter : int, default=20
        Outer iterations of the IMC fit.
    cg_iter : int, default=5
        CG iterations per W- or H-step.  The CG is preconditioned
        (:class:`ooc_lowrank.imc.core.Preconditioner`: ``Phi^T diag(c) Phi (x) C + alpha I``,
        two extra passes and two eigendecompositions per fit, for feature maps of at most
        2048 features and in-memory constraints), so 5 iterations reach what plain CG reached
        in 20: Segment (10n, m = 500, alpha = 1) error 0.0196 in 558 passes against 0.0194 in
        1,162 with plain CG and 20; Mushroom 0 in both (574 against 1,170 passes).
    cg_tol : float, default=1e-3
        CG stops at residual cg_tol * ||r_0||.
    tol : float, default=1e-6
        Relative objective decrease under which the fit stops.
    readout : {"exact", "svds"}, default="exact"
        Left singular vectors of P Q^T from two thin QRs, or the paper's svds(Phi_U W).
    n_init : int, default=10
        k-means restarts.
    symmetrize : bool, default=False
        Add (j, i) for every constraint (i, j).
    block_rows : int or None, default=None
        Rows per block for in-memory inputs.
    cache_bytes : int or None, default=None
        Memory budget for the held feature matrices, as in :class:`InductiveMatrixCompletion`.
    random_state : int, RandomState, Generator or None, default=None
        Seed of the feature maps, the initialization and k-means.
    callback : callable(iteration, elapsed, objective) or None, default=None
        Called after every outer IMC iteration (and at the initialization, iteration 0).
    verbose : bool, default=False
        Log one line per outer IMC iteration at INFO level on the ``"ooc_lowrank"`` logger
        (DEBUG otherwise), for the selection fits and the final fit.

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
    embedding_ : ndarray of shape (n_samples, n_clusters)
    imc_ : InductiveMatrixCompletion
    alpha_ : float
        The ``alpha`` of the final fit (chosen or given).
    alpha_scores_ : dict or None
        Held-out constraint error per candidate ``alpha`` (None for a fixed ``alpha``).
    selection_passes_ : int
        Data passes spent choosing ``alpha`` (0 for a fixed ``alpha``); the refit's are
        ``imc_.n_passes_``.
    selection_time_ : float
        Seconds spent choosing ``alpha`` (0.0 for a fixed ``alpha``).

    Notes
    -----
    **scikit-learn's estimator checks** (``parametrize_with_checks``) assume ``fit(X, y)`` on
    samples and targets; this estimator's input is different. ``fit`` needs must-link / cannot-link
    ``constraints=`` (pairs of rows with a 0/1 value), which the clustering checks never pass (they
    call ``fit(X)``): without constraints the model is undefined (SPEC: the constraint matrix is
    what is completed), so the checks that fit do not apply. The API checks (clone, repr,
    ``get_params`` / ``set_params``, ``__init__`` storing only its parameters, tags) do apply and
    run in ``tests/test_sklearn_api.py``.
    """

    n_clusters: int = 2
    alpha: float | str = "auto"
    features: str = "fourier"
    learn_features: bool = True
    cg_iter: int = 5
    readout: str = "exact"
    n_init: int = 10
    symmetrize: bool = False

    def fit(self, X, y=None, *, constraints):
        """Cluster the rows of ``X`` (n, d; an array, CSR, or a feature store's ``X``) under
        ``constraints``: ``(rows, cols, values)`` or an ``(n, n)`` observation store (``coo``
        array ``obs``, streamed in row blocks).

        Values must be 0 or 1; indices in ``[0, n)``.  With ``alpha="auto"`` (or a list) ``alpha``
        is chosen on held-out constraints first (see the class docstring).  Returns ``self``.
        """
        from ooc_lowrank.engine import one_blas_thread

        # the driver's own algebra is small (QRs of n x k factors, k x k SVDs, k-means of
        # n x k rows, eigendecompositions run on one thread anyway): two BLAS threads made a
        # QR of Segment's 2310 x 7 factor 60 ms instead of 0.1 ms (8 per default fit)
        with one_blas_thread():
            return self._fit(X, constraints)

    def _fit(self, X, constraints):
        check_scalar(
            self.n_clusters, "n_clusters", kind=numbers.Integral, low=2,
            fix="Clustering needs at least 2 clusters",
        )
        check_scalar(self.n_init, "n_init", kind=numbers.Integral, low=1)
        if self.readout not in READOUTS:
            raise param_error("readout", f"must be one of {READOUTS}", self.readout)
        grid, lam = check_lam(self.alpha)
        if grid == "auto":
            if self.features not in LAM_GRIDS:  # IMC names the rule; before any work
                self._imc(1.0, 0, 0)._check_params()
            grid = LAM_GRIDS[self.features]
        X = features_of(X, "X")
        n = int(X.shape[0])
        if n < int(self.n_clusters):
            raise param_error(
                "n_clusters", f"must be <= the number of rows of X ({n})", self.n_clusters,
                "Ask for fewer clusters than there are rows to cluster",
            )  # fmt: skip
        rs = check_random_state(self.random_state)
        imc_seed, km_seed = rs.randint(2**31 - 1), rs.randint(2**31 - 1)
        store = _obs_handle(constraints, "constraints")
        if store is not None:
            if self.symmetrize:
                raise param_error(
                    "symmetrize", "needs in-memory constraints", True,
                    "Store both (i, j) and (j, i) in the constraint store, or pass arrays",
                )
            if grid is not None:  # the store's shape is checked before its values are read
                for side, what in enumerate(("row", "column")):
                    _side_features(X, store.shape[side], what, "X")
            cons = store if grid is None else _constraints_in_memory(store, self.alpha)
        elif not (isinstance(constraints, (tuple, list)) and len(constraints) == 3):
            raise TypeError(
                "constraints must be a (rows, cols, values) tuple of 1-D arrays or an "
                f"observation store; got {type(constraints).__name__}. Build one with "
                "sample_constraints(labels, c * n)"
            )
        else:
            cons = tuple(np.asarray(a) for a in constraints)
        full = self._symmetrized(cons)
        # validated (one pass) and blocked before any fitting work, then reused by the refit
        prepared = self._imc(1.0 if lam is None else lam, imc_seed, 0)._prepare(
            full, X, X, (n, n) if isinstance(full, tuple) else None, zero_one=True,
            name="constraints",
        )
        self.alpha_scores_, self.selection_passes_, self.selection_time_ = None, 0, 0.0
        maps = None  # the feature maps and initial features of the selection, for the refit
        if grid is not None:
            t0 = time.perf_counter()
            split = np.random.default_rng(rs.randint(2**31 - 1))
            maps = {}
            lam, self.alpha_scores_, self.selection_passes_ = self._select(
                X, cons, grid, imc_seed, km_seed, split, maps
            )
            self.selection_time_ = time.perf_counter() - t0
            maps["last"] = True
        self.alpha_ = lam
        imc = self._fit_imc(X, full, lam, imc_seed, int(self.max_iter), prepared, maps=maps)
        self.labels_, self.kmeans_, self.embedding_ = self._read_out(imc, self.n_init, km_seed)
        self.imc_ = imc
        return self

    def _symmetrized(self, cons):
        if not self.symmetrize or not isinstance(cons, tuple):
            return cons
        r, c, v = cons
        return np.concatenate([r, c]), np.concatenate([c, r]), np.concatenate([v, v])

    def _imc(self, lam, seed, max_iter):
        """The IMC this clustering runs: our shared parameters, the constraint matrix's two
        sides mapped alike, rank ``n_clusters``."""
        return InductiveMatrixCompletion(
            **_base.shared_params(
                self,
                InductiveMatrixCompletion,
                n_components=self.n_clusters,
                alpha=lam,
                row_map=self.features,
                col_map=self.features,
                max_iter=max_iter,
                random_state=seed,
            )
        )

    def _fit_imc(self, X, cons, lam, seed, max_iter, prepared, precondition=True, maps=None):
        """The IMC fit on ``prepared`` constraints (``_prepare``'s validated, blocked output),
        with preconditioned CG (``precondition``: True or a cache shared by fits at other
        ``alpha``, see :func:`ooc_lowrank.imc.core.fit_imc`); ``maps``: the feature maps and
        initial features shared by the selection's fits and the refit (see
        ``InductiveMatrixCompletion._fit_prepared``)."""
        imc = self._imc(lam, seed, max_iter)
        return imc._fit_prepared(*prepared, precondition=precondition, maps=maps)

    def _read_out(self, imc, n_init, seed):
        T = leading_subspace(imc.row_factors_, imc.col_factors_, self.n_clusters, self.readout)
        labels, km, _ = kmeans_blocks(T, self.n_clusters, n_init=n_init, random_state=seed)
        return labels, km, T

    def _select(self, X, cons, grid, imc_seed, km_seed, rng, maps=None):
        """The paper's selection (SPEC 1.7): fit on 80 % of the constraints for every ``alpha``
        of ``grid`` (``SELECT_ITER`` outer iterations each, the same feature-map seed and
        initialization, the training constraints validated and blocked once), score each
        clustering by the violated held-out constraints.  Returns ``(alpha, scores, passes)``.

        The candidates differ only in ``alpha``: the feature maps and their initial features
        (``maps``, kept for the refit), the initialization, the transposed constraints and the
        preconditioners are made by the first candidate's fit and reused by the others (the
        same bits as computing them again)."""
        r, c, v = cons
        tr, va = split_constraints(r.size, HOLDOUT, rng)
        train = self._symmetrized((r[tr], c[tr], v[tr]))
        n = int(X.shape[0])
        probe = self._imc(grid[0], imc_seed, 0)
        prepared = probe._prepare(train, X, X, (n, n), zero_one=True, name="constraints")
        max_iter = min(int(self.max_iter), SELECT_ITER)
        scores, passes = {}, 1  # the validation pass of _prepare
        shared = {}  # same maps, initialization and constraints: one preconditioner per side
        for lam in grid:
            imc = self._fit_imc(X, train, lam, imc_seed, max_iter, prepared, shared, maps)
            labels, _, _ = self._read_out(imc, self.n_init, km_seed)
            scores[lam] = constraint_error(labels, r[va], c[va], v[va])
            passes += int(imc.n_passes_)
        return best_lam(scores), scores, passes


__all__ = [
    "GIMCClustering",
    "clustering_error",
    "constraint_error",
    "kmeans_blocks",
    "leading_subspace",
    "best_lam",
    "LAM_GRIDS",
    "PAPER_LAM_GRID",
    "check_lam",
    "split_constraints",
    "sample_constraints",
    "select_lam",
]
