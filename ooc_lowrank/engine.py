"""The row-block engine: the one place where algorithms meet Dask.

Every algorithm in ooc_lowrank is written as *block functions* (one row block of one or several
aligned inputs in, a small tuple of NumPy arrays out) plus the primitives below:

* :func:`as_blocked` turns a NumPy array, a scipy.sparse matrix, a Dask array or a store array
  (:class:`ooc_lowrank.storage.ArrayHandle`) into a :class:`Blocked`: a row-chunked Dask array
  whose chunks are ndarrays (dense) or ``scipy.sparse.csr_matrix`` (csr; observed-entry stores
  come as csr blocks whose column indices are the observed columns).
* :func:`reduce_blocks` maps a block function over the row blocks and sums its outputs in
  float64 (a tree for small outputs, sequential chains for large ones); :func:`map_rows` maps
  a block function to a row-aligned lazy Dask array.  A block function may return per-row
  vectors of its block (``fn.row_outputs``, see :func:`reduce_blocks`): those are placed at
  the block's rows of a full-length result instead of being summed as full-length vectors.
* :func:`compute` evaluates any number of these in **one** ``dask.compute`` under the scheduler
  policy; :func:`map_reduce` is ``compute(reduce_blocks(...))``.

The graph for one call has a fixed size (blocks x inputs), whatever the iteration count of the
algorithm that calls it.  On the default local scheduler no graph is built at all when every
input is held by this process (NumPy / scipy.sparse, or cached by :func:`maybe_persist` /
made by :func:`map_rows_persisted`): the *direct path* runs the block functions on a pool of
one thread per core and sums their outputs in the graph path's order, so out-of-core machinery
costs nothing on small data; stores and Dask inputs that do not fit the cache stream through
graphs as before.  Reductions are deterministic: for a given chunking the sum is taken in
a fixed order (tree or chains), whatever the scheduler, worker count or task timing.  What that
guarantees: block functions whose arithmetic does not depend on where their buffers sit (the
Numba kernels: serial loops whose order, vectorized or not, depends on the sizes only) give bitwise
identical results under any scheduler and worker count.  Block functions only ever see arrays
aligned to their item size (:func:`_aligned`): a block deserialized on a worker can start at any
byte of a network frame, and NumPy's matmul then skips BLAS for its own loop, whose other
summation order made GIMCClustering's fit drift 8 % from its threaded twin.  With that, block
functions that call BLAS (``Xb.T @ Xb``) give the same bits on the local threads and on a
LocalCluster in the tests; in general they are promised to agree to rounding only (relative
1e-12): BLAS may take other code paths for other thread counts or buffer offsets.

Scheduler policy
    ``client=`` if given; else whatever ``dask.config`` names as scheduler (an active
    ``dask.distributed.Client`` sets itself there; tests set counting schedulers); else the local
    threaded scheduler with one thread per core (or, for held inputs, the direct path: the same
    threads and BLAS policy without a graph; a scheduler set in ``dask.config``, even
    ``"threads"``, always takes the graph path).  Dask owns the cores: on the threaded scheduler
    BLAS is limited to one thread per Dask thread for the duration of the compute (restored
    afterwards); on a distributed worker every block function runs with Numba's and BLAS's
    thread counts limited to :func:`task_threads` (default one: the worker's ``nthreads`` is
    its share of the cores); kernels are serial (``nogil``) so they never add threads of
    their own.

Lost workers
    On a distributed cluster a compute is watched: if the cluster has no worker for
    :func:`no_worker_timeout` seconds (default 60; dask config ``ooc_lowrank.no_worker_timeout``
    or env ``OOC_LOWRANK_NO_WORKER_TIMEOUT``) while the scheduler lives, the pass is cancelled and
    :class:`NoWorkersError` says so, instead of waiting forever for workers that never return.
    Workers that die and are restarted (a nanny, an autoscaler) within the wait are harmless.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp

from ._inputs import as_input
from ._validation import check_csr_structure, check_finite_block
from ._blocksize import TARGET_BLOCK_BYTES, default_block_rows

__all__ = [
    "Blocked",
    "NoWorkersError",
    "Reduction",
    "active_client",
    "align",
    "as_blocked",
    "compute",
    "local_map",
    "map_reduce",
    "map_rows",
    "map_rows_persisted",
    "maybe_persist",
    "from_held_blocks",
    "runs_direct",
    "one_blas_thread",
    "reduce_blocks",
    "task_threads",
]

logger = logging.getLogger("ooc_lowrank")

#: Memory budget under which inputs are kept in memory across iterations (bytes).  Override
#: with the environment variable ``OOC_LOWRANK_CACHE_BYTES`` or per call.
DEFAULT_CACHE_BYTES = int(os.environ.get("OOC_LOWRANK_CACHE_BYTES", 2 * 2**30))


def _bounds_from_chunks(chunks) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(chunks)]).astype(np.int64)


class Blocked:
    """A row-blocked 2-D input: a Dask array chunked by rows only.

    Attributes
    ----------
    dask : dask.array.Array
        Shape ``(n_rows, n_cols)``; one chunk per row block, a single chunk along columns.
    kind : {"dense", "csr"}
        Chunk type: ndarray or ``scipy.sparse.csr_matrix``.
    bounds : ndarray of int64, shape (n_blocks + 1,)
        Row boundaries of the blocks.
    source : object
        What the blocks are read from (for messages and caching decisions).
    reads : ArrayHandle or None
        Set when every block is exactly ``reads.read(start, stop)`` at :attr:`bounds`.
    held : list or None
        The blocks themselves (ndarray / csr, one per row block), when they are held in this
        process's memory: set by :func:`maybe_persist` and :func:`map_rows_persisted` on the
        local scheduler, read by the direct path (:func:`_memory_blocks`).
    """

    held = None
    #: what :func:`ooc_lowrank._inputs.is_lazy` recognises a Blocked by (it cannot import us)
    _row_blocked = True

    def __init__(self, arr, kind, source=None, nnz=None, reads=None):
        self._dask, self._build = arr, None
        self.shape, self.dtype = arr.shape, arr.dtype
        self.kind = kind
        self.source = source
        self.nnz = nnz
        self.bounds = _bounds_from_chunks(arr.chunks[0])
        self.reads = reads  # set by _from_handle only; chained reductions read in their links

    @classmethod
    def _lazy(cls, build, bounds, shape, dtype, kind, source=None, nnz=None) -> Blocked:
        """A Blocked whose Dask array ``build()`` makes on first use of :attr:`dask` only.

        For inputs the direct path reads without a graph (NumPy / scipy.sparse sources, held
        blocks): an iterative fit wraps its small in-memory state (IMC's factor ``P``) in
        every pass, and building the Dask array of the row blocks cost about 2 ms of graph
        construction per wrap (Segment clustering: 0.6 s of a 6 s fit) for a graph no pass
        used."""
        out = cls.__new__(cls)
        out._dask, out._build = None, build
        out.shape, out.dtype = tuple(int(x) for x in shape), np.dtype(dtype)
        out.kind, out.source, out.nnz, out.reads = kind, source, nnz, None
        out.bounds = np.asarray(bounds, dtype=np.int64)
        return out

    @property
    def dask(self) -> da.Array:
        """The row-chunked Dask array (built on first use for in-memory inputs)."""
        if self._dask is None:
            self._dask, self._build = self._build(), None
        return self._dask

    n_blocks = property(lambda self: len(self.bounds) - 1)

    @property
    def in_memory(self) -> bool:
        """The blocks are slices of a NumPy / scipy.sparse object held by this process."""
        return isinstance(self.source, (np.ndarray, sp.spmatrix, sp.sparray))

    def __repr__(self):
        return f"<Blocked {self.kind} shape={self.shape} dtype={self.dtype} blocks={self.n_blocks}>"

    @property
    def nbytes(self) -> int:
        """Bytes the data occupies in memory (sparse: data + indices + indptr)."""
        if self.kind == "dense":
            return int(np.prod(self.shape)) * self.dtype.itemsize
        nnz = self.nnz if self.nnz is not None else self.shape[0] * 10
        return int(nnz * (self.dtype.itemsize + 4) + 8 * (self.shape[0] + self.n_blocks))

    def rechunk(self, bounds) -> Blocked:
        """Same data with new row boundaries (``bounds[0] == 0``, ``bounds[-1] == n_rows``)."""
        bounds = np.asarray(bounds, dtype=np.int64)
        if np.array_equal(bounds, self.bounds):
            return self
        steps_ok = np.all(np.diff(bounds) > 0) or bounds.tolist() == [0, 0]  # [0, 0]: no rows
        if bounds[0] != 0 or bounds[-1] != self.shape[0] or not steps_ok:
            raise ValueError(f"bounds must increase strictly from 0 to {self.shape[0]}")
        if self.source is not None and hasattr(self.source, "read"):
            return _from_handle(self.source, bounds)
        if self.in_memory:
            return _from_memory(self.source, bounds, self.kind)
        chunks = (tuple(np.diff(bounds).tolist()), (self.shape[1],))
        if self.kind == "dense":
            return Blocked(self.dask.rechunk(chunks), "dense", self.source, self.nnz)
        # sparse dask arrays: re-slice through a combine of the overlapping chunks
        return _rechunk_sparse(self, bounds)

    def persist(self) -> Blocked:
        """Keep the blocks in memory (local) or on the workers (distributed)."""
        (arr,) = _persist(self.dask)
        return Blocked(arr, self.kind, self.source, self.nnz)


def _pick_rows(s, e, starts, *parts):
    """Rows ``s:e`` of a sparse array from the old blocks ``parts`` that overlap them (the old
    blocks start at the rows ``starts``), as one csr block."""
    pieces = [
        p[max(s, a) - a : min(e, a + p.shape[0]) - a] for p, a in zip(parts, starts, strict=True)
    ]
    return sp.vstack(pieces, format="csr") if len(pieces) > 1 else sp.csr_matrix(pieces[0])


def _rechunk_sparse(b: Blocked, bounds) -> Blocked:
    """A sparse Dask input re-sliced to ``bounds``: each new block is one task that depends on
    the old blocks overlapping it only (never on all of them: that task would hold the whole
    array in memory)."""
    old = b.bounds
    olds = b.dask.to_delayed(optimize_graph=False).reshape(-1)
    meta = sp.csr_matrix((0, 0), dtype=b.dtype)
    pick = dask.delayed(_pick_rows, pure=True)
    blocks = []
    for i in range(len(bounds) - 1):
        s, e = int(bounds[i]), int(bounds[i + 1])
        j0 = int(np.searchsorted(old, s, side="right") - 1)
        j1 = int(np.searchsorted(old, e, side="left"))
        part = pick(s, e, [int(old[j]) for j in range(j0, j1)], *olds[j0:j1])
        blocks.append(da.from_delayed(part, shape=(e - s, b.shape[1]), dtype=b.dtype, meta=meta))
    return Blocked(da.concatenate(blocks, axis=0), "csr", b.source, b.nnz)


def _even_bounds(n: int, block_rows: int) -> np.ndarray:
    # no rows: one empty block (predicting on 0 rows gives an empty result, as in scikit-learn)
    return np.asarray((list(range(0, n, block_rows)) or [0]) + [n], dtype=np.int64)


def _read_handle_block(_, handle=None, bounds=None, block_id=None):
    i = block_id[0]
    return handle.read(int(bounds[i]), int(bounds[i + 1]))


def _from_handle(handle, bounds) -> Blocked:
    kind = "dense" if handle.kind == "dense" else "csr"
    name = f"read-{handle.name}-" + dask.base.tokenize(handle.url, handle.name, bounds)
    arr = _task_per_block(_read_handle_block, bounds, handle, kind, handle=handle, name=name)
    return Blocked(arr, kind, handle, handle.nnz, reads=handle)


def _task_per_block(fn, bounds, like, kind, **kw):
    """A Dask array of the row blocks ``bounds`` of an array shaped like ``like``, block ``i``
    made by one task ``fn(i, bounds=bounds, block_id=(i, 0), **kw)``."""
    dt = like.dtype
    meta = np.empty((0, 0), dt) if kind == "dense" else sp.csr_matrix((0, 0), dtype=dt)
    return da.map_blocks(
        fn,
        da.arange(len(bounds) - 1, chunks=1),
        bounds=bounds,
        new_axis=1,
        chunks=(tuple(np.diff(bounds).tolist()), (like.shape[1],)),
        dtype=dt,
        meta=meta,
        **kw,
    )


def _slice_memory_block(_, X=None, bounds=None, block_id=None):
    i = block_id[0]
    return X[int(bounds[i]) : int(bounds[i + 1])]


def _from_memory(X, bounds, kind) -> Blocked:
    """Row blocks of the in-memory ``X`` as slices taken by each task: ``da.from_array`` copies
    a NumPy array whole (Dask >= 2025: a GIMC fit of an in-memory X held it twice)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    return Blocked._lazy(
        lambda: _task_per_block(
            _slice_memory_block, bounds, X, kind, X=dask.delayed(X, pure=False)
        ),
        bounds, X.shape, X.dtype, kind, X, None if kind == "dense" else X.nnz,
    )  # fmt: skip


#: In-memory inputs are split into at least this many blocks (when each keeps at least
#: :data:`MIN_SPLIT_ROWS` rows), so that a small or medium input keeps both cores busy on the
#: direct path; a constant, not the core count, so the chunking (and the sum's order) is the
#: same on every machine.
MIN_BLOCKS = 4
#: In-memory sparse inputs up to this size keep their row-block slices (copies) for the
#: direct path's later passes: slicing a CSR costs a fixed ~0.1 ms per block per pass, which
#: dominated small iterative fits (Segment clustering: ~1,100 passes of 2 blocks).
SLICE_CACHE_BYTES = 64 * 2**20
MIN_SPLIT_ROWS = 1024


def _default_rows(row_bytes, n):
    """Rows per block for ``n`` in-memory rows: about TARGET_BLOCK_BYTES of ``row_bytes`` per
    block, at least :data:`MIN_BLOCKS` blocks of at least :data:`MIN_SPLIT_ROWS` rows when
    ``n`` allows, in equal blocks (no short tail block that leaves a thread idle)."""
    rows = max(1, min(default_block_rows(row_bytes), max(n, 1)))
    n_blocks = max(1, -(-n // rows), min(MIN_BLOCKS, n // MIN_SPLIT_ROWS))
    return max(1, -(-n // n_blocks))


def _finite_rows(block, name=None, check=None, block_info=None):
    """A Dask block, checked for NaN / inf (and by ``check``) as a pass reads it (the error
    names its rows)."""
    where = ""
    if block_info and 0 in block_info:
        start, stop = block_info[0]["array-location"][0]
        where = f" (rows {start}..{stop - 1})"
    check_finite_block(block, name, where)
    if check is not None:
        check(block, name, where)
    return block


def as_blocked(
    X, *, block_rows=None, name="X", allow_nd1=False, row_bytes=None, check=None
) -> Blocked:
    """Wrap any supported 2-D input as a :class:`Blocked` collection, validating it.

    Parameters
    ----------
    X : ndarray, scipy.sparse matrix, dask.array.Array, ArrayHandle or Blocked
        Shape ``(n_rows, n_cols)``.  In-memory inputs are checked for NaN/inf and structure
        now; store and Dask inputs are checked block by block as they are read.
    block_rows : int, optional
        Rows per block.  Default: the store's blocks, the Dask array's chunks, or equal blocks
        of about 16 MB for in-memory data.
    row_bytes : float, optional
        In-memory data only: the bytes of per-row work that size the default blocks, when that
        is not the input row (e.g. GIMC's feature row ``Phi``, whose width is ``2m``, not
        ``d``).  Default: the input row's own bytes.
    name : str
        Argument name used in error messages.
    check : callable(block, name, where) or None
        Dask input only: a further check of each block as a pass reads it (no extra pass),
        raising a named error, e.g. :func:`ooc_lowrank._inputs.check_01_block` for labels.

    Pandas and Dask DataFrames, pydata ``sparse`` arrays, ``np.matrix`` and float16 data are
    converted first (:func:`ooc_lowrank._inputs.as_input`).

    Returns
    -------
    Blocked
    """
    if isinstance(X, Blocked):
        if block_rows is not None:
            return X.rechunk(_even_bounds(X.shape[0], int(block_rows)))
        return X
    if block_rows is not None and int(block_rows) < 1:
        raise ValueError(f"block_rows must be >= 1; got {block_rows!r}")
    if hasattr(X, "read") and hasattr(X, "kind") and hasattr(X, "block_rows"):  # ArrayHandle
        B = int(block_rows or X.block_rows)
        return _from_handle(X, _even_bounds(X.shape[0], B))
    X = as_input(X, name)
    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n_samples, n_features); got shape {X.shape}")
        if len(X.chunks[1]) != 1:
            raise ValueError(
                f"{name} must be chunked along rows only; got {len(X.chunks[1])} column chunks. "
                f"Use {name}.rechunk({{1: {name}.shape[1]}})"
            )
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError(f"{name} has unknown chunk sizes; call {name}.compute_chunk_sizes()")
        if X.dtype.kind not in "fiub":
            raise TypeError(f"{name} must have a numeric dtype; got {X.dtype}")
        kind = "csr" if sp.issparse(X._meta) else "dense"
        if X.dtype.kind == "f" or check is not None:  # NaN / inf: checked by every pass,
            X = X.map_blocks(  # as store blocks are
                functools.partial(_finite_rows, name=name, check=check),
                dtype=X.dtype,
                meta=X._meta,
            )
        b = Blocked(X, kind, None)
        if block_rows is not None:
            b = b.rechunk(_even_bounds(X.shape[0], int(block_rows)))
        return b
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if X.dtype.kind not in "fiub":
            raise TypeError(f"{name} must have a numeric dtype; got {X.dtype}")
        check_csr_structure(np.asarray(X.indptr), np.asarray(X.indices), X.shape[1], name)
        check_finite_block(X, name)
        if X.dtype.kind != "f":
            X = X.astype(np.float64)
        if row_bytes is None:
            row_bytes = (X.nnz / max(X.shape[0], 1)) * (X.dtype.itemsize + 4) + 8
        B = int(block_rows or _default_rows(row_bytes, X.shape[0]))
        return _from_memory(X, _even_bounds(X.shape[0], B), "csr")
    if hasattr(X, "__array__") or isinstance(X, (list, tuple)):
        X = np.asarray(X)
        if X.ndim == 1 and allow_nd1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError(
                f"{name} must be 2-D (n_samples, n_features); got shape {X.shape}. "
                "Reshape a single feature with x.reshape(-1, 1)"
            )
        if X.dtype.kind not in "fiub":
            raise TypeError(f"{name} must have a numeric dtype; got {X.dtype}")
        if X.dtype.kind != "f":
            X = X.astype(np.float64)
        check_finite_block(X, name)
        if row_bytes is None:
            row_bytes = X.shape[1] * X.dtype.itemsize
        B = int(block_rows or _default_rows(row_bytes, X.shape[0]))
        return _from_memory(X, _even_bounds(X.shape[0], B), "dense")
    raise TypeError(
        f"{name} must be a NumPy array, scipy.sparse matrix, dask array or store array; "
        f"got {type(X).__name__}"
    )


def align(reference: Blocked, other: Blocked, *, names=("X", "Y")) -> Blocked:
    """Rechunk ``other`` to the row blocks of ``reference`` (row counts must agree)."""
    if other.shape[0] != reference.shape[0]:
        raise ValueError(
            f"{names[1]} must have as many rows as {names[0]}: {names[1]} has {other.shape[0]}, "
            f"{names[0]} has {reference.shape[0]}"
        )
    return other.rechunk(reference.bounds)


def read_rows(b: Blocked, start: int, stop: int):
    """Rows ``start:stop`` of ``b`` (ndarray or CSR) in this process: in-memory inputs are
    sliced, store arrays read just those rows, Dask arrays compute the blocks that overlap
    the rows (and slice them).  For calibrations that time a method on a slice of its input."""
    if b.in_memory:
        return b.source[start:stop]
    if b.reads is not None:
        return b.reads.read(start, stop)
    j0 = int(np.searchsorted(b.bounds, start, side="right") - 1)
    j1 = int(np.searchsorted(b.bounds, stop, side="left"))
    got = compute(*[b.dask.blocks[j] for j in range(j0, j1)])
    pieces = [g[max(start, a) - a : min(stop, a + g.shape[0]) - a]
              for g, a in zip(got, b.bounds[j0:j1], strict=True)]  # fmt: skip
    if len(pieces) == 1:
        return pieces[0]
    return sp.vstack(pieces, format="csr") if sp.issparse(pieces[0]) else np.vstack(pieces)


# ---------------------------------------------------------------------------------------------
# reductions and maps
# ---------------------------------------------------------------------------------------------


def _probe_block(b: Blocked):
    """A one-row all-zero block used to infer output shapes (valid input for any kernel/BLAS)."""
    if b.kind == "dense":
        return np.zeros((1, b.shape[1]), dtype=b.dtype)
    return sp.csr_matrix((1, b.shape[1]), dtype=b.dtype)


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


class Reduction:
    """A lazy tree-reduction: ``compute(red)`` gives the tuple (or the single array) of sums.

    Its Dask graph (``packed``) is built on first use only: a pass that :func:`compute` runs on
    the direct path never builds one (``direct``: the sum of the held blocks, see
    :func:`_reduce_direct`; ``inputs``: the row-blocked inputs it reads).
    """

    def __init__(self, packed, shapes, single, build=None, direct=None, inputs=None):
        self._packed = packed
        self._build = build
        self.direct = direct
        self.inputs = inputs
        self.shapes = shapes
        self.single = single

    @property
    def packed(self):
        """The reduction as a Dask array or Delayed of shape (S,) (built on first use)."""
        if self._packed is None:
            self._packed = self._build()
        return self._packed

    def unpack(self, flat):
        outs, k = [], 0
        for s in self.shapes:
            size = int(np.prod(s))
            outs.append(flat[k : k + size].reshape(s))
            k += size
        return outs[0] if self.single else tuple(outs)


#: On a distributed cluster, numpy arguments and in-memory row-aligned inputs (IMC's row factor
#: ``P``, a NumPy ``X``, in-memory observations) of at least this many bytes are scattered to
#: the workers once (content-addressed, :func:`_scattered_many`, :func:`_scattered_blocks`)
#: instead of travelling in every graph: a pass's graph then carries only keys, a few kB per
#: task (``tests/test_graph_size.py``).
SCATTER_BYTES = 64 * 2**10
#: Scattered arguments and input blocks kept alive per client, least recently used dropped
#: first: at most this many entries (the factors and row-aligned state of one iteration are a
#: handful of arrays) ...
SCATTER_CACHE_ENTRIES = 8
#: ... and at most this many bytes per worker (an argument is replicated on every worker; an
#: input's row blocks are spread over them) ...
SCATTER_CACHE_BYTES = 256 * 2**20
#: ... nor more than this share of the smallest worker's ``memory_limit`` (the rest is the
#: worker's own footprint, a pass's block work and held feature blocks).  The entries of the
#: pass being built are never dropped; the others are released *before* a new scatter, so a
#: replaced input is never on a worker twice (issue 27: IMC's in-memory observations, their
#: transposed copy and the stale factors filled a 1 GiB worker).
SCATTER_CACHE_FRACTION = 0.25

_SCATTER_CACHE: dict = {}  # key -> (future(s), bytes per worker); insertion = LRU order
#: What the scatter cache has shipped to the workers since the process started (``scatters``:
#: ``client.scatter`` calls; ``bytes``: bytes sent, a replicated argument counted once per
#: worker): the per-pass transfer cost a benchmark or a test reads as a difference.
SCATTER_STATS = {"scatters": 0, "bytes": 0}
_PASS = threading.local()  # .pinned: the cache keys of the pass being built (inside compute)


def active_client(client=None):
    """The ``dask.distributed`` client the engine would compute on, else None."""
    if client is None:
        cfg = dask.config.get("scheduler", None)
        if hasattr(cfg, "scatter"):  # dask.config.set(scheduler=client)
            return cfg
        if hasattr(getattr(cfg, "__self__", None), "scatter"):  # scheduler=client.get
            return cfg.__self__
        if cfg is not None and cfg != "dask.distributed":  # "threads", "sync", a callable
            return None
        client = _default_client()
    return client if hasattr(client, "scatter") else None


def _default_client():
    try:
        from distributed import default_client

        return default_client()
    except (ImportError, ValueError):
        return None


def _scattered(a, client):
    """A future of ``a`` replicated on every worker, shared by every graph that passes the same
    content: the factors of a greedy step or of a GIMC iteration are shipped once, not once per
    pass (the graph of a 50M-entry GLRL pass carried 55 MiB of factors every time)."""
    return _scattered_many([a], client)[0]


def _nbytes(a):
    return a.nbytes if isinstance(a, np.ndarray) else a.data.nbytes + a.indices.nbytes


_WORKERS_SEEN: dict = {}  # id(client) -> (time.monotonic(), _worker_limits(client))


def _worker_limits(client):
    """The workers' ``memory_limit`` values (0: none) on ``client``'s cluster, or None when the
    scheduler cannot be reached; asked of the scheduler at most once a second
    (``scheduler_info()`` is a round trip, and every scatter of a pass consults it)."""
    now = time.monotonic()
    seen = _WORKERS_SEEN.get(id(client))
    if seen is not None and now - seen[0] < 1.0:
        return seen[1]
    try:
        workers = client.scheduler_info().get("workers", {})
    except Exception:  # an unreachable scheduler: the pass will report the real error
        return None
    out = tuple(w.get("memory_limit") or 0 for w in workers.values())
    _WORKERS_SEEN[id(client)] = (now, out)
    return out


def _workers(client):
    """``(worker count, smallest memory_limit or None)`` of ``client``'s cluster."""
    limits = _worker_limits(client)
    if limits is None:
        return 1, None
    return max(len(limits), 1), (min(limits) if limits and min(limits) > 0 else None)


def scatter_budget(client=None):
    """Bytes per worker the scatter cache may hold on ``client``'s cluster (the active one by
    default): :data:`SCATTER_CACHE_BYTES`, at most :data:`SCATTER_CACHE_FRACTION` of the
    smallest worker's memory limit; None without a distributed client."""
    client = active_client(client)
    if client is None:
        return None
    _, limit = _workers(client)
    cap = SCATTER_CACHE_BYTES
    return cap if limit is None else min(cap, int(SCATTER_CACHE_FRACTION * limit))


def _make_room(client, incoming, pinned):
    """Drop least recently used entries of ``client`` (never those in ``pinned``) until
    ``incoming`` more bytes per worker fit :func:`scatter_budget` and one more entry fits
    :data:`SCATTER_CACHE_ENTRIES`; dropping the last reference releases them on the workers."""
    budget = scatter_budget(client)
    # a snapshot: an input freed meanwhile drops its own entry (weakref.finalize)
    mine = [(k, v[1]) for k, v in tuple(_SCATTER_CACHE.items()) if k[0] == id(client)]
    total = sum(nb for _, nb in mine) + incoming
    count = len(mine) + (incoming > 0)
    for k, nb in mine:  # oldest first
        if total <= budget and count <= SCATTER_CACHE_ENTRIES:
            break
        if k in pinned:
            continue
        _SCATTER_CACHE.pop(k, None)
        total -= nb
        count -= 1


def _pin(keys):
    """``keys`` and those of the pass being built (inside :func:`compute`): never dropped."""
    pinned = getattr(_PASS, "pinned", None)
    if pinned is None:
        return set(keys)
    pinned.update(keys)
    return pinned


def _scattered_many(arrays, client):
    """Futures of ``arrays`` (as :func:`_scattered`), the ones not cached yet shipped in **one**
    ``client.scatter``: a round trip to the scheduler and the workers per graph, not one per
    changed argument (a GLRL power pass changes two vectors, ``u`` and ``[V, v]``; each
    blocking scatter left the workers idle between passes)."""
    keys = [(id(client), dask.base.tokenize(a)) for a in arrays]
    pinned = _pin(keys)
    todo = {}  # key -> array, first occurrence (the same content twice is shipped once)
    for k, a in zip(keys, arrays, strict=True):
        if k not in _SCATTER_CACHE:
            todo.setdefault(k, a)
    if todo:
        _make_room(client, sum(int(_nbytes(a)) for a in todo.values()), pinned)
        futs = client.scatter(list(todo.values()), broadcast=True, hash=False)
        SCATTER_STATS["scatters"] += 1
        SCATTER_STATS["bytes"] += _workers(client)[0] * sum(int(_nbytes(a)) for a in todo.values())
        for (k, a), f in zip(todo.items(), futs, strict=True):
            _SCATTER_CACHE[k] = (f, int(_nbytes(a)))
    for k in keys:  # most recently used last
        _SCATTER_CACHE[k] = _SCATTER_CACHE.pop(k)
    _make_room(client, 0, pinned)
    return [_SCATTER_CACHE[k][0] for k in keys]


def _scattered_blocks(b, client):
    """Futures of the row blocks of the in-memory ``b`` (at ``b.bounds``), spread over the
    workers (not replicated) and cached like :func:`_scattered` (same content and bounds: no
    new scatter) until evicted or until ``b.source`` is freed (a fit's observations leave the
    workers with the fit, e.g. the selection's training share before the refit).  A pass
    then reads each block where it lies, and no worker holds the whole input next to the
    slices cut from it (IMC's observations were shipped whole, replicated, and sliced into
    copies on the workers in every pass)."""
    key = (id(client), dask.base.tokenize(b.source, b.bounds))
    pinned = _pin([key])
    if key not in _SCATTER_CACHE:
        n_workers, _ = _workers(client)
        _make_room(client, -(-b.nbytes // n_workers), pinned)
        blocks = [b.source[int(s) : int(e)] for s, e in zip(b.bounds[:-1], b.bounds[1:])]
        _SCATTER_CACHE[key] = (client.scatter(blocks, hash=False), -(-b.nbytes // n_workers))
        SCATTER_STATS["scatters"] += 1
        SCATTER_STATS["bytes"] += int(b.nbytes)
        with contextlib.suppress(TypeError):  # released with the input's data, not later
            weakref.finalize(b.source, _SCATTER_CACHE.pop, key, None)
    _SCATTER_CACHE[key] = _SCATTER_CACHE.pop(key)
    _make_room(client, 0, pinned)
    return _SCATTER_CACHE[key][0]


def _unwrap_args(args, client=None):
    """Graph arguments: numpy state larger than 64 kB travels once per graph as a delayed
    object; with a distributed ``client``, arrays of :data:`SCATTER_BYTES` or more are
    scattered once and reused across graphs, all of a graph's new ones in one scatter
    (:func:`_scattered_many`)."""
    out = list(args)
    big = []
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray) and a.nbytes > 65536:
            if client is not None and a.nbytes >= SCATTER_BYTES:
                big.append(i)
            else:
                out[i] = dask.delayed(a, pure=False)
    if big:
        for i, f in zip(big, _scattered_many([args[i] for i in big], client), strict=True):
            out[i] = f
    return tuple(out)


def _aligned(items):
    """``items`` with every ndarray aligned to its item size (a misaligned one copied).

    Arrays deserialized on a distributed worker (in-memory chunks, scattered state) may start at
    any byte of a network frame, and NumPy's matmul multiplies a misaligned operand with its own
    loop instead of BLAS: another summation order (and slower), so a block gave another result
    on a cluster than in threads and a fit drifted from its threaded twin (GIMCClustering's
    embedding by 8 %).  Block functions therefore only ever see aligned arrays.
    """
    return [
        a.copy(order="K") if isinstance(a, np.ndarray) and not a.flags.aligned else a
        for a in items
    ]


_ALIGN_LOCK = threading.RLock()
#: ``id(source) -> (weakref to source, its aligned copy)`` of :func:`_aligned_args`.
_ALIGNED_ARGS: dict = {}


def _aligned_args(items):
    """:func:`_aligned` for a pass's arguments, each misaligned one copied once per object in
    this process: a distributed worker hands every task the one object it holds for a scattered
    key, and scattered arrays arrive misaligned there (every one of 8 probed, 2026-11-26), so
    copying per task copied the factors of a pass once per block (GLRL's ``V``, 33 MB at 1.37M
    columns, and then packed it again per block).  The copy lives as long as its source."""
    return [
        _aligned_once(a) if isinstance(a, np.ndarray) and not a.flags.aligned else a
        for a in items
    ]


def _aligned_once(a):
    key = id(a)
    with _ALIGN_LOCK:
        hit = _ALIGNED_ARGS.get(key)
        if hit is not None and hit[0]() is a:
            return hit[1]
    c = a.copy(order="K")
    try:
        ref = weakref.ref(a, functools.partial(_forget_aligned, key))
    except TypeError:  # an ndarray subclass without weak references: a copy per call
        return c
    with _ALIGN_LOCK:
        _ALIGNED_ARGS[key] = (ref, c)
    return c


def _forget_aligned(key, ref):
    with _ALIGN_LOCK:
        hit = _ALIGNED_ARGS.get(key)
        if hit is not None and hit[0] is ref:
            del _ALIGNED_ARGS[key]


def _setting(name, default, cast):
    """``(raw, cast(raw) or None when it does not cast)`` of dask config ``ooc_lowrank.<name>``,
    else env ``OOC_LOWRANK_<NAME>``, else ``default``."""
    v = dask.config.get(f"ooc_lowrank.{name}", None)
    if v is None:
        v = os.environ.get(f"OOC_LOWRANK_{name.upper()}", default)
    try:
        return v, cast(v)
    except (TypeError, ValueError):
        return v, None


#: Threads one task's block function may use on a distributed worker (Numba's thread pool and
#: BLAS); override with the worker's dask config ``ooc_lowrank.task_threads`` or its env
#: ``OOC_LOWRANK_TASK_THREADS`` (see :func:`task_threads`).
DEFAULT_TASK_THREADS = 1


def task_threads() -> int:
    """Threads a block function may use inside one task on a distributed worker: dask config
    ``ooc_lowrank.task_threads``, else env ``OOC_LOWRANK_TASK_THREADS``, else
    :data:`DEFAULT_TASK_THREADS` (read where the task runs, i.e. the worker's setting).

    One, as on the local threads scheduler: a worker's ``nthreads`` is its share of the cores,
    one core per task.  Numba's thread pool otherwise defaults to every core of the machine
    inside a "1-thread" worker (Dask's nanny sets only ``OMP/OPENBLAS/MKL_NUM_THREADS``), so
    two such workers on two cores would run four threads.  Raise it only for workers that own
    ``task_threads x nthreads`` cores (the BLAS limit is process-wide)."""
    v, n = _setting("task_threads", DEFAULT_TASK_THREADS, int)
    if n is None or n < 1:
        raise ValueError(
            f"task_threads must be an integer >= 1; got {v!r}. Set the workers' dask config "
            "'ooc_lowrank.task_threads' (or env OOC_LOWRANK_TASK_THREADS) to the cores one task "
            "may use, e.g. 1"
        )
    return n


def _on_worker() -> bool:
    """This thread runs a task of a ``dask.distributed`` worker."""
    try:
        from distributed.worker import get_worker
    except ImportError:  # pragma: no cover - distributed is a dependency
        return False
    try:
        get_worker()
    except ValueError:
        return False
    return True


class _TaskThreads:
    """On a distributed worker: Numba's thread count (per thread) and BLAS's (process-wide,
    counted as :func:`one_blas_thread`) limited to :func:`task_threads` while a block function
    runs, restored afterwards; elsewhere nothing (the local paths hold their own limit)."""

    __slots__ = ("_numba", "_blas")

    def __enter__(self):
        self._numba = self._blas = None
        if not _on_worker():
            return self
        import numba

        n = min(task_threads(), int(numba.config.NUMBA_NUM_THREADS))
        prev = numba.get_num_threads()
        if prev != n:
            numba.set_num_threads(n)
            self._numba = prev
        if n == 1:
            self._blas = one_blas_thread().__enter__()
        else:
            self._blas = _blas_controller().limit(limits=n, user_api="blas")
        return self

    def __exit__(self, *exc):
        if self._numba is not None:
            import numba

            numba.set_num_threads(self._numba)
        if isinstance(self._blas, _OneBlasThread):
            self._blas.__exit__(*exc)
        elif self._blas is not None:
            self._blas.restore_original_limits()
        return False


def _call_block(fn, blocks, args, offset, bounds, block_id):
    blocks, args = _aligned(blocks), _aligned_args(args)
    with _TaskThreads():
        if offset:
            return fn(int(bounds[block_id[0]]), *blocks, *args)
        return fn(*blocks, *args)


def _accumulates(fn) -> bool:
    """``fn.accumulates``: ``fn(acc, *blocks, *args)`` adds its block's outputs into ``acc`` (the
    flat float64 accumulator of its chain, outputs in C order one after the other) and returns
    nothing (see :func:`reduce_blocks`)."""
    return bool(getattr(fn, "accumulates", False))


def _accumulator_dtype(fn):
    """``fn.accumulator_dtype`` of an accumulating block function (default float64): float32
    halves the accumulator where it is the pass's memory (GIMC's (d, m_total) gradient and
    (L, D) statistics at the Delicious-large shape, issue 25); the outputs then come back in
    that dtype."""
    return np.dtype(getattr(fn, "accumulator_dtype", np.float64))


def _row_outputs(fn) -> frozenset:
    """Indices of the outputs of ``fn`` that are per-row vectors of its block
    (``fn.row_outputs``; see :func:`reduce_blocks`)."""
    return frozenset(int(i) for i in getattr(fn, "row_outputs", ()))


def _flatten_outputs(outs, size, fn, dst=None, add=False):
    """The outputs of one block as one flat float64 vector of ``size`` values (written or
    added into ``dst``)."""
    got = sum(np.asarray(o).size for o in outs)
    if got != size:
        raise ValueError(f"block function {fn!r} returned {got} values on a block; expected {size}")
    flat = np.empty(size, dtype=np.float64) if dst is None else dst
    k = 0
    for o in outs:
        # C order, as unpack() reads it: a view of a C-ordered output; block functions with
        # large outputs return C-ordered arrays (a Fortran-ordered one costs a transposing copy)
        o = np.asarray(o).reshape(-1)
        if add:
            flat[k : k + o.size] += o
        else:
            flat[k : k + o.size] = o
        k += o.size
    return flat


def _packed_block(*items, fn=None, n_inputs=0, offset=False, bounds=None, size=0, block_id=None):
    blocks, args = items[:n_inputs], items[n_inputs:]
    outs = _as_tuple(_call_block(fn, blocks, args, offset, bounds, block_id))
    return _flatten_outputs(outs, size, fn)[None, :]


def _prepare(inputs):
    blocked = [as_blocked(x, name=f"input {i}") for i, x in enumerate(inputs)]
    if not blocked:
        raise ValueError("at least one row-blocked input is needed")
    ref = blocked[0]
    blocked = [ref] + [
        align(ref, b, names=("input 0", f"input {i + 1}")) for i, b in enumerate(blocked[1:])
    ]
    return blocked, ref


def _shipped(blocked, client, once=False):
    """``blocked`` for a graph on ``client``: in-memory inputs of :data:`SCATTER_BYTES` or more
    are scattered block by block (spread over the workers; cached and reused by every graph
    until they change or are freed, :func:`_scattered_blocks`; with ``once``, not kept: for a
    single persist), instead of travelling block by block inside every pass's graph."""
    client = active_client(client)
    if client is None:
        return blocked
    out = []
    for b in blocked:
        if not b.in_memory or b.nbytes < SCATTER_BYTES:
            out.append(b)
            continue
        if once:
            blocks = [b.source[int(s) : int(e)] for s, e in zip(b.bounds[:-1], b.bounds[1:])]
            futs = client.scatter(blocks, hash=False)
        else:
            futs = _scattered_blocks(b, client)
        meta = b.dask._meta
        parts = [
            da.from_delayed(f, shape=(int(e - s), b.shape[1]), dtype=b.dtype, meta=meta)
            for f, s, e in zip(futs, b.bounds[:-1], b.bounds[1:], strict=True)
        ]
        arr = parts[0] if len(parts) == 1 else da.concatenate(parts, axis=0)
        out.append(Blocked(arr, b.kind, b.source, b.nnz))
    return out


#: Memory a tree-reduction step may hold in partial results (bytes).
REDUCE_BYTES = 64 * 2**20

#: Block outputs at least this large (bytes) are summed along sequential chains, not a tree.
CHAIN_BYTES = 2 * 2**20

#: Most chains (the parallelism of a chained reduction, see :func:`_n_chains`); the dask config
#: key ``ooc_lowrank.reduce_chains`` overrides it (raise it on clusters with more threads).
REDUCE_CHAINS = 8


def _fan_in(size: int) -> int:
    """Fan-in of the tree reduction: as many partials as fit REDUCE_BYTES, between 2 and 8.

    A step holds ``fan_in`` partial results of ``size`` float64 values; with 16 MB per block
    output (Gram + cross statistics of several line-search trials) a fan-in of 8 alone would
    need 128 MB on a worker.
    """
    return int(min(8, max(2, REDUCE_BYTES // max(8 * size, 1))))


#: An accumulating reduction (``fn.accumulates``) whose accumulator is larger than this runs
#: along one chain: its accumulators, not block outputs, are then the pass's memory (GIMC's
#: gradient at the Delicious-large shape: 782,585 x 1,000 float64 = 6.3 GB each, issue 25).
ONE_CHAIN_BYTES = 2**30


def _n_chains(nb: int, size: int, accumulates: bool = False) -> int:
    """Chains of a chained reduction: their totals (``size`` float64 each) wait for the final
    sum, so at most REDUCE_BYTES of them, between 2 and :data:`REDUCE_CHAINS` (the dask config
    key ``ooc_lowrank.reduce_chains`` overrides it); one for an accumulating reduction with an
    accumulator above :data:`ONE_CHAIN_BYTES`."""
    n = dask.config.get("ooc_lowrank.reduce_chains", None)
    if n is None and accumulates and 8 * size > ONE_CHAIN_BYTES:
        n = 1
    if n is None:
        n = min(REDUCE_CHAINS, max(2, REDUCE_BYTES // max(8 * size, 1)))
    return int(max(1, min(nb, int(n))))


def _chain_edges(fn, nb, sizes, rows_at) -> np.ndarray:
    """Block boundaries of the chains of a chained reduction over ``nb`` blocks (row outputs
    are not accumulated: the chain count follows the summed outputs only)."""
    n_chains = _n_chains(
        nb, sum(z for i, z in enumerate(sizes) if i not in rows_at), _accumulates(fn)
    )
    return np.linspace(0, nb, n_chains + 1).round().astype(int)


def _link(fn, n_inputs, offset, bounds, i, sizes, rows_at) -> dict:
    """The keywords of :func:`_fold_block` for block ``i`` (graph and in-memory paths alike)."""
    return dict(
        fn=fn,
        n_inputs=n_inputs,
        offset=offset,
        start=int(bounds[i]),
        stop=int(bounds[i + 1]),
        sizes=sizes,
        rows_at=rows_at,
    )


def _fold_block(
    acc,
    *items,
    fn=None,
    n_inputs=0,
    offset=False,
    start=0,
    stop=0,
    sizes=(),
    rows_at=(),
    readers=(),
):
    """One link of a chained reduction: ``acc + fn(block)`` as a flat float64 vector.

    The block outputs are added **into** ``acc``: an accumulator has exactly one consumer (the
    next link of its chain, which the graph builder guarantees), so nobody can observe it after
    this link; a link on another worker receives a deserialized copy anyway.  A link therefore
    holds one accumulator plus the block function's own outputs, whatever the number of blocks.
    A failed link fails the whole pass (the caller recomputes the pass from its inputs).
    Store-backed inputs (``readers``) are read inside the link, so a block is read only when
    its link runs: separate read tasks are roots that a scheduler runs ahead of slow links
    (a 2M x 500 KernelMaxide Gram pass on a two-thread worker limited to a quarter of the
    store held 26 blocks of reads and was killed at its limit).

    With row outputs (``rows_at``) the accumulator is ``(sum of the other outputs, [row outputs
    of each block so far])``: the row vectors (``stop - start`` values each) are kept, not
    summed, and :func:`_total` places them.
    """
    blocks, args = list(items[:n_inputs]), items[n_inputs:]
    for j, h in enumerate(readers):  # store inputs are read here, by the link that uses them
        if h is not None:
            blocks[j] = h.read(start, stop)
    blocks, args = _aligned(blocks), _aligned_args(args)
    if _accumulates(fn):  # the block function adds into the chain's accumulator itself
        new = np.zeros(sum(sizes), dtype=_accumulator_dtype(fn)) if acc is None else acc
        new = new if new.flags.writeable else new.copy()  # deserialized: a read-only frame
        with _TaskThreads():
            fn(new, start, *blocks, *args) if offset else fn(new, *blocks, *args)
        return new
    with _TaskThreads():
        raw = fn(start, *blocks, *args) if offset else fn(*blocks, *args)
    outs = _as_tuple(raw)
    rows = []
    if rows_at:
        for i in sorted(rows_at):
            r = np.asarray(outs[i], dtype=np.float64)
            if r.shape[:1] != (stop - start,):
                raise ValueError(
                    f"block function {fn!r} returned shape {r.shape} for its row output {i} on "
                    f"rows {start}:{stop}; expected {stop - start} (one per row of the block) "
                    "along the first axis"
                )
            rows.append(r.reshape(-1))  # C order: a 2-D row output's rows stay together
        outs = [o for i, o in enumerate(outs) if i not in rows_at]
        sizes = [z for i, z in enumerate(sizes) if i not in rows_at]
        acc, parts = (None, []) if acc is None else acc
    if acc is None:  # first link: cast-copy, no zero fill
        new = _flatten_outputs(outs, sum(sizes), fn)
    else:  # a deserialized accumulator may be a read-only view of a network frame
        new = acc if acc.flags.writeable else acc.copy()
        _flatten_outputs(outs, sum(sizes), fn, dst=new, add=True)
    return (new, [*parts, rows]) if rows_at else new


def _total(chains, sizes=(), rows_at=()):
    """Sum of the chain totals in chain order; with row outputs, the full flat result: the
    summed outputs and each block's row vectors (in block order: the chains are contiguous
    groups of blocks) at their slots."""
    if not rows_at:
        out = chains[0] if chains[0].flags.writeable else chains[0].copy()  # sole consumer
        for p in chains[1:]:
            out += p
        return out
    summed = _total([c[0] for c in chains])
    parts = [rows for c in chains for rows in c[1]]
    out = np.empty(sum(sizes), dtype=np.float64)
    k = j = 0
    for i, z in enumerate(sizes):
        if i in rows_at:
            n = sorted(rows_at).index(i)
            out[k : k + z] = np.concatenate([rows[n] for rows in parts]) if parts else 0.0
        else:
            out[k : k + z] = summed[j : j + z]
            j += z
        k += z
    return out


def _block_reader(b: Blocked, ref: Blocked):
    """The store handle of ``b`` when its blocks are reads of that handle at ``ref``'s row
    bounds (what :func:`as_blocked` and :func:`align` make of a store array), else None."""
    if b.reads is not None and np.array_equal(b.bounds, ref.bounds):
        return b.reads
    return None


def _graph_inputs(fn, blocked, ref, args, size, offset, client):
    """What a delayed pass graph (chains, tree) is built from: a unique token, each input's
    store reader (None unless its blocks are reads of a store at ``ref``'s row bounds: the
    block's task reads it), the other inputs' blocks as Delayed objects (None at a reader's
    place), and the graph arguments (:func:`_unwrap_args`)."""
    tok = dask.base.tokenize(fn, size, ref.n_blocks, offset, os.urandom(8))
    readers = tuple(_block_reader(b, ref) for b in blocked)
    cols = [
        None if h is not None else b.dask.to_delayed(optimize_graph=False).reshape(-1)
        for b, h in zip(blocked, readers, strict=True)
    ]
    return tok, readers, cols, _unwrap_args(args, active_client(client))


def _chained(fn, blocked, ref, args, offset, sizes, rows_at, client=None):
    """Sum of ``fn`` over the row blocks along :func:`_n_chains` sequential chains.

    Blocks are split into contiguous groups; each group is one chain of :func:`_fold_block`
    tasks, and the chain totals are summed in a fixed order.  Memory per running chain is one
    accumulator instead of the ``fan_in x depth`` partials a tree holds, which is what lets
    reductions with large outputs (GIMC statistics: ``D^2 + L D`` per trial) run on workers
    with a small memory limit.  The order of additions depends only on the chunking and the
    chain count, never on the scheduler.
    """
    from dask.delayed import delayed

    nb = ref.n_blocks
    size = sum(sizes)
    # store inputs read with ref's row blocks are read by the links themselves (_fold_block)
    tok, readers, cols, dargs = _graph_inputs(fn, blocked, ref, args, size, offset, client)
    edges = _chain_edges(fn, nb, sizes, rows_at)
    n_chains = len(edges) - 1
    fold = delayed(_fold_block, pure=False)
    totals = []
    for c in range(n_chains):
        acc = None
        for i in range(edges[c], edges[c + 1]):
            acc = fold(
                acc,
                *[None if col is None else col[i] for col in cols],
                *dargs,
                **_link(fn, len(blocked), offset, ref.bounds, i, sizes, rows_at),
                readers=readers if any(h is not None for h in readers) else (),
                dask_key_name=f"reduce-chain-{tok}-{i}",
            )
        totals.append(acc)
    # a Delayed, not a dask array: finalizing a one-chunk array copies the (possibly large) total
    return delayed(_total, pure=False)(
        totals, sizes=sizes, rows_at=rows_at, dask_key_name=f"reduce-total-{tok}"
    )


def _plan(fn, blocked, ref, args, offset, shapes, chains, split_every):
    """Output layout of a reduction (the same for the graph and the direct path):
    ``(shapes, single, sizes, rows_at, chains)``; shapes come from ``shapes`` or from one call
    of ``fn`` on one-row all-zero probe blocks; ``chains`` is resolved (see
    :func:`reduce_blocks`)."""
    if shapes is None and _accumulates(fn):
        raise ValueError(f"reduce_blocks: an accumulating block function ({fn!r}) needs shapes=")
    if _accumulates(fn) and _row_outputs(fn):
        raise ValueError(f"reduce_blocks: {fn!r} both accumulates and has row outputs; pick one")
    if shapes is None:
        empties = [_probe_block(b) for b in blocked]
        raw = fn(0, *empties, *args) if offset else fn(*empties, *args)
        single = not isinstance(raw, tuple)
        shapes = [np.shape(r) for r in _as_tuple(raw)]
    else:
        single = False
        shapes = [tuple(s) for s in shapes]
    rows_at = _row_outputs(fn)
    shapes = [(ref.shape[0], *s[1:]) if i in rows_at else s for i, s in enumerate(shapes)]
    sizes = tuple(int(np.prod(s)) for s in shapes)
    if chains is None:
        chains = 8 * int(sum(sizes)) >= CHAIN_BYTES and split_every is None
    return shapes, single, sizes, rows_at, bool(chains or rows_at or _accumulates(fn))


def reduce_blocks(
    fn: Callable,
    *inputs,
    args: Sequence = (),
    offset: bool = False,
    shapes=None,
    split_every: int | None = None,
    chains: bool | None = None,
    client=None,
) -> Reduction:
    """Lazy sum over row blocks of ``fn(*blocks, *args)`` (float64, fixed order).

    Parameters
    ----------
    fn : callable
        ``fn(*blocks, *args) -> ndarray | tuple of ndarrays`` (``fn(row_start, *blocks, *args)``
        with ``offset=True``).  Must return arrays of the same shapes on every block.
    *inputs : Blocked or anything :func:`as_blocked` accepts
        Row-aligned inputs; the first one's blocks are used for all.
    args : sequence
        Small state (factors, Gram matrices); large arrays are shipped once per graph.
    shapes : list of tuple, optional
        Output shapes (of the sums); inferred by calling ``fn`` once on one-row all-zero blocks
        when omitted.

    Notes
    -----
    Row outputs: ``fn.row_outputs = (i, ...)`` declares outputs ``i`` as vectors over the
    block's rows (``(rows_in_block,)``, or ``(rows_in_block, c)`` for ``c`` values a row, block
    order).  Their result is the full-length ``(n_rows,)`` (or ``(n_rows, c)``: ``shapes``
    gives ``c``, or the probe) array that holds each block's values at its rows: a placement, no
    arithmetic, so the other blocks' zeros are never allocated, summed or shipped (a GLRL power
    pass returns ``G v`` this way).  Such reductions always run along chains (``chains`` and
    ``split_every`` do not apply): each chain keeps its blocks' row vectors and the final task
    concatenates them, so the row outputs cost one full-length vector in all, not one per
    block or per chain.

    Accumulating block functions: ``fn.accumulates = True`` declares ``fn(acc, *blocks,
    *args)`` (``fn(acc, row_start, ...)`` with ``offset``), which adds its block's outputs
    into ``acc``, the flat float64 accumulator of its chain (outputs in C order, one after the
    other; ``fn.accumulator_dtype`` chooses another dtype, e.g. float32), and returns nothing.
    Such reductions always run along chains and need ``shapes``.  A block then allocates no
    output of the full size: a sparse block whose gradient touches only its nonzero columns scatter-adds those rows (GIMC's ``X_b^T Xi_b``,
    ``d x m`` with ``d`` = 782,585 at the Delicious shape, issue 25).
    split_every : int, optional
        Fan-in of the tree reduction; default from the output size (:func:`_fan_in`).
    chains : bool, optional
        Sum along sequential chains (:func:`_chained`) instead of a tree.  Default: chains when
        one block's output is at least :data:`CHAIN_BYTES`, where a tree's partials would
        dominate a worker's memory; a tree otherwise (full parallelism, small partials).
    client : distributed.Client, optional
        The client the reduction will be computed on (default: the active one, if any).  On a
        distributed client, large ``args`` are scattered once and reused by later graphs.
    """
    blocked, ref = _prepare(inputs)
    args = tuple(args)
    shapes, single, sizes, rows_at, chains = _plan(fn, blocked, ref, args, offset, shapes, chains,
                                                   split_every)  # fmt: skip
    size = int(sum(sizes))
    nb = ref.n_blocks
    if not nb:
        return Reduction(da.zeros(size, chunks=size), shapes, single)
    direct = functools.partial(
        _reduce_direct, fn, ref.bounds, args, offset, sizes, rows_at, chains, split_every
    )
    if chains:  # row outputs travel along chains (see Notes)
        return Reduction(
            None,
            shapes,
            single,
            build=lambda: _chained(
                fn, _shipped(blocked, client), ref, args, offset, sizes, rows_at, client
            ),
            direct=direct,
            inputs=blocked,
        )

    def build():
        if all(_block_reader(b, ref) is not None for b in blocked):  # store inputs only
            return _tree_graph(fn, blocked, ref, args, offset, size, split_every, client)
        # in-memory and Dask inputs: dask.array fuses each block's slice or chunk into the
        # block function's task (one task + one alias per block); the delayed graph would not
        packed = da.map_blocks(
            _packed_block,
            *[b.dask for b in _shipped(blocked, client)],
            *_unwrap_args(args, active_client(client)),
            fn=fn,
            n_inputs=len(blocked),
            offset=offset,
            bounds=ref.bounds,
            size=size,
            chunks=((1,) * nb, (size,)),
            dtype=np.float64,
            meta=np.empty((0, 0), np.float64),
        )
        return packed.sum(axis=0, split_every=split_every or _fan_in(size))

    return Reduction(None, shapes, single, build=build, direct=direct, inputs=blocked)


def _tree_graph(fn, blocked, ref, args, offset, size, split_every, client=None):
    """The tree path's graph: one task per block (store inputs read by the task itself, as the
    chains' links do) and the tree of :func:`_tree_sum`, task by task, the same groups and
    order as ``packed.sum(axis=0, split_every=...)`` (bitwise its result) without that
    graph's per-block chunk-sum and alias tasks: an MVM pass over three store views and a
    target ran 2.2 tasks per block, now 1 plus the tree's (issue 27)."""
    from dask.delayed import delayed

    nb = ref.n_blocks
    tok, readers, cols, dargs = _graph_inputs(fn, blocked, ref, args, size, offset, client)
    block = delayed(_read_block_row, pure=False)
    rows = [
        block(
            *[None if col is None else col[i] for col in cols],
            *dargs,
            readers=readers,
            fn=fn,
            offset=offset,
            bounds=ref.bounds,
            size=size,
            i=i,
            dask_key_name=f"reduce-block-{tok}-{i}",
        )
        for i in range(nb)
    ]
    level = iter(range(nb))

    def step(group, keepdims):
        return delayed(_sum_step, pure=False)(
            group, keepdims, dask_key_name=f"reduce-tree-{tok}-{next(level) + nb}"
        )

    return _tree_sum(rows, nb, split_every or _fan_in(size), step=step)


def _read_block_row(*items, readers=(), fn=None, offset=False, bounds=None, size=0, i=0):
    """Block ``i``'s outputs as one ``(1, size)`` float64 row (:func:`_packed_block`), its
    store inputs (``readers``) read here; the other inputs arrive in ``items`` (None at a
    store input's place)."""
    n = len(readers)
    blocks = [
        h.read(int(bounds[i]), int(bounds[i + 1])) if h is not None else b
        for h, b in zip(readers, items[:n], strict=True)
    ]
    return _packed_block(*blocks, *items[n:], fn=fn, n_inputs=n, offset=offset, bounds=bounds,
                         size=size, block_id=(i, 0))  # fmt: skip


def _rows_block(*items, fn=None, n_inputs=0, offset=False, bounds=None, block_id=None):
    blocks, args = items[:n_inputs], items[n_inputs:]
    return _call_block(fn, blocks, args, offset, bounds, block_id)


def map_rows(
    fn: Callable,
    *inputs,
    args: Sequence = (),
    n_cols: int,
    dtype=np.float64,
    offset: bool = False,
    sparse: bool = False,
) -> da.Array:
    """Lazy row-aligned map: ``fn(*blocks, *args)`` returns ``(rows_in_block, n_cols)`` per block.

    Returns a Dask array of shape ``(n_rows, n_cols)`` with the first input's row chunks; nothing
    is computed.  Use it for predictions (scores of a block, top-k of a block).  Large ``args``
    are scattered once on an active distributed client, as in :func:`reduce_blocks` (a model's
    landmarks then do not travel inside every prediction graph).
    """
    blocked, ref = _prepare(inputs)
    meta = sp.csr_matrix((0, 0), dtype=dtype) if sparse else np.empty((0, 0), dtype=dtype)
    return da.map_blocks(
        _rows_block,
        *[b.dask for b in _shipped(blocked, None)],
        *_unwrap_args(tuple(args), active_client()),
        fn=fn,
        n_inputs=len(blocked),
        offset=offset,
        bounds=ref.bounds,
        chunks=(ref.dask.chunks[0], (int(n_cols),)),
        dtype=dtype,
        meta=meta,
    )


# ---------------------------------------------------------------------------------------------
# compute
# ---------------------------------------------------------------------------------------------


def _scheduler_kwargs(client):
    if client is not None:
        return {"scheduler": client}
    if dask.config.get("scheduler", None) is not None:
        return {}
    sched = _default_client()  # an active distributed client not registered in the config
    if sched is not None:
        return {"scheduler": sched}
    return {"scheduler": "threads", "num_workers": os.cpu_count() or 1}


_CONTROLLER = None


def _blas_controller():
    """One cached ``threadpoolctl.ThreadpoolController`` (building one scans every library)."""
    global _CONTROLLER
    if _CONTROLLER is None:
        from threadpoolctl import ThreadpoolController

        _CONTROLLER = ThreadpoolController()
    return _CONTROLLER


class NoWorkersError(RuntimeError):
    """A distributed cluster had no worker for longer than :func:`no_worker_timeout`."""


#: Seconds a pass may wait on a cluster without any worker before :class:`NoWorkersError`.
DEFAULT_NO_WORKER_TIMEOUT = 60.0
#: Seconds between checks of the cluster's worker count while a pass runs.
_WORKER_POLL = 0.5


def no_worker_timeout() -> float:
    """The wait (seconds) for workers to (re)appear: dask config ``ooc_lowrank.no_worker_timeout``,
    else env ``OOC_LOWRANK_NO_WORKER_TIMEOUT``, else :data:`DEFAULT_NO_WORKER_TIMEOUT`."""
    v, t = _setting("no_worker_timeout", DEFAULT_NO_WORKER_TIMEOUT, float)
    if t is None or not t > 0 or t == float("inf"):
        raise ValueError(
            f"no_worker_timeout must be a number > 0; got {v!r}. Set the dask config "
            "'ooc_lowrank.no_worker_timeout' (or env OOC_LOWRANK_NO_WORKER_TIMEOUT) to a number "
            "of seconds, e.g. 60"
        )
    return t


_GATHER_POOL = None


def _gather_pool():
    """Threads that wait in ``client.gather`` while the caller watches the worker count."""
    global _GATHER_POOL
    if _GATHER_POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _GATHER_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ooc-lowrank-gather")
    return _GATHER_POOL


def _compute_on_cluster(client, targets):
    """``client.compute`` + ``gather`` that fails when the cluster has no worker for
    :func:`no_worker_timeout` seconds (the scheduler would otherwise wait forever).  The gather
    runs in a helper thread, so a pass that finishes returns at once (no polling delay)."""
    from concurrent.futures import TimeoutError as WaitTimeout

    timeout = no_worker_timeout()
    futures = client.compute(list(targets))
    waiting = _gather_pool().submit(client.gather, futures)
    lost_since = None
    try:
        while True:
            try:
                return waiting.result(timeout=_WORKER_POLL)
            except WaitTimeout:
                pass
            if client.nthreads():  # a live RPC to the scheduler: the current workers
                lost_since = None
                continue
            now = time.monotonic()
            lost_since = now if lost_since is None else lost_since
            if now - lost_since >= timeout:
                raise NoWorkersError(
                    f"no Dask worker alive for {timeout:g} s while computing a pass: every "
                    f"worker of the cluster (scheduler {client.scheduler.address}) died or left "
                    "and none came back; the scheduler is still up. Check the workers' logs "
                    "(memory-limit kills, lost jobs), restart workers, or wait longer with dask "
                    "config 'ooc_lowrank.no_worker_timeout' / env OOC_LOWRANK_NO_WORKER_TIMEOUT "
                    f"(seconds, now {timeout:g})"
                )
    except BaseException:
        client.cancel(futures)
        raise


def compute(*lazy, client=None):
    """Evaluate reductions / dask arrays in a single ``dask.compute`` under the scheduler policy.

    Returns one result per argument (a :class:`Reduction` gives its array or tuple of arrays).
    Reductions whose inputs are all held by this process, when the default local threaded
    scheduler would run them, take the direct path instead (no graph; see :func:`map_reduce`).
    On a distributed cluster a pass that has no worker for :func:`no_worker_timeout` seconds
    raises :class:`NoWorkersError`.
    """
    if lazy and all(isinstance(x, Reduction) and x.direct is not None for x in lazy):
        lists = [_direct_blocks(x.inputs, client) for x in lazy]
        if all(x is not None for x in lists):  # the direct path: no graph
            return tuple(x.unpack(x.direct(blocks)) for x, blocks in zip(lazy, lists, strict=True))
    kw = _scheduler_kwargs(client)
    _PASS.pinned = set()  # the scatters of this pass's graphs never drop one another
    try:
        targets = [x.packed if isinstance(x, Reduction) else x for x in lazy]
    finally:
        _PASS.pinned = None
    sched = kw.get("scheduler", None) if kw else active_client()
    if kw.get("scheduler") == "threads":
        with one_blas_thread():
            res = dask.compute(*targets, **kw)
    elif hasattr(sched, "nthreads") and hasattr(sched, "gather"):
        res = _compute_on_cluster(sched, targets)
    else:
        res = dask.compute(*targets, **kw)
    return tuple(
        x.unpack(np.asarray(r)) if isinstance(x, Reduction) else r
        for x, r in zip(lazy, res, strict=True)
    )


# ---------------------------------------------------------------------------------------------
# the direct path: blocks held by this process, on the local scheduler, without a graph
# ---------------------------------------------------------------------------------------------


def _local(client) -> bool:
    """The scheduler policy resolves to the default local threaded scheduler (no ``client``,
    no scheduler set in ``dask.config``, no active distributed client)."""
    return _scheduler_kwargs(client).get("scheduler") == "threads"


def _memory_blocks(b: Blocked):
    """The row blocks of ``b`` as in-memory objects of this process (a list), else None.

    NumPy / scipy.sparse sources give the slices the graph path gives (a single block is the
    source itself); inputs cached by :func:`maybe_persist` or made by
    :func:`map_rows_persisted` on the local scheduler give their held blocks."""
    if b.held is not None:
        return b.held
    if not b.in_memory:
        return None
    if b.n_blocks == 1:
        return [b.source]
    cached = b.__dict__.get("_slices")
    if cached is not None:
        return cached
    blocks = [b.source[int(s) : int(e)] for s, e in zip(b.bounds[:-1], b.bounds[1:], strict=True)]
    if sp.issparse(b.source) and b.nbytes <= SLICE_CACHE_BYTES:
        b._slices = blocks  # a sparse slice is a copy: made once, not once per pass
    return blocks


def _direct_blocks(blocked, client):
    """Per input, its list of in-memory blocks when the direct path applies: every input is
    held by this process and the local threaded scheduler would run the pass; else None."""
    if not _local(client):
        return None
    lists = [_memory_blocks(b) for b in blocked]
    return None if any(x is None for x in lists) else lists


_POOL = None
_IN_POOL = threading.local()


def _run_blocks(task, n):
    """``[task(i) for i in range(n)]`` as an in-order iterator, on a pool of one thread per core
    (the threads scheduler's own count); serially for one task, one core, or a call made from
    inside a block function (a nested pass must not wait for the pool it occupies)."""
    global _POOL
    workers = os.cpu_count() or 1
    if n <= 1 or workers == 1 or getattr(_IN_POOL, "busy", False):
        return map(task, range(n))
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ooc-lowrank-block")

    def run(i):
        _IN_POOL.busy = True
        try:
            return task(i)
        finally:
            _IN_POOL.busy = False

    return _POOL.map(run, range(n))


class _OneBlasThread:
    """The process-wide BLAS limit of :func:`one_blas_thread`, counted: the outermost entry
    sets it, the last exit restores it, nested entries (a driver loop that already holds it
    around its passes) cost a lock and a counter instead of a threadpoolctl round trip."""

    _lock = threading.Lock()
    _depth = 0
    _limit = None

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                cls._limit = _blas_controller().limit(limits=1, user_api="blas")
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                limit, cls._limit = cls._limit, None
                limit.restore_original_limits()
        return False


def one_blas_thread():
    """Context manager: BLAS limited to one thread (restored when the outermost holder exits;
    the limit is process-wide, so nested and concurrent holders share it).  The engine's rule
    for its own passes (the threads scheduler gives each Dask thread one; the direct path each
    pool thread), and for driver code that runs many small products between passes (a single
    block runs on one core: two OpenBLAS threads on the skinny products of small problems ran
    3-7x slower than one on this 2-core machine)."""
    return _OneBlasThread()


def local_map(fn: Callable, n: int) -> list:
    """``[fn(i) for i in range(n)]`` on this process's pool of one thread per core (the direct
    path's), one BLAS thread each, in order.  For driver-side work between passes that splits
    into independent parts (row halves of a kernel block or of a product): no pass runs then, so
    the driver owns the cores.  Each part must write only its own output (e.g. its rows)."""
    with one_blas_thread():
        return list(_run_blocks(fn, int(n)))


def _sum_step(group, keepdims):
    """One step of :func:`_tree_sum`: ``np.sum`` over the concatenated group (dask's)."""
    return np.sum(np.concatenate(group, axis=0), axis=(0,), keepdims=keepdims, dtype=np.float64)


def _tree_sum(parts, nb, split_every, step=_sum_step):
    """``sum(axis=0, split_every=split_every)`` of ``nb`` rows ``(1, size)`` (an in-order
    iterable), step for step as ``dask.array`` takes it (``_tree_reduce``: the same depth, the
    same groups of consecutive partials, each group summed by ``np.sum`` over its
    concatenation): bitwise the graph path's sum.  Groups of the first level are summed as
    their blocks arrive, so at most about ``split_every`` block outputs wait at a time.
    ``step(group, keepdims)`` sums one group: :func:`_sum_step`, or a task of it in a graph
    (:func:`_tree_graph`)."""
    k = max(int(split_every), 2)
    depth = int(max(1, math.ceil(math.log(nb, k)))) if nb > 1 else 1

    if depth == 1:
        return step(list(parts), False)
    level, group = [], []
    for p in parts:
        group.append(p)
        if len(group) == k:
            level.append(step(group, True))
            group = []
    if group:
        level.append(step(group, True))
    for _ in range(depth - 2):
        level = [step(level[i : i + k], True) for i in range(0, len(level), k)]
    return step(level, False)


def _reduce_direct(fn, bounds, args, offset, sizes, rows_at, chains, split_every, lists):
    """The flat sum (float64) of a :func:`reduce_blocks` reduction over held blocks (``lists``:
    per input, its blocks): the block function runs on the local pool, BLAS one thread per pool
    thread as on the threads scheduler (all of them for a single block), and the outputs are
    summed in the graph path's order (its chains, or its tree by :func:`_tree_sum`)."""
    size = int(sum(sizes))
    nb = len(bounds) - 1
    with one_blas_thread():
        if chains:
            edges = _chain_edges(fn, nb, sizes, rows_at)
            n_chains = len(edges) - 1

            def chain(c):
                acc = None
                for i in range(edges[c], edges[c + 1]):
                    link = _link(fn, len(lists), offset, bounds, i, sizes, rows_at)
                    acc = _fold_block(acc, *[x[i] for x in lists], *args, **link)
                return acc

            return _total(list(_run_blocks(chain, n_chains)), sizes=sizes, rows_at=rows_at)

        def block(i):
            row = _packed_block(
                *[x[i] for x in lists],
                *args,
                fn=fn,
                n_inputs=len(lists),
                offset=offset,
                bounds=bounds,
                size=size,
                block_id=(i, 0),
            )
            return np.sum(row, axis=(0,), keepdims=True, dtype=np.float64)  # dask's chunk step

        return _tree_sum(_run_blocks(block, nb), nb, split_every or _fan_in(size))


def _map_direct(fn, lists, bounds, args, offset):
    """The outputs of ``fn`` on every held block (block order), on the local pool."""

    def block(i):
        return _call_block(fn, [x[i] for x in lists], args, offset, bounds, (i, 0))

    with one_blas_thread():
        return list(_run_blocks(block, len(bounds) - 1))


def runs_direct(*inputs, client=None) -> bool:
    """A pass over ``inputs`` (row-aligned :class:`Blocked`) would take the direct path: every
    input is held by this process and the local threaded scheduler would run it, so block
    functions run in this process (what they keep in a process-local cache, the driver can
    take afterwards)."""
    return _direct_blocks(list(inputs), client) is not None


def from_held_blocks(blocks, bounds, kind="dense", nnz=None) -> Blocked:
    """A :class:`Blocked` over row blocks already held by this process (``blocks[i]`` holds
    rows ``bounds[i]:bounds[i + 1]``), read by later passes like :func:`map_rows_persisted`'s
    output (the direct path reads the blocks themselves)."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if len(blocks) != len(bounds) - 1 or any(
        b.shape[0] != e - s for b, s, e in zip(blocks, bounds[:-1], bounds[1:], strict=True)
    ):
        raise ValueError("blocks must hold the rows of bounds, one block per row range")
    return _from_held(blocks, bounds, kind, nnz)


def _held_block(_, held=None, block_id=None):
    return held[0][block_id[0]]


def _from_held(blocks, bounds, kind, nnz=None) -> Blocked:
    """A :class:`Blocked` over blocks held in this process (``held``), with a Dask array that
    reads them (for callers that build graphs, e.g. predictions under a set scheduler)."""
    first = blocks[0]
    meta = (
        sp.csr_matrix((0, 0), dtype=first.dtype) if kind == "csr" else np.empty((0, 0), first.dtype)
    )
    held = list(blocks)
    out = Blocked._lazy(
        lambda: da.map_blocks(
            _held_block,
            da.arange(len(held), chunks=1),
            held=(held,),  # a tuple: the list inside is passed as is, never traversed or hashed
            new_axis=1,
            chunks=(tuple(np.diff(bounds).tolist()), (first.shape[1],)),
            dtype=first.dtype,
            meta=meta,
            name="held-" + os.urandom(8).hex(),
        ),
        bounds, (int(bounds[-1]), first.shape[1]), first.dtype, kind, None, nnz,
    )  # fmt: skip
    out.held = held
    return out


def map_reduce(
    fn: Callable,
    *inputs,
    args: Sequence = (),
    offset=False,
    shapes=None,
    client=None,
    split_every=None,
    chains=None,
):
    """``compute(reduce_blocks(fn, *inputs, ...))``: one pass, one ``dask.compute``.

    Direct path: when every input is held by this process (NumPy / scipy.sparse, or cached by
    :func:`maybe_persist` / made by :func:`map_rows_persisted` on the local scheduler) and the
    local threaded scheduler would run the pass, no graph is built: ``fn`` runs on the blocks
    in a pool of one thread per core (BLAS one thread each, as on the threads scheduler) and
    the outputs are summed in the graph path's order (:func:`_tree_sum`, the same chains), so
    the result is the graph path's.  A single block is passed to ``fn`` as is (the source
    itself).  Graph building and
    scheduling cost about 10-50 ms per pass, which dominates small problems that iterate
    many passes.
    """
    blocked, ref = _prepare(inputs)
    args = tuple(args)
    lists = _direct_blocks(blocked, client)
    if lists is not None and ref.n_blocks == 1:
        srcs = [x[0] for x in lists]
        with one_blas_thread():
            raw = fn(0, *srcs, *args) if offset else fn(*srcs, *args)
        outs = tuple(np.array(o, dtype=np.float64) for o in _as_tuple(raw))
        # as on the other paths: a tuple when shapes are given (no probe tells "single")
        return outs if isinstance(raw, tuple) or shapes is not None else outs[0]
    (out,) = compute(
        reduce_blocks(
            fn,
            *blocked,
            args=args,
            offset=offset,
            shapes=shapes,
            split_every=split_every,
            chains=chains,
            client=client,
        ),
        client=client,
    )
    return out


def map_rows_compute(fn: Callable, *inputs, args: Sequence = (), n_cols: int, client=None):
    """``compute(map_rows(fn, *inputs, ...))`` as one float64 ndarray ``(n_rows, n_cols)``.

    For results that are small enough to hold (``n x k`` factors), never for ``n x L`` scores.
    Direct path as in :func:`map_reduce`: held blocks on the local threaded scheduler are mapped
    without a graph (the same arithmetic, concatenated in block order).
    """
    blocked, ref = _prepare(inputs)
    lists = _direct_blocks(blocked, client)
    if lists is not None and ref.n_blocks == 1:
        with one_blas_thread():
            return np.asarray(fn(*[x[0] for x in lists], *args), dtype=np.float64)
    if lists is not None:
        if not ref.n_blocks:
            return np.zeros((0, int(n_cols)))
        outs = _map_direct(fn, lists, ref.bounds, tuple(args), False)
        return np.asarray(np.concatenate([np.asarray(o) for o in outs]), dtype=np.float64)
    (out,) = compute(map_rows(fn, *blocked, args=args, n_cols=n_cols), client=client)
    return np.asarray(out, dtype=np.float64)


def _cluster_cache_cap(client):
    """Half the total worker ``memory_limit`` of the distributed cluster in use, else None."""
    sched = active_client(client)
    if sched is None or not hasattr(sched, "scheduler_info"):
        return None
    limits = _worker_limits(sched)  # None: an unreachable scheduler, the fit reports the error
    if not limits or min(limits) <= 0:
        return None
    return int(0.5 * sum(limits))


def _persist(*arrays, client=None):
    """``dask.persist`` under the scheduler policy (one compute; blocks stay in this process
    on the local schedulers, on the workers on a cluster)."""
    return dask.persist(*arrays, **_scheduler_kwargs(client))


def map_rows_persisted(
    fn: Callable,
    B: Blocked,
    *,
    args: Sequence = (),
    n_cols: int,
    kind: str = "dense",
    nnz=None,
    offset: bool = False,
    client=None,
) -> Blocked:
    """:func:`map_rows` of one input, computed once and kept in memory as a :class:`Blocked`
    (``kind`` "dense" or "csr") that later passes read like any other input.

    Held blocks on the local scheduler are mapped directly (no graph), as in
    :func:`map_reduce`, and the result is held as a list of blocks; the result is not
    re-validated (it is the library's own output).
    """
    lists = _direct_blocks([B], client)
    if lists is not None and B.n_blocks == 1:
        src = sp.csr_matrix(lists[0][0]) if B.kind == "csr" else lists[0][0]
        with one_blas_thread():
            out = fn(0, src, *args) if offset else fn(src, *args)
        return _from_memory(out, np.array([0, B.shape[0]], dtype=np.int64), kind)
    if lists is not None and B.n_blocks:
        outs = _map_direct(fn, lists, B.bounds, tuple(args), offset)
        return _from_held(outs, B.bounds, kind, nnz)
    lazy = map_rows(fn, B, args=args, n_cols=n_cols, offset=offset, sparse=kind == "csr")
    (arr,) = _persist(lazy, client=client)
    return Blocked(arr, kind, None, nnz)


def _cache_bytes(b: Blocked) -> int:
    """Bytes ``b`` would hold in memory: :attr:`Blocked.nbytes`, except for a sparse Dask input
    of unknown nnz, whose bound is its dense size with indices (never an underestimate)."""
    if b.kind == "csr" and b.nnz is None:
        return int(b.shape[0]) * int(b.shape[1]) * (b.dtype.itemsize + 4) + 8 * int(b.shape[0])
    return b.nbytes


def _held_of(arr):
    """The chunks of a Dask array persisted on a local scheduler, in row order (None if the
    persisted graph does not hold them as plain arrays)."""
    graph = arr.__dask_graph__()
    blocks = [graph.get(row[0]) for row in arr.__dask_keys__()]
    ok = all(isinstance(b, np.ndarray) or sp.issparse(b) for b in blocks)
    return blocks if ok else None


def maybe_persist(*inputs: Blocked, budget: int | None = None, client=None):
    """Keep inputs in memory across iterations when they fit ``budget`` bytes, else stream.

    The decision is explicit and logged.  Store inputs and Dask inputs are the candidates
    (a sparse Dask input of unknown nnz counts at its dense size, see :func:`_cache_bytes`).
    Inputs already in memory (NumPy / scipy) are returned unchanged, except on a distributed
    cluster, where they are persisted on the workers like a cached store (else every pass's
    graph would carry them).  On the local scheduler the cached blocks are held by the
    returned :class:`Blocked` (``held``), which the direct path reads without a graph.
    Returns the list of (possibly persisted) inputs.
    """
    budget = DEFAULT_CACHE_BYTES if budget is None else int(budget)
    cluster_cap = _cluster_cache_cap(client)
    if cluster_cap is not None and cluster_cap < budget:
        logger.info(
            "cache budget capped at %.1f MB by the workers' memory limits", cluster_cap / 2**20
        )
        budget = cluster_cap
    from_store = [
        b
        for b in inputs
        if b.held is None and not b.in_memory and (b.source is None or hasattr(b.source, "read"))
    ]
    on_cluster = active_client(client) is not None
    if on_cluster:  # in-memory inputs too: otherwise every pass's graph ships them
        from_store += [b for b in inputs if b.in_memory or b.held is not None]
    total = sum(_cache_bytes(b) for b in from_store)
    if not from_store:
        return list(inputs)
    if total <= budget:
        logger.info(
            "caching %d input(s) in memory (%.1f MB <= budget %.1f MB)%s",
            len(from_store),
            total / 2**20,
            budget / 2**20,
            " on the cluster's workers" if on_cluster else "",
        )
        arrs = dict(
            zip(
                map(id, from_store),
                _persist(*[b.dask for b in _shipped(from_store, client, once=True)],
                         client=client),  # fmt: skip
                strict=True,
            )
        )
        local = _local(client)
        out = []
        for b in inputs:
            a = arrs.get(id(b))
            if a is None:
                out.append(b)
            else:
                out.append(Blocked(a, b.kind, None, b.nnz))
                if local:
                    out[-1].held = _held_of(a)
        return out
    logger.info(
        "streaming %d input(s) from their source each pass (%.1f MB > budget %.1f MB)",
        len(from_store),
        total / 2**20,
        budget / 2**20,
    )
    return list(inputs)


__all__ += ["DEFAULT_CACHE_BYTES", "TARGET_BLOCK_BYTES", "scatter_budget"]
