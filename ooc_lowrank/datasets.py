"""In-memory loaders of the public observed-entry datasets used by the GLRL papers.

They return ``(rows, cols, values)`` NumPy arrays (0-based ids) that
:class:`ooc_lowrank.glrl.GreedyLowRank` accepts with ``shape=``.  For data larger than memory,
convert the files to a store instead (``ooc-lowrank convert movielens|snap``).

* :func:`load_movielens` -- a MovieLens 100K file (``u.data``, ``u1.base`` ...; plain or gzip).
* :func:`load_movielens_side_features` -- MovieLens 100K user and item side features
  (``u.user``, ``u.item``) in id order, for two-sided inductive matrix completion.
* :func:`load_epinions` -- the Epinions signed network as the paper's rectangular
  42,470 x 40,700 truster x trustee matrix.
* :func:`load_yahoo` -- a yahoo multi-label web-page set (Arts, Business, Health, ...; the
  KernelMaxide paper's data) as dense features and 0/1 labels.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

__all__ = [
    "MOVIELENS_100K_SHAPE",
    "YAHOO_NAMES",
    "load_epinions",
    "load_movielens",
    "load_movielens_side_features",
    "load_yahoo",
]

#: The yahoo sets by their usual names (``load_yahoo`` also takes a path or another name).
YAHOO_NAMES = ("arts", "business", "health")

#: (users, movies) of MovieLens 100K; pass it as ``shape=`` so every fold indexes one matrix.
MOVIELENS_100K_SHAPE = (943, 1682)


def _open(path):
    path = os.fspath(path)
    return gzip.open(path, "rt") if path.endswith(".gz") else open(path)


def load_movielens(path):
    """Ratings of a MovieLens file ``user<TAB>item<TAB>rating<TAB>timestamp`` (1-based ids).

    Parameters
    ----------
    path : str or PathLike
        ``u.data``, ``u1.base``, ``u1.test`` ... (``.gz`` is read as gzip).

    Returns
    -------
    rows, cols : ndarray of shape (n_ratings,), int64
        0-based user and item ids.
    values : ndarray of shape (n_ratings,), float64
        The ratings.
    """
    with _open(path) as f:
        a = np.loadtxt(f, dtype=np.int64, ndmin=2)
    if a.shape[1] < 3:
        raise ValueError(
            f"path {os.fspath(path)!r} must have at least 3 columns (user item rating); got "
            f"{a.shape[1]}. Pass a MovieLens u.data / uN.base / uN.test file"
        )
    return a[:, 0] - 1, a[:, 1] - 1, a[:, 2].astype(np.float64)


def load_movielens_side_features(folder, *, ids=False, constant=True):
    """User and item side features of MovieLens 100K, one row per 0-based id.

    Users (``u.user``): age in the 7 MovieLens-1M buckets, gender and occupation, one-hot
    (the parser of the ``movielens_views`` converter, :func:`ooc_lowrank.io.multiview.read_users`;
    occupations from ``u.occupation`` when present).  Items (``u.item``): the 19 genre flags.

    Parameters
    ----------
    folder : str or PathLike
        The folder holding ``u.user``, ``u.item`` (and ``u.occupation``).
    ids : bool, default=False
        Prepend a one-hot id block (each user / item its own column), so that the model can
        fit every id beside the shared side features (then it is no longer cold-start capable).
    constant : bool, default=True
        Append a column of ones (lets a bilinear model without intercepts fit the mean and
        per-user / per-item offsets).

    Returns
    -------
    users : scipy.sparse.csr_matrix of shape (943, d_users)
    items : scipy.sparse.csr_matrix of shape (1682, d_items)
    """
    import scipy.sparse as sp

    from ooc_lowrank.io.multiview import read_items, read_users

    folder = os.fspath(folder)
    occ = os.path.join(folder, "u.occupation")
    uids, users, _ = read_users(os.path.join(folder, "u.user"), occ if os.path.exists(occ) else None)
    iids, items = read_items(os.path.join(folder, "u.item"))
    out = []
    for got, side in ((uids, users), (iids, items)):
        if not np.array_equal(got, np.arange(1, got.size + 1)):
            raise ValueError(
                f"folder {folder!r}: side-file ids must be 1..n in order; got ids from "
                f"{got.min()} to {got.max()} ({got.size} rows). Pass an unmodified MovieLens "
                "100K folder"
            )
        blocks = [sp.identity(got.size, format="csr")] if ids else []
        blocks.append(side)
        if constant:
            blocks.append(sp.csr_matrix(np.ones((got.size, 1))))
        out.append(sp.hstack(blocks, format="csr"))
    return out[0], out[1]


def load_epinions(path, max_edges=None):
    """Edges of the SNAP file as the paper's rectangular truster x trustee matrix.

    Protocol (reproduces the paper's printed size exactly, 42,470 x 40,700): keep the rows
    (trusters) with at least two observations, then, among their edges, the columns (trustees)
    with at least two observations; rows and columns are re-indexed separately.  Self-loops
    are kept (removing them gives 41,978 x 40,675, not the printed size); repeated (i, j)
    pairs are reduced to their last occurrence (the file has none).

    Parameters
    ----------
    path : str or PathLike
        ``soc-sign-epinions.txt`` (``.gz`` is read as gzip).
    max_edges : int, optional
        Read only the first ``max_edges`` edges of the file (for quick runs).

    Returns
    -------
    rows, cols : ndarray of shape (n_edges,), int64
    values : ndarray of shape (n_edges,), float64
        Signs in {-1, +1}.
    shape : (int, int)
    info : dict
        Protocol, shape, edge count, dropped repeats, fraction of positive signs.
    """
    with _open(path) as f:
        a = np.loadtxt(f, dtype=np.int64, comments="#", ndmin=2)
    if max_edges is not None:
        a = a[:max_edges]
    r, c, s = a[:, 0], a[:, 1], a[:, 2].astype(np.float64)
    n = int(max(r.max(), c.max()) + 1)
    key = r * n + c
    _, last = np.unique(key[::-1], return_index=True)
    idx = np.sort(len(key) - 1 - last)
    n_dup = len(key) - idx.size
    r, c, s = r[idx], c[idx], s[idx]
    out_deg = np.bincount(r, minlength=n)
    rows = np.flatnonzero(out_deg >= 2)
    keep = out_deg[r] >= 2
    r, c, s = r[keep], c[keep], s[keep]
    in_deg = np.bincount(c, minlength=n)
    cols = np.flatnonzero(in_deg >= 2)
    keep = in_deg[c] >= 2
    r, c, s = r[keep], c[keep], s[keep]
    r, c = np.searchsorted(rows, r), np.searchsorted(cols, c)
    shape = (int(rows.size), int(cols.size))
    return (
        r,
        c,
        s,
        shape,
        {
            "protocol": "rows with >= 2 observations, then columns with >= 2 observations "
            "among them (self-loops kept); rectangular truster x trustee matrix",
            "shape": list(shape),
            "n_edges": int(r.size),
            "n_repeated_dropped": int(n_dup),
            "frac_positive": float(np.mean(s > 0)),
        },
    )


def _data_root():
    return os.environ.get(
        "OOC_LOWRANK_DATA", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
    )


def load_yahoo(path_or_name, *, folder=None, dtype=np.float64):
    """All instances of a yahoo ``.mat`` file (its ``train_*`` and ``test_*`` parts stacked, as
    the KernelMaxide paper's protocol re-splits them) and their 0/1 labels.

    Parameters
    ----------
    path_or_name : str or PathLike
        A ``.mat`` path, or a set name (``"arts"``, ``"Business"``, ``"health"`` ...; any case)
        looked up as ``<folder>/<Name>.mat``.
    folder : str or PathLike, optional
        Where names are looked up; default ``$OOC_LOWRANK_DATA/yahoo`` (data folder
        ``../shared/data`` next to the repository when the variable is unset).
    dtype : float dtype, default=float64
        Of ``X``.

    Returns
    -------
    X : ndarray of shape (n_samples, n_features)
    Y : ndarray of shape (n_samples, n_labels), float64, entries 0 / 1
    """
    import scipy.io as sio

    path = os.fspath(path_or_name)
    if not (path.endswith(".mat") or os.path.sep in path):
        folder = os.fspath(folder) if folder is not None else os.path.join(_data_root(), "yahoo")
        hits = (
            [f for f in os.listdir(folder) if f.lower() == f"{path.lower()}.mat"]
            if os.path.isdir(folder)
            else []
        )
        if not hits:
            raise FileNotFoundError(
                f"path_or_name {path_or_name!r}: no {path}.mat (any case) in {folder!r}; pass "
                "the .mat path, or set OOC_LOWRANK_DATA to the folder holding yahoo/"
            )
        path = os.path.join(folder, hits[0])
    d = sio.loadmat(path)
    missing = [k for k in ("train_data", "test_data", "train_target", "test_target") if k not in d]
    if missing:
        raise ValueError(
            f"path_or_name {path!r} must hold train_data, test_data, train_target and "
            f"test_target (a yahoo .mat); missing {missing}"
        )
    X = np.vstack([d["train_data"], d["test_data"]]).astype(dtype)
    Y = (np.hstack([d["train_target"], d["test_target"]]).T > 0).astype(np.float64)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"path_or_name {path!r}: {X.shape[0]} instances but labels for {Y.shape[0]}; the "
            "targets must be labels x instances"
        )
    return X, Y
