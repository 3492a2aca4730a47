"""Numba kernels of ooc_lowrank (installed as ``ooc_lowrank.kernels``).

Kernels take ndarrays and scalars, write into arrays the caller allocated, never write to
their inputs (Zarr and Dask chunks are read-only), and are compiled with the policy in
:mod:`ooc_lowrank.kernels._numba`.  Each kernel has a plain-NumPy twin in ``tests/naive.py``.
"""
