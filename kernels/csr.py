"""Sparse-times-dense kernels on CSR arrays (GIMC's gradient of a sparse block, issue 25).

* :func:`csr_t_dense_add` adds ``X^T B`` into ``out`` for a CSR ``X`` (n, d) and a dense ``B``
  (n, m): a scatter-add of ``x_ik * B[i, :]`` into row ``k`` of ``out``, so only the rows of
  the columns present in the block are touched and nothing of size ``d x m`` is allocated.
  SciPy's ``X.T @ B`` returns a new dense ``(d, m)`` array for every block (6.3 GB in float64
  at the Delicious-large shape, d = 782,585 and m = 1,000, whatever the block's nonzeros).

Serial (the engine owns the cores); ``out`` belongs to the caller alone (one chain's
accumulator), so the scatter-add is race-free.  Products and sums are taken in float64 whatever
the input dtypes when ``out`` is float64.  Plain-NumPy twin: ``tests/naive_gimc.py``.
"""

from __future__ import annotations

import numpy as np
from ooc_lowrank.kernels._numba import njit


@njit
def _csr_t_dense_add(indptr, indices, data, B, out):
    n, m = B.shape
    for i in range(n):
        bi = B[i]
        for p in range(indptr[i], indptr[i + 1]):
            orow = out[indices[p]]
            v = data[p]
            for r in range(m):
                orow[r] += v * bi[r]


def csr_t_dense_add(indptr, indices, data, B, out):
    """``out += X^T B`` for ``X = csr_matrix((data, indices, indptr))`` of ``B.shape[0]`` rows.

    Parameters
    ----------
    indptr, indices, data : ndarray
        CSR arrays of ``X`` (read only; column indices < ``out.shape[0]``, unchecked: validated
        at the boundary, like every store block).
    B : ndarray of shape (n, m)
        Read only.
    out : ndarray of shape (d, m)
        Float64 or float32; may be a column slice of a wider C-ordered array (a view).

    Returns
    -------
    out
    """
    if B.shape[1] != out.shape[1] or indptr.shape[0] != B.shape[0] + 1:
        raise ValueError(
            f"csr_t_dense_add: B has shape {B.shape} and out {out.shape}, with "
            f"{indptr.shape[0] - 1} CSR rows; expected B (n_rows, m) and out (d, m)"
        )
    if out.dtype == np.float64:
        B = B.astype(np.float64, copy=False)
        data = data.astype(np.float64, copy=False)
    _csr_t_dense_add(indptr, indices, data, B, out)
    return out
