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

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClusterMixin

from ooc_lowrank._validation import check_random_state, check_scalar, param_error
from ooc_lowrank.glrl.estimator import _obs_handle
from ooc_lowrank.imc.estimator import InductiveMatrixCompletion, features_of

READOUTS = ("exact", "svds")
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
    lams=(0.1, 0.5, 1, 5, 10),
    holdout=0.2,
    random_state=None,
    select_params=None,
):
    """The paper's model selection (SPEC 1.7): hold out ``holdout`` of the constraints, pick
    ``lam`` by the constraint error on them, then refit on all constraints.

    ``select_params`` (e.g. ``{"max_iter": 5}``) are set on the selection fits only, to make the
    grid cheaper; the refit uses the estimator's own parameters.

    Returns
    -------
    estimator : the refitted clone (``lam`` set to the winner)
    errors : dict lam -> validation constraint error
    """
    from sklearn.base import clone

    r, c, v = (np.asarray(a) for a in constraints)
    check_scalar(holdout, "holdout", low=0.0, high=1.0, low_inclusive=False, high_inclusive=False)
    lams = list(np.atleast_1d(np.asarray(lams, dtype=object)).ravel())
    if not lams:
        raise param_error("lams", "must hold at least one value", lams, "e.g. lams=(0.1, 1, 10)")
    for lam in lams:
        check_scalar(lam, "lams[i]", low=0.0, low_inclusive=False)
    rs = check_random_state(random_state)
    perm = np.random.default_rng(rs.randint(2**31 - 1)).permutation(r.size)
    n_val = max(1, int(round(holdout * r.size)))
    va, tr = perm[:n_val], perm[n_val:]
    if tr.size == 0:
        raise param_error("constraints", "are too few to hold some out", r.size)
    errors = {}
    for lam in lams:
        m = clone(estimator).set_params(lam=lam, **(select_params or {}))
        m.fit(X, constraints=(r[tr], c[tr], v[tr]))
        errors[lam] = constraint_error(m.labels_, r[va], c[va], v[va])
    best = min(errors, key=errors.get)
    return clone(estimator).set_params(lam=best).fit(X, constraints=(r, c, v)), errors


class GIMCClustering(ClusterMixin, BaseEstimator):
    """Semi-supervised clustering with GIMC (Algorithm 2, SPEC 1.5.5).

    Parameters
    ----------
    n_clusters : int, default=2
        k: clusters and the IMC rank.
    lam : float, default=1.0
        Regularization of W and H (select it with ``select_lam``, the paper's protocol).
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
    cg_iter : int, default=20
        CG iterations per W- or H-step.
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
    random_state : int, RandomState, Generator or None, default=None
        Seed of the feature maps, the initialization and k-means.
    callback : callable(iteration, elapsed, objective) or None, default=None
        Called after every outer IMC iteration (and at the initialization, iteration 0).

    Attributes
    ----------
    labels_ : ndarray of shape (n_samples,)
    embedding_ : ndarray of shape (n_samples, n_clusters)
    imc_ : InductiveMatrixCompletion

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

    def __init__(
        self,
        *,
        n_clusters=2,
        lam=1.0,
        features="fourier",
        learn_features=True,
        n_features_map=500,
        gamma=None,
        max_iter=20,
        cg_iter=20,
        cg_tol=1e-3,
        tol=1e-6,
        readout="exact",
        n_init=10,
        symmetrize=False,
        block_rows=None,
        random_state=None,
        callback=None,
    ):
        self.n_clusters = n_clusters
        self.lam = lam
        self.features = features
        self.learn_features = learn_features
        self.n_features_map = n_features_map
        self.gamma = gamma
        self.max_iter = max_iter
        self.cg_iter = cg_iter
        self.cg_tol = cg_tol
        self.tol = tol
        self.readout = readout
        self.n_init = n_init
        self.symmetrize = symmetrize
        self.block_rows = block_rows
        self.random_state = random_state
        self.callback = callback

    def fit(self, X, y=None, *, constraints):
        """Cluster the rows of ``X`` (n, d; an array, CSR, or a feature store's ``X``) under
        ``constraints``: ``(rows, cols, values)`` or an ``(n, n)`` observation store (``coo``
        array ``obs``, streamed in row blocks).

        Values must be 0 or 1; indices in ``[0, n)``.  Returns ``self``.
        """
        check_scalar(
            self.n_clusters, "n_clusters", kind=numbers.Integral, low=2,
            fix="Clustering needs at least 2 clusters",
        )
        check_scalar(self.n_init, "n_init", kind=numbers.Integral, low=1)
        if self.readout not in READOUTS:
            raise param_error("readout", f"must be one of {READOUTS}", self.readout)
        X = features_of(X, "X")
        n = int(X.shape[0])
        if n < int(self.n_clusters):
            raise param_error(
                "n_clusters", f"must be <= the number of rows of X ({n})", self.n_clusters,
                "Ask for fewer clusters than there are rows to cluster",
            )  # fmt: skip
        rs = check_random_state(self.random_state)
        store = _obs_handle(constraints, "constraints")
        if store is not None:
            if self.symmetrize:
                raise param_error(
                    "symmetrize", "needs in-memory constraints", True,
                    "Store both (i, j) and (j, i) in the constraint store, or pass arrays",
                )
            cons, shape = store, None
        elif not (isinstance(constraints, (tuple, list)) and len(constraints) == 3):
            raise TypeError(
                "constraints must be a (rows, cols, values) tuple of 1-D arrays or an "
                f"observation store; got {type(constraints).__name__}. Build one with "
                "sample_constraints(labels, c * n)"
            )
        else:
            r, c, v = (np.asarray(a) for a in constraints)
            if self.symmetrize:
                r, c, v = np.concatenate([r, c]), np.concatenate([c, r]), np.concatenate([v, v])
            cons, shape = (r, c, v), (n, n)
        imc = InductiveMatrixCompletion(
            n_components=self.n_clusters,
            lam=self.lam,
            row_map=self.features,
            col_map=self.features,
            n_features_map=self.n_features_map,
            gamma=self.gamma,
            learn_features=self.learn_features,
            max_iter=self.max_iter,
            cg_iter=self.cg_iter,
            cg_tol=self.cg_tol,
            tol=self.tol,
            block_rows=self.block_rows,
            random_state=rs.randint(2**31 - 1),
            callback=self.callback,
        )
        obs, shape, Br, Bc = imc._prepare(cons, X, X, shape, zero_one=True, name="constraints")
        imc._fit_prepared(obs, shape, Br, Bc)
        T = leading_subspace(imc.row_factors_, imc.col_factors_, self.n_clusters, self.readout)
        self.labels_, self.kmeans_, _ = kmeans_blocks(
            T, self.n_clusters, n_init=self.n_init, random_state=rs.randint(2**31 - 1)
        )
        self.embedding_ = T
        self.imc_ = imc
        return self


__all__ = [
    "GIMCClustering",
    "clustering_error",
    "constraint_error",
    "kmeans_blocks",
    "leading_subspace",
    "sample_constraints",
    "select_lam",
]
