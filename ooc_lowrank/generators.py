"""Synthetic dataset generators that stream straight into a dataset store.

Every generator writes any number of rows with bounded memory, is seeded, and produces **the same
stored values whatever the storage block size**: rows are generated in fixed generation chunks of
:data:`GEN_CHUNK_ROWS` rows, chunk ``c`` drawing from its own stream
``np.random.default_rng(SeedSequence([seed, ROW_STREAM, c]))``; parameters shared by all rows
(projections, label weights, column factors) come from separate streams
``SeedSequence([seed, PARAM_STREAM, tag])``.  ``block_rows`` only sets the store's layout.

Signature of every generator::

    generate_<kind>(dest, *, n_rows, seed=0, block_rows=None, overwrite=False, progress=None,
                    **kind_options) -> Dataset

``progress`` is ``None`` or a callable receiving the number of rows written so far.  The store's
attributes hold ``generator`` (the kind), ``params`` (every option, seed and n_rows included) and
``gen_chunk_rows``.  Kinds (options are listed in each function's docstring):

``multilabel``
    Features ``"X"`` (dense float32, or sparse CSR float32 when ``density`` is given) and 0/1
    labels ``"Y"`` (CSR float32): each row's labels are the top ``k_i >= 1`` of a random-Fourier
    (RBF-kernel) score of its features, so they depend non-linearly on ``X``.  Optional
    multi-class target ``"y"`` (dense ``(n, 1)`` float64 class ids).
``imc_toy``
    The IMC toy of GIMC Figure 1 (SPEC 1.7): ``A = X Y^T + N``.
``lowrank``
    A rank-``r`` matrix plus Gaussian noise observed on sampled entries (COO ``"obs"``), row side
    features ``"X"`` and true row factors ``"U_true"``; the column side lives in a companion store.
``signed``
    A signed directed network (rows = columns = nodes), COO ``"obs"`` with values in {-1, +1}.
``multiview``
    Dense views ``"X0"``, ``"X1"``... and a target ``"y"`` made of cross-view interactions (the
    multi-view machine model, SPEC 3.2).

Column side of ``lowrank`` and ``imc_toy``
    A dataset's arrays all share its rows, so column-side arrays (column features ``"X"``, true
    column factors ``"V_true"``) are written as a **companion dataset** whose rows are the
    columns: ``<dest without .zarr>.cols.zarr`` (or ``<dest>.cols``).  It is a feature store
    (``fit imc ... --col-features NAME.cols.zarr`` reads its ``"X"``; companions written before
    2026-11-26 named the features ``"Y"`` and are still read).  Its name is in the main
    store's attribute ``"columns_store"``; :func:`open_columns` opens it.  The companion is written
    (atomically) before the main store.  Generating observed entries needs the column factors for
    every column, so these generators hold ``n_cols x rank`` float64 (lowrank) or
    ``n_cols x n_features`` (imc_toy) in memory: memory is bounded in ``n_rows`` and linear in
    ``n_cols``.  ``signed`` hashes each node's latent vector from its id instead, so its memory is
    bounded in the number of nodes too.
"""

from __future__ import annotations

import inspect
import logging
import math
import numbers
import os
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from ._signature import keyword_options, with_signature
from ._validation import check_scalar
from .storage import (
    Dataset,
    DatasetWriter,
    _is_url,
    check_destination,
    open_dataset,
    open_written,
)

__all__ = [
    "GENERATORS",
    "GEN_CHUNK_ROWS",
    "columns_store_url",
    "generate",
    "generate_imc_toy",
    "generate_lowrank",
    "generate_multilabel",
    "generate_multiview",
    "generate_signed",
    "open_columns",
]

logger = logging.getLogger("ooc_lowrank")

#: Rows per generation chunk.  Part of the definition of every generator's output (changing it
#: changes the data); independent of the store's ``block_rows``.
GEN_CHUNK_ROWS = 4096
_ROW_STREAM = 1
_COL_STREAM = 2
_PARAM_STREAM = 3
#: Largest number of values stored in a store attribute (ground-truth parameters of multiview).
_MAX_ATTR_VALUES = 100_000


# ---------------------------------------------------------------------------------------------
# randomness
# ---------------------------------------------------------------------------------------------


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise TypeError(f"seed must be a non-negative integer; got {seed!r}")
    return int(seed)


def _chunk_rng(seed, stream, index):
    return np.random.default_rng(np.random.SeedSequence([seed, stream, int(index)]))


def _param_rng(seed, tag):
    return np.random.default_rng(np.random.SeedSequence([seed, _PARAM_STREAM, int(tag)]))


_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLD = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x):
    """Vectorised splitmix64 finaliser on a uint64 array (wrap-around arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLD
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def _hash_normal(seed, tag, ids, n_dims):
    """Standard normal ``(len(ids), n_dims)`` that depends only on (seed, tag, id, dim).

    Counter-based (splitmix64 + Box-Muller), so the latent vector of any node can be computed
    on demand in any order without holding all of them in memory.
    """
    ids = np.asarray(ids, dtype=np.uint64)
    key = _splitmix64(np.array([(seed * 1_000_003 + tag) % 2**64], dtype=np.uint64))[0]
    ctr = ids[:, None] * np.uint64(2 * n_dims) + np.arange(2 * n_dims, dtype=np.uint64)[None, :]
    h = _splitmix64(ctr ^ key)
    u = (h >> np.uint64(11)).astype(np.float64) * (1.0 / 2**53)  # [0, 1)
    u1, u2 = 1.0 - u[:, 0::2], u[:, 1::2]  # u1 in (0, 1]
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)


def _hash_int(seed, tag, ids, high):
    ids = np.asarray(ids, dtype=np.uint64)
    key = _splitmix64(np.array([(seed * 1_000_003 + tag) % 2**64], dtype=np.uint64))[0]
    return (_splitmix64(ids ^ key) % np.uint64(high)).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# building blocks
# ---------------------------------------------------------------------------------------------


def _rff(x, omega, phase):
    """Random Fourier features of the RBF kernel: ``sqrt(2/D) cos(x omega + phase)``.

    Computed in the dtype of ``omega`` (float32 is ~20x faster for ``cos`` here).
    """
    x = x.astype(omega.dtype, copy=False)
    z = x @ omega if not sp.issparse(x) else np.asarray(x @ omega)
    z += phase
    np.cos(z, out=z)
    z *= omega.dtype.type(math.sqrt(2.0 / omega.shape[1]))
    return z


def _sorted_unique(a):
    # sort + diff: much faster than np.unique (hash based in NumPy >= 2.3) on int64 keys
    a = np.sort(a)
    if a.size:
        a = a[np.concatenate(([True], a[1:] != a[:-1]))]
    return a


def _sample_entries(rng, counts, n_cols):
    """Distinct column indices per row: a uniform ``counts[i]``-subset of ``range(n_cols)``.

    Returns the sorted keys ``row_local * n_cols + col`` (rows ascending, columns ascending
    within a row, no duplicates).  Rows asking for more than half the columns sample the
    complement instead, so the rejection loop always converges fast.
    """
    m = counts.size
    n = np.int64(n_cols)
    counts = np.minimum(counts.astype(np.int64), n)
    dense_rows = counts > n // 2
    want = np.where(dense_rows, n - counts, counts)  # what the rejection loop samples
    rows = np.arange(m, dtype=np.int64)
    keys = np.repeat(rows, want) * n + rng.integers(0, n, size=int(want.sum()), dtype=np.int64)
    while True:
        keys = _sorted_unique(keys)
        deficit = want - np.bincount(keys // n, minlength=m)
        if not deficit.any():
            break
        extra = np.repeat(rows, deficit)
        keys = np.concatenate(
            [keys, extra * n + rng.integers(0, n, size=extra.size, dtype=np.int64)]
        )
    if dense_rows.any():
        drows = np.flatnonzero(dense_rows)
        mask = np.ones((drows.size, int(n)), dtype=bool)
        krow = keys // n
        sel = dense_rows[krow]
        pos = np.searchsorted(drows, krow[sel])
        mask[pos, keys[sel] % n] = False
        r, c = np.nonzero(mask)
        keys = np.concatenate([keys[~sel], drows[r] * n + c])
        keys.sort()
    return keys


def _obs_counts(rng, m, n_cols, density, n_obs_per_row):
    if n_obs_per_row is not None:
        return np.full(m, min(int(n_obs_per_row), n_cols), dtype=np.int64)
    return rng.binomial(n_cols, density, size=m).astype(np.int64)


def _csr_from_keys(keys, values, m, n_cols, col_map=None):
    n = np.int64(max(n_cols, 1))
    row, col = keys // n, keys % n
    if col_map is not None:
        col = col_map(row, col)
    indptr = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(row, minlength=m), out=indptr[1:])
    return sp.csr_matrix((values, col, indptr), shape=(m, n_cols))


def _check_obs_options(density, n_obs_per_row, default_per_row, n_cols):
    if density is not None and n_obs_per_row is not None:
        raise ValueError(
            "give either density or n_obs_per_row, not both; got "
            f"density={density!r}, n_obs_per_row={n_obs_per_row!r}"
        )
    if density is not None:
        check_scalar(density, "density", low=0.0, high=1.0)
        return float(density), None
    if n_obs_per_row is None:
        n_obs_per_row = min(default_per_row, n_cols)
    check_scalar(n_obs_per_row, "n_obs_per_row", kind=numbers.Integral, low=0)
    return None, int(n_obs_per_row)


def _int_opt(value, name, low=0):
    return int(check_scalar(value, name, kind=numbers.Integral, low=low))


def _real_opt(value, name, low=None, high=None, low_inclusive=True):
    return float(check_scalar(value, name, low=low, high=high, low_inclusive=low_inclusive))


def _jsonable(v):
    if isinstance(v, (tuple, list)):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (type, np.dtype)):
        return np.dtype(v).name
    return v


def columns_store_url(dest) -> str:
    """Location of the companion (column-side) store of ``dest``."""
    dest = str(dest).rstrip("/")
    if dest.endswith(".zarr"):
        return dest[: -len(".zarr")] + ".cols.zarr"
    return dest + ".cols"


def open_columns(ds: Dataset) -> Dataset:
    """Open the column-side companion store of a ``lowrank`` / ``imc_toy`` dataset."""
    name = ds.attrs.get("columns_store")
    if not name:
        raise ValueError(
            f"store {ds.url!r} has no companion column store (attribute 'columns_store' is missing)"
        )
    url = str(ds.url).rstrip("/")
    head = url.rpartition("/")[0] if _is_url(url) else os.path.dirname(os.path.abspath(url))
    return open_dataset(f"{head}/{name}" if _is_url(url) else os.path.join(head, name))


class _Job:
    """One generator call's shared arguments, checked, and its streaming writes.

    ``args`` is the generator's bound arguments (:func:`_generator`): every argument but ``dest``,
    ``block_rows``, ``overwrite`` and ``progress`` is recorded in the store's attributes.  The
    destination (and, with ``companion``, the column store next to it) is checked before any work:
    a store there is replaced only with ``overwrite``.
    """

    def __init__(self, kind, args, companion=False):
        self.kind = kind
        self.dest = args["dest"]
        self.block_rows, self.overwrite, self.progress = (
            args["block_rows"], args["overwrite"], args["progress"]
        )
        own = ("dest", "block_rows", "overwrite", "progress")
        self.params = {k: v for k, v in args.items() if k not in own}
        self.n_rows = _int_opt(args["n_rows"], "n_rows", low=1)
        self.seed = _check_seed(args["seed"])
        targets = [str(self.dest)] + ([columns_store_url(self.dest)] if companion else [])
        for t in targets:
            check_destination(t, overwrite=self.overwrite)

    def attrs(self, suffix="", **extra):
        return {
            "generator": self.kind + suffix,
            "params": {k: _jsonable(v) for k, v in self.params.items()},
            "gen_chunk_rows": GEN_CHUNK_ROWS,
            **extra,
        }

    def _stream(self, url, n_rows, block_rows, progress, arrays, make_chunk, attrs, stream):
        """Drive a DatasetWriter over ``n_rows`` in gen chunks of ``GEN_CHUNK_ROWS`` rows."""
        with DatasetWriter(
            url, block_rows=block_rows, attrs=attrs, overwrite=self.overwrite, expected_rows=n_rows
        ) as w:  # the size is checked against the free disk space before the first block
            for name, kind, n_cols, dtype in arrays:
                getattr(w, f"add_{kind}")(name, n_cols=n_cols, dtype=dtype)
            for ci, start in enumerate(range(0, n_rows, GEN_CHUNK_ROWS)):
                stop = min(start + GEN_CHUNK_ROWS, n_rows)
                w.append(**make_chunk(_chunk_rng(self.seed, stream, ci), start, stop))
                if progress is not None:
                    progress(stop)
        return open_written(url)

    def write(self, arrays, make_chunk, **extra_attrs):
        """The row store: ``make_chunk(rng, start, stop) -> {name: block}`` per gen chunk."""
        attrs = self.attrs(**extra_attrs)
        return self._stream(self.dest, self.n_rows, self.block_rows, self.progress, arrays,
                            make_chunk, attrs, _ROW_STREAM)

    def write_columns(self, n_cols, *, arrays, make_chunk):
        """Write the companion column store; return its arrays stacked in memory, and its URL."""
        url = columns_store_url(self.dest)
        kept = {}

        def wrapped(rng, start, stop):
            blocks = make_chunk(rng, start, stop)
            for k, v in blocks.items():
                kept.setdefault(k, []).append(v)
            return blocks

        self._stream(url, n_cols, None, None, arrays, wrapped, self.attrs(".columns"), _COL_STREAM)
        return {k: np.concatenate(v) for k, v in kept.items()}, url


#: the options every generator takes, with their defaults (``n_rows``: the generator's)
_SHARED = {"seed": 0, "block_rows": None, "overwrite": False, "progress": None}


def _generator(kind, companion=False, n_rows=inspect.Parameter.empty):
    """Decorator for a generator body ``fn(job, *, <its own options>)``.

    The public function has the module doc's signature ``(dest, *, n_rows, seed=0,
    block_rows=None, overwrite=False, progress=None, <its own options>)`` (``n_rows`` required
    unless given here); it checks the shared arguments and the destination in a :class:`_Job`
    (which records every option in the store's attributes) and hands the job to ``fn``, so the
    generators do not each repeat them."""

    def decorate(fn):
        sig = inspect.signature(fn)
        own = [n for n in sig.parameters if n != "job"]
        params = [inspect.Parameter("dest", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        params += keyword_options({"n_rows": n_rows, **_SHARED})
        params += [sig.parameters[n] for n in own]

        def body(args):
            job = _Job(kind, args, companion=companion)
            return fn(job, **{n: args[n] for n in own})

        return with_signature(fn, params, body)

    return decorate


# ---------------------------------------------------------------------------------------------
# (a) multi-label
# ---------------------------------------------------------------------------------------------


def _top_columns(s, k):
    """Per row of ``s`` ``(m, L)``, the columns of its ``k`` largest values in decreasing order
    (ties by column, as a stable ``argsort(-s)`` orders them): ``argsort(-s)[:, :k]`` without
    sorting all ``L`` columns (a partition, then a sort of the ``k`` kept ones)."""
    m, L = s.shape
    if k >= L or m == 0:
        return np.argsort(-s, axis=1, kind="stable")
    kth = -np.partition(-s, k - 1, axis=1)[:, k - 1 : k]  # each row's k-th largest value
    above = s > kth
    tied = s == kth  # of the values equal to the k-th, the lowest columns, as argsort keeps them
    need = k - above.sum(axis=1, keepdims=True)
    chosen = above | tied
    extra = np.flatnonzero(tied.sum(axis=1, keepdims=True)[:, 0] > need[:, 0])
    if extra.size:  # rows whose k-th value is tied past k: keep the lowest tied columns
        chosen[extra] = above[extra] | (tied[extra] & (np.cumsum(tied[extra], axis=1) <= need[extra]))
    part = np.nonzero(chosen)[1].reshape(m, k)  # k columns per row, increasing
    vals = np.take_along_axis(s, part, axis=1)
    return np.take_along_axis(part, np.argsort(-vals, axis=1, kind="stable"), axis=1)


@_generator("multilabel")
def generate_multilabel(
    job,
    *,
    n_features=100,
    density=None,
    n_labels=50,
    labels_per_row=3.0,
    latent_dim=8,
    feature_noise=0.1,
    gamma=None,
    n_random_features=256,
    label_skew=0.5,
    label_noise=0.05,
    n_classes=0,
    n_topics=20,
) -> Dataset:
    """Multi-label data whose labels depend non-linearly (RBF kernel) on the features.

    Each row's score for label ``l`` is ``s_l(x) = phi(x) . w_l + b_l + noise``, where ``phi`` are
    ``n_random_features`` random Fourier features of the RBF kernel ``exp(-gamma |x - x'|^2)``
    (``omega ~ N(0, 2 gamma I)``, the GIMC-LFF initialisation), ``w_l ~ N(0, I)`` and
    ``b_l ~ label_skew * N(0, 1)`` (label popularity).  The row gets its top ``k_i`` labels,
    ``k_i = 1 + Poisson(labels_per_row - 1)`` clipped to ``n_labels``: every row has at least one
    label.

    Parameters
    ----------
    dest : str
        Store location (path or fsspec URL).
    n_rows : int
        Number of samples.
    seed : int, default 0
    block_rows : int, optional
        Rows per stored block (layout only; values do not depend on it).
    overwrite : bool, default False
    progress : callable(rows_done), optional
    n_features : int, default 100
        Feature dimension ``d``.
    density : float, optional
        If given, ``"X"`` is sparse CSR with on average ``density * n_features`` non-zeros per
        row (at least one), drawn from ``n_topics`` topics (each row mostly uses the features of
        its topic, so rows of a topic overlap) with positive values; rows are L2-normalised.
        If ``None``, ``"X"`` is dense: ``x = z A + feature_noise * e`` with a
        ``latent_dim``-dimensional Gaussian ``z`` and a fixed random ``A`` (unit-variance
        coordinates), so that the label function is learnable from moderate samples.
    n_labels : int, default 50
        Number of labels; 0 writes no ``"Y"`` (only ``"y"``, which then needs ``n_classes``).
    labels_per_row : float, default 3.0
        Mean number of labels per row (>= 1).
    latent_dim : int, default 8
        Dimension of the latent ``z`` of dense features (capped at ``n_features``).
    feature_noise : float, default 0.1
        Isotropic noise added to dense features.
    gamma : float, optional
        RBF parameter.  Default ``1 / n_features`` (dense; squared distances are about
        ``2 n_features``) or ``1.0`` (sparse, unit-norm rows).
    n_random_features : int, default 256
        Number of random Fourier features defining the scores.
    label_skew : float, default 0.5
        Standard deviation of the per-label offsets (skewed label frequencies).
    label_noise : float, default 0.05
        Standard deviation of the noise added to scores before taking the top labels.
    n_classes : int, default 0
        If >= 2, also write ``"y"`` dense ``(n, 1)`` float64: the class ``argmax_c`` of another
        RBF score (a multi-class target).
    n_topics : int, default 20
        Topics of sparse features.

    Returns
    -------
    Dataset
        Arrays ``"X"`` ``(n_rows, n_features)`` float32 (dense or csr), ``"Y"``
        ``(n_rows, n_labels)`` csr float32 of ones, optionally ``"y"`` ``(n_rows, 1)`` float64.
    """
    seed = job.seed
    d = _int_opt(n_features, "n_features", low=1)
    L = _int_opt(n_labels, "n_labels", low=0)
    C = _int_opt(n_classes, "n_classes", low=0)
    if C == 1:
        raise ValueError("n_classes must be 0 (no class target) or >= 2; got 1")
    if L == 0 and C == 0:
        raise ValueError("n_labels=0 needs n_classes >= 2 (otherwise nothing would be written)")
    lpr = _real_opt(labels_per_row, "labels_per_row", low=1.0)
    q = min(_int_opt(latent_dim, "latent_dim", low=1), d)
    noise = _real_opt(feature_noise, "feature_noise", low=0.0)
    D = _int_opt(n_random_features, "n_random_features", low=1)
    skew = _real_opt(label_skew, "label_skew", low=0.0)
    lnoise = _real_opt(label_noise, "label_noise", low=0.0)
    sparse = density is not None
    if sparse:
        density = _real_opt(density, "density", low=0.0, high=1.0, low_inclusive=False)
        T = _int_opt(n_topics, "n_topics", low=1)
    g = (
        (1.0 if sparse else 1.0 / d)
        if gamma is None
        else _real_opt(gamma, "gamma", low=0.0, low_inclusive=False)
    )
    job.params["gamma"] = g

    # shared parameters, one stream each
    f32 = np.float32
    omega = _param_rng(seed, 1).normal(0.0, math.sqrt(2.0 * g), size=(d, D)).astype(f32)
    phase = _param_rng(seed, 2).uniform(0.0, 2.0 * np.pi, size=D).astype(f32)
    W = _param_rng(seed, 3).standard_normal((D, L)).astype(f32)
    b = (skew * _param_rng(seed, 4).standard_normal(L)).astype(f32)
    if C:
        Wc = _param_rng(seed, 5).standard_normal((D, C)).astype(f32)
    if sparse:
        # each topic favours a random set of about 5% of the features (at least 5)
        per_topic = max(5, int(round(0.05 * d)))
        topic_feats = np.stack(
            [
                _param_rng(seed, 100 + t).choice(d, size=min(per_topic, d), replace=False)
                for t in range(T)
            ]
        )
    else:
        A = (_param_rng(seed, 6).standard_normal((q, d)) / math.sqrt(q)).astype(f32)

    def features(rng, m):
        if not sparse:
            x = rng.standard_normal((m, q), dtype=f32) @ A
            if noise:
                e = rng.standard_normal((m, d), dtype=f32)
                e *= f32(noise)
                x += e
            return x
        nnz = np.maximum(rng.poisson(density * d, size=m), 1)
        nnz = np.minimum(nnz, d)
        topic = rng.integers(0, T, size=m)
        rows = np.repeat(np.arange(m, dtype=np.int64), nnz)
        from_topic = rng.random(rows.size) < 0.8
        cols = rng.integers(0, d, size=rows.size, dtype=np.int64)
        pick = rng.integers(0, topic_feats.shape[1], size=rows.size)
        cols = np.where(from_topic, topic_feats[topic[rows], pick], cols)
        vals = rng.lognormal(0.0, 0.5, size=rows.size)
        X = sp.csr_matrix((vals, (rows, cols)), shape=(m, d))
        X.sum_duplicates()  # sums repeated features and sorts the indices of each row
        sq = np.add.reduceat(X.data * X.data, X.indptr[:-1])  # every row has >= 1 entry
        X.data /= np.repeat(np.sqrt(sq), np.diff(X.indptr))
        return X.astype(np.float32)

    def make_chunk(rng, start, stop):
        m = stop - start
        X = features(rng, m)
        phi = _rff(X, omega, phase)
        out = {"X": X}
        if L:
            s = phi @ W + b
            if lnoise:
                s += f32(lnoise) * rng.standard_normal(s.shape, dtype=f32)
            k = np.minimum(1 + rng.poisson(lpr - 1.0, size=m), L)
            order = _top_columns(s, int(k.max()) if m else 0)
            keep = np.arange(order.shape[1])[None, :] < k[:, None]
            cols = np.sort(np.where(keep, order, L), axis=1)  # chosen labels first, sorted
            cols = cols[cols < L]
            indptr = np.concatenate([[0], np.cumsum(k)])
            out["Y"] = sp.csr_matrix((np.ones(cols.size, np.float32), cols, indptr), shape=(m, L))
        if C:
            sc = phi @ Wc
            if lnoise:
                sc += f32(lnoise) * rng.standard_normal(sc.shape, dtype=f32)
            out["y"] = np.argmax(sc, axis=1).astype(np.float64)[:, None]
        return out

    arrays = [("X", "csr" if sparse else "dense", d, "float32")]
    if L:
        arrays.append(("Y", "csr", L, "float32"))
    if C:
        arrays.append(("y", "dense", 1, "float64"))
    return job.write(arrays, make_chunk)


# ---------------------------------------------------------------------------------------------
# column side (companion store) shared by imc_toy and lowrank
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# (b) the IMC toy of GIMC Figure 1
# ---------------------------------------------------------------------------------------------


@_generator("imc_toy", companion=True, n_rows=200)
def generate_imc_toy(
    job,
    *,
    n_cols=200,
    n_features=50,
    noise_std=0.1,
    obs_frac=0.1,
    store_full=True,
) -> Dataset:
    """The IMC toy of GIMC Figure 1 (SPEC 1.7): ``A = X Y^T + N``.

    ``X (n_rows x n_features)`` and ``Y (n_cols x n_features)`` are i.i.d. ``N(0, 1)``,
    ``N_ij ~ N(0, noise_std^2)``; each entry is observed independently with probability
    ``obs_frac``.  The paper uses 200 x 200, 50 features, observed fraction 5-30 %, model rank
    20, and the error ``||A_hat - A||_F / ||A||_F``.

    Parameters
    ----------
    n_rows : int, default 200
    n_cols : int, default 200
    n_features : int, default 50
        Features per side (``d``); ``A`` has rank ``min(d, n_rows, n_cols)`` before noise.
    noise_std : float, default 0.1
        SPEC reads ``N(0, 0.1)`` and does not say whether 0.1 is the variance or the standard
        deviation; we take the standard deviation (pass ``0.1 ** 0.5`` for the other reading).
    obs_frac : float, default 0.1
        Probability that an entry is observed.
    store_full : bool, default True
        Also write the full ``A`` as a dense array (needed for the relative error; costs
        ``n_rows x n_cols`` float64 on disk).
    seed, block_rows, overwrite, progress
        As for every generator.

    Returns
    -------
    Dataset
        ``"X"`` ``(n_rows, d)`` float64, ``"obs"`` coo float64 (``A`` on the observed entries),
        ``"A"`` ``(n_rows, n_cols)`` float64 when ``store_full``.  The companion store
        (:func:`open_columns`) holds the column features ``"X"`` ``(n_cols, d)`` float64
        (``Y`` in the formula above).
    """
    nc = _int_opt(n_cols, "n_cols", low=1)
    d = _int_opt(n_features, "n_features", low=1)
    sd = _real_opt(noise_std, "noise_std", low=0.0)
    p = _real_opt(obs_frac, "obs_frac", low=0.0, high=1.0)

    cols, url = job.write_columns(
        nc,
        arrays=[("X", "dense", d, "float64")],
        make_chunk=lambda rng, s, e: {"X": rng.standard_normal((e - s, d))},
    )
    Y = cols["X"]

    def make_chunk(rng, start, stop):
        m = stop - start
        X = rng.standard_normal((m, d))
        A = X @ Y.T
        if sd:
            A += sd * rng.standard_normal(A.shape)
        keys = _sample_entries(rng, rng.binomial(nc, p, size=m), nc)
        flat = A.ravel()
        obs = _csr_from_keys(keys, flat[keys], m, nc)  # A is (m, nc) row-major: key = flat index
        out = {"X": X, "obs": obs}
        if store_full:
            out["A"] = A
        return out

    arrays = [("X", "dense", d, "float64"), ("obs", "coo", nc, "float64")]
    if store_full:
        arrays.append(("A", "dense", nc, "float64"))
    return job.write(arrays, make_chunk, columns_store=os.path.basename(url))


# ---------------------------------------------------------------------------------------------
# (c) low-rank matrix with noise, sampled entries and side features
# ---------------------------------------------------------------------------------------------


@_generator("lowrank", companion=True)
def generate_lowrank(
    job,
    *,
    n_cols=1000,
    rank=10,
    noise_std=0.1,
    density=None,
    n_obs_per_row=None,
    n_row_features=20,
    n_col_features=20,
    link="linear",
    gamma=None,
    n_random_features=256,
    dtype="float64",
) -> Dataset:
    """A rank-``rank`` matrix ``M = U V^T`` plus noise, observed on sampled entries.

    Side features ``X`` (rows) and ``Y`` (columns) are i.i.d. ``N(0, 1)``.  The factors are
    functions of them: ``link="linear"``: ``U = X W_x / sqrt(d_x)``; ``link="rbf"``:
    ``U = phi(X) W_x`` with random Fourier features of ``exp(-gamma |x - x'|^2)`` (the GIMC
    setting); the same for ``V`` with ``Y``.  ``U_true = U / rank^(1/4)`` and
    ``V_true = V / rank^(1/4)``, so ``M = U_true V_true^T`` has entries of variance about 1.
    With ``n_row_features=0`` (``n_col_features=0``) the factors are plain ``N(0, 1)`` and no
    features are written.  Observed values are ``M_ij + N(0, noise_std^2)``.

    Parameters
    ----------
    n_cols : int, default 1000
    rank : int, default 10
    noise_std : float, default 0.1
    density : float, optional
        Each entry observed independently with this probability (per-row counts are binomial).
    n_obs_per_row : int, optional
        Exactly this many distinct observed columns per row (capped at ``n_cols``).  Default
        (neither given): 50.
    n_row_features, n_col_features : int, default 20
        ``d_x``, ``d_y``; with the linear link ``rank(U) = min(rank, d_x)``.
    link : {"linear", "rbf"}, default "linear"
    gamma : float, optional
        RBF parameter of ``link="rbf"``; default ``1 / d``.
    n_random_features : int, default 256
        Random Fourier features of ``link="rbf"``.
    dtype : str, default "float64"
        dtype of the observed values.
    seed, block_rows, overwrite, progress
        As for every generator.

    Returns
    -------
    Dataset
        ``"obs"`` coo ``(n_rows, n_cols)`` (sorted by row, columns sorted within a row, no
        duplicates), ``"U_true"`` ``(n_rows, rank)`` float64, ``"X"`` ``(n_rows, d_x)`` float32
        if ``d_x > 0``.  Companion store (:func:`open_columns`): ``"V_true"`` ``(n_cols, rank)``
        float64 and the column features ``"X"`` ``(n_cols, d_y)`` float32 if ``d_y > 0``.
    """
    seed = job.seed
    nc = _int_opt(n_cols, "n_cols", low=1)
    r = _int_opt(rank, "rank", low=1)
    sd = _real_opt(noise_std, "noise_std", low=0.0)
    density, per_row = _check_obs_options(density, n_obs_per_row, 50, nc)
    dx = _int_opt(n_row_features, "n_row_features", low=0)
    dy = _int_opt(n_col_features, "n_col_features", low=0)
    if link not in ("linear", "rbf"):
        raise ValueError(f"link must be 'linear' or 'rbf'; got {link!r}")
    D = _int_opt(n_random_features, "n_random_features", low=1)
    vdt = np.dtype(dtype)
    scale = r**-0.25

    def side(tag, d):
        """Return a function features -> factors (or None when d == 0)."""
        if d == 0:
            return None
        g = 1.0 / d if gamma is None else _real_opt(gamma, "gamma", low=0.0, low_inclusive=False)
        if link == "linear":
            Wm = _param_rng(seed, tag).standard_normal((d, r)) / math.sqrt(d)
            return lambda F: (F.astype(np.float64) @ Wm) * scale
        om = _param_rng(seed, tag + 1).normal(0.0, math.sqrt(2.0 * g), size=(d, D))
        ph = _param_rng(seed, tag + 2).uniform(0.0, 2.0 * np.pi, size=D)
        Wm = _param_rng(seed, tag).standard_normal((D, r))
        return lambda F: (_rff(F.astype(np.float64), om, ph) @ Wm) * scale

    row_map, col_map = side(10, dx), side(20, dy)

    def col_chunk(rng, s, e):
        if dy:
            Yb = rng.standard_normal((e - s, dy)).astype(np.float32)
            return {"X": Yb, "V_true": col_map(Yb)}
        return {"V_true": rng.standard_normal((e - s, r)) * scale}

    col_arrays = [("V_true", "dense", r, "float64")] + (
        [("X", "dense", dy, "float32")] if dy else []
    )
    cols, url = job.write_columns(
        nc,
        arrays=col_arrays,
        make_chunk=col_chunk,
    )
    Vt = np.ascontiguousarray(cols["V_true"].T)  # (rank, n_cols)
    del cols

    def make_chunk(rng, start, stop):
        m = stop - start
        out = {}
        if dx:
            Xb = rng.standard_normal((m, dx)).astype(np.float32)
            U = row_map(Xb)
            out["X"] = Xb
        else:
            U = rng.standard_normal((m, r)) * scale
        Ut = np.ascontiguousarray(U.T)  # (rank, m)
        keys = _sample_entries(rng, _obs_counts(rng, m, nc, density, per_row), nc)
        row, col = keys // nc, keys % nc
        vals = np.zeros(keys.size)
        for t in range(r):  # one factor column at a time: no (nnz, rank) temporaries
            vals += Ut[t][row] * Vt[t][col]
        if sd:
            vals += sd * rng.standard_normal(vals.size)
        out["obs"] = _csr_from_keys(keys, vals.astype(vdt), m, nc)
        out["U_true"] = U
        return out

    arrays = [("obs", "coo", nc, vdt), ("U_true", "dense", r, "float64")]
    if dx:
        arrays.append(("X", "dense", dx, "float32"))
    return job.write(arrays, make_chunk, columns_store=os.path.basename(url))


# ---------------------------------------------------------------------------------------------
# (d) signed network
# ---------------------------------------------------------------------------------------------


@_generator("signed")
def generate_signed(
    job,
    *,
    model="lowrank",
    rank=5,
    n_communities=5,
    bias=0.0,
    flip=0.05,
    density=None,
    n_obs_per_row=None,
    dtype="float32",
) -> Dataset:
    """A signed directed network on ``n_rows`` nodes (an ``n_rows x n_rows`` COO ``"obs"``).

    Latent structure, hashed from each node id (so any node's latent vector is available without
    holding all of them): ``model="lowrank"``: ``u_i, v_i ~ N(0, I_rank)`` and the sign of edge
    ``(i, j)`` is ``sign(u_i . v_j / sqrt(rank) + bias)``; ``model="communities"`` (weak
    structural balance): node ``i`` is in community ``c_i`` uniform over ``n_communities`` and the
    sign is ``+1`` inside a community, ``-1`` across.  Each sign is then flipped with probability
    ``flip``.  No self-loops, no duplicate edges.

    Parameters
    ----------
    model : {"lowrank", "communities"}, default "lowrank"
    rank : int, default 5
    n_communities : int, default 5
    bias : float, default 0.0
        Offset of the low-rank score: 0 gives about half positive edges; larger gives more
        positive edges (real trust networks are about 80 % positive).
    flip : float, default 0.05
        Probability of flipping a sign (label noise).
    density : float, optional
        Each ordered pair ``i != j`` is an edge with this probability.
    n_obs_per_row : int, optional
        Exactly this many out-edges per node (capped at ``n_rows - 1``).  Default (neither
        given): 10.
    dtype : str, default "float32"
        dtype of the stored signs.
    seed, block_rows, overwrite, progress
        As for every generator.

    Returns
    -------
    Dataset
        ``"obs"`` coo ``(n, n)`` with values in {-1, +1}; ``model="lowrank"``: ``"U_true"`` and
        ``"V_true"`` ``(n, rank)`` float64; ``model="communities"``: ``"community"`` ``(n, 1)``
        float64.
    """
    n, seed = job.n_rows, job.seed
    if model not in ("lowrank", "communities"):
        raise ValueError(f"model must be 'lowrank' or 'communities'; got {model!r}")
    r = _int_opt(rank, "rank", low=1)
    k = _int_opt(n_communities, "n_communities", low=1)
    bias = _real_opt(bias, "bias")
    flip = _real_opt(flip, "flip", low=0.0, high=1.0)
    density, per_row = _check_obs_options(density, n_obs_per_row, 10, max(n - 1, 0))
    vdt = np.dtype(dtype)

    def latent(ids):
        if model == "lowrank":
            return _hash_normal(seed, 1, ids, r), _hash_normal(seed, 2, ids, r)
        return (_hash_int(seed, 3, ids, k),)

    def make_chunk(rng, start, stop):
        m = stop - start
        keys = (
            _sample_entries(rng, _obs_counts(rng, m, n - 1, density, per_row), n - 1)
            if n > 1
            else np.zeros(0, np.int64)
        )
        nn = max(n - 1, 1)
        row, col = keys // nn, keys % nn
        col = col + (col >= row + start)  # skip the diagonal (keeps columns sorted)
        ids = np.arange(start, stop)
        out = {}
        if model == "lowrank":
            U, V = latent(ids)
            Vc = _hash_normal(seed, 2, col, r)
            score = np.einsum("ij,ij->i", U[row], Vc) / math.sqrt(r) + bias
            out["U_true"], out["V_true"] = U, V
        else:
            (c,) = latent(ids)
            score = np.where(c[row] == _hash_int(seed, 3, col, k), 1.0, -1.0)
            out["community"] = c.astype(np.float64)[:, None]
        sign = np.where(score >= 0, 1.0, -1.0)
        if flip:
            sign = np.where(rng.random(sign.size) < flip, -sign, sign)
        indptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(row, minlength=m), out=indptr[1:])
        out["obs"] = sp.csr_matrix((sign.astype(vdt), col, indptr), shape=(m, n))
        return out

    arrays = [("obs", "coo", n, vdt)]
    if model == "lowrank":
        arrays += [("U_true", "dense", r, "float64"), ("V_true", "dense", r, "float64")]
    else:
        arrays.append(("community", "dense", 1, "float64"))
    return job.write(arrays, make_chunk)


# ---------------------------------------------------------------------------------------------
# (e) multi-view
# ---------------------------------------------------------------------------------------------


@_generator("multiview")
def generate_multiview(
    job,
    *,
    view_dims=(20, 20, 20),
    rank=4,
    noise_std=0.1,
    task="regression",
    dtype="float32",
) -> Dataset:
    """Multi-view data whose target is made of cross-view interactions (MVM, SPEC 3.2).

    Views ``x^(p) ~ N(0, I_{I_p})``; with ``z^(p) = [x^(p); 1]`` and fixed random factors
    ``Theta^(p)`` of shape ``(I_p + 1, rank)``, the noiseless target is the multi-view machine
    ``f = sum_f prod_p (Theta^(p)T z^(p))_f`` (SPEC MVM-9), so it holds every cross-view
    interaction order up to the number of views.  Factors are scaled so that each
    ``(Theta^(p)T z^(p))_f`` has about unit variance and ``f`` about ``O(1)``.

    Parameters
    ----------
    view_dims : int or sequence of int, default (20, 20, 20)
        Dimension of each view (at least 2 views).
    rank : int, default 4
        ``k`` of the factorisation.
    noise_std : float, default 0.1
        Standard deviation of the Gaussian noise added to ``f``.
    task : {"regression", "classification"}, default "regression"
        ``"regression"``: ``y = f + noise``.  ``"classification"``: ``y = +1`` if ``f + noise``
        exceeds the median of ``f`` (estimated once on 20,000 draws from the parameter stream,
        stored in ``attrs["threshold"]``) else ``-1``: balanced classes.
    dtype : str, default "float32"
        dtype of the views.
    seed, block_rows, overwrite, progress
        As for every generator.

    Returns
    -------
    Dataset
        ``"X0"`` ... ``"X{m-1}"`` ``(n_rows, I_p)`` and ``"y"`` ``(n_rows, 1)`` float64.  When the
        factors hold at most 100,000 values, ``attrs["theta_true"]`` lists them (one
        ``(I_p + 1) x rank`` nested list per view, bias row last) such that MVM-9 gives ``f``.
    """
    seed = job.seed
    dims = (view_dims,) if isinstance(view_dims, numbers.Integral) else tuple(view_dims)
    if len(dims) < 2:
        raise ValueError(f"view_dims must list at least 2 views; got {view_dims!r}")
    dims = tuple(_int_opt(v, "view_dims[i]", low=1) for v in dims)
    job.params["view_dims"] = list(dims)
    k = _int_opt(rank, "rank", low=1)
    sd = _real_opt(noise_std, "noise_std", low=0.0)
    if task not in ("regression", "classification"):
        raise ValueError(f"task must be 'regression' or 'classification'; got {task!r}")
    vdt = np.dtype(dtype)
    thetas = []
    for p, ip in enumerate(dims):
        th = _param_rng(seed, 10 + p).standard_normal((ip + 1, k)) / math.sqrt(ip + 1)
        if p == 0:
            th /= math.sqrt(k)  # so that the sum over f has O(1) variance
        thetas.append(th)

    def target(views):
        prod = np.ones((views[0].shape[0], k))
        for th, x in zip(thetas, views, strict=True):
            prod *= x.astype(np.float64) @ th[:-1] + th[-1]
        return prod.sum(axis=1)

    threshold = None
    if task == "classification":
        trng = _param_rng(seed, 2)
        f0 = target([trng.standard_normal((20000, ip)).astype(vdt) for ip in dims])
        threshold = float(np.median(f0))

    def make_chunk(rng, start, stop):
        m = stop - start
        views = [rng.standard_normal((m, ip)).astype(vdt) for ip in dims]
        f = target(views)
        if sd:
            f += sd * rng.standard_normal(m)
        if threshold is not None:
            f = np.where(f > threshold, 1.0, -1.0)
        out = {f"X{p}": v for p, v in enumerate(views)}
        out["y"] = f[:, None]
        return out

    extra = {"threshold": threshold}
    if sum(th.size for th in thetas) <= _MAX_ATTR_VALUES:
        extra["theta_true"] = [th.tolist() for th in thetas]
    arrays = [(f"X{p}", "dense", ip, vdt) for p, ip in enumerate(dims)]
    arrays.append(("y", "dense", 1, "float64"))
    return job.write(arrays, make_chunk, **extra)


# ---------------------------------------------------------------------------------------------
# registry and dispatcher
# ---------------------------------------------------------------------------------------------

#: kind -> generator function
GENERATORS: dict[str, Callable[..., Dataset]] = {
    "multilabel": generate_multilabel,
    "imc_toy": generate_imc_toy,
    "lowrank": generate_lowrank,
    "signed": generate_signed,
    "multiview": generate_multiview,
}


def generate(kind: str, dest, **opts) -> Dataset:
    """Run the generator ``kind`` (a key of :data:`GENERATORS`) with keyword options.

    Used by ``ooc-lowrank generate KIND DEST --rows N --seed S [--option value ...]``; CLI
    spellings with dashes (``imc-toy``, ``--n-labels``) are accepted.  Unknown options raise a
    ``TypeError`` listing the valid ones.
    """
    key = str(kind).replace("-", "_")
    if key not in GENERATORS:
        raise ValueError(f"unknown generator {kind!r}; choose one of {', '.join(GENERATORS)}")
    fn = GENERATORS[key]
    valid = [p for p in inspect.signature(fn).parameters if p != "dest"]
    opts = {k.replace("-", "_"): v for k, v in opts.items()}
    bad = sorted(set(opts) - set(valid))
    if bad:
        raise TypeError(
            f"generator {key!r} has no option(s) {', '.join(bad)}; valid options: "
            f"{', '.join(valid)}"
        )
    return fn(dest, **opts)
