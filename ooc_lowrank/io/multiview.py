"""MovieLens ratings with side information as multi-view data (for multi-view machines).

One row per rating; two views, both CSR with one-valued entries:

* view ``X0``, the user: one-hot user id (``n_users`` columns, from ``u.user``), age bucket
  (7: <18, 18-24, 25-34, 35-44, 45-49, 50-55, 56+, the MovieLens-1M buckets), gender (2: F, M)
  and occupation (one column per line of ``u.occupation``, or per distinct value of ``u.user``);
* view ``X1``, the item: one-hot item id (``n_items`` columns, from ``u.item``) and its genres
  (the 19 flags of ``u.item``).

The columns come from the side files, never from the ratings file, so every fold (u1..u5 base
and test) written with the same side files has the same columns.  Target ``y`` ``(n, 1)``: the
rating (``target="rating"``) or 1 if rating >= 4 else 0 (``target="binary"``).
"""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

from ..storage import DatasetWriter
from ._common import ConversionError, as_dtype, open_text

AGE_EDGES = (18, 25, 35, 45, 50, 56)
N_GENRES = 19
_CHUNK = 1 << 20


def _side_file(src, given, name):
    path = given or os.path.join(os.path.dirname(os.path.abspath(src)), name)
    if not os.path.exists(path):
        raise ConversionError(path, None, f"side file {name} not found",
                              fix=f"pass its path ({name.split('.')[1]}_file=...)")
    return path


def read_users(path, occupation_file=None):
    """``u.user`` -> (user feature rows as a CSR matrix without the id part, occupation names).

    Returns ``(ids, csr)`` where row ``r`` of ``csr`` belongs to user ``ids[r]`` (1-based ids)."""
    rows = []
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("|")
            if len(parts) < 4:
                raise ConversionError(path, lineno, "a u.user line has id|age|gender|occupation|zip",
                                      line.strip()[:80])
            try:
                uid, age = int(parts[0]), int(parts[1])
            except ValueError:
                raise ConversionError(path, lineno, "user id and age must be integers",
                                      line.strip()[:80]) from None
            if parts[2] not in ("F", "M"):
                raise ConversionError(path, lineno, "gender must be F or M", parts[2])
            rows.append((uid, age, parts[2], parts[3]))
    if not rows:
        raise ConversionError(path, None, "no users", fix="check the u.user file")
    if occupation_file and os.path.exists(occupation_file):
        with open_text(occupation_file) as f:
            occupations = [ln.strip() for ln in f if ln.strip()]
    else:
        occupations = sorted({r[3] for r in rows})
    occ_index = {o: i for i, o in enumerate(occupations)}
    ids = np.array([r[0] for r in rows])
    n_side = len(AGE_EDGES) + 1 + 2 + len(occupations)
    indptr, indices = [0], []
    for uid, age, gender, occ in rows:
        if occ not in occ_index:
            raise ConversionError(path, None, f"user {uid}: occupation not in u.occupation", occ)
        indices += [
            int(np.searchsorted(AGE_EDGES, age, side="right")),
            len(AGE_EDGES) + 1 + (gender == "M"),
            len(AGE_EDGES) + 3 + occ_index[occ],
        ]
        indptr.append(len(indices))
    csr = sp.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(rows), n_side))
    return ids, csr, occupations


def read_items(path):
    """``u.item`` -> ``(ids, genre CSR (n_items, 19))``."""
    ids, flags = [], []
    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("|")
            if len(parts) < 5 + N_GENRES:
                raise ConversionError(path, lineno, f"a u.item line has 5 fields and {N_GENRES} "
                                      "genre flags", len(parts))
            try:
                ids.append(int(parts[0]))
                flags.append([int(x) for x in parts[-N_GENRES:]])
            except ValueError:
                raise ConversionError(path, lineno, "item id and genre flags must be integers",
                                      line.strip()[:80]) from None
    if not ids:
        raise ConversionError(path, None, "no items", fix="check the u.item file")
    return np.array(ids), sp.csr_matrix(np.array(flags, dtype=np.float64))


def _one_hot_plus(ids_of_rows, id_index, side, n_ids):
    """Rows ``[one_hot(id) | side[id]]`` as CSR."""
    r = id_index[ids_of_rows]
    onehot = sp.csr_matrix((np.ones(r.size), r, np.arange(r.size + 1)), shape=(r.size, n_ids))
    return sp.hstack([onehot, side[r]], format="csr")


def convert_movielens_views(
    srcs,
    dest,
    *,
    user_file=None,
    item_file=None,
    occupation_file=None,
    target="rating",
    block_rows=None,
    dtype="float32",
    overwrite=False,
    progress=None,
):
    """Write MovieLens ratings (``user item rating [timestamp]`` per line, tab or space
    separated, plain or gzip) as two views ``X0`` (user) and ``X1`` (item) and target ``y``.

    Parameters
    ----------
    srcs : path or list of paths
        Ratings files (e.g. ``u1.base``); several are concatenated by rows.
    dest : str
        Store location.
    user_file, item_file, occupation_file : path, optional
        Side files; default ``u.user``, ``u.item``, ``u.occupation`` beside the first source.
    target : {"rating", "binary"}
        ``y`` = the rating, or 1 if rating >= 4 else 0.
    dtype : {"float32", "float64"}
        dtype of the views (their values are 0/1); ``y`` is float64.
    block_rows, overwrite, progress
        As for every converter.

    Returns
    -------
    Dataset
    """
    srcs = [srcs] if isinstance(srcs, (str, os.PathLike)) else list(srcs)
    if target not in ("rating", "binary"):
        raise ConversionError(None, None, "target must be 'rating' or 'binary'", target)
    ufile = _side_file(srcs[0], user_file, "u.user")
    ifile = _side_file(srcs[0], item_file, "u.item")
    ofile = occupation_file or os.path.join(os.path.dirname(os.path.abspath(ufile)), "u.occupation")
    uids, uside, _ = read_users(ufile, ofile)
    iids, iside = read_items(ifile)
    uindex = np.full(uids.max() + 1, -1)
    uindex[uids] = np.arange(uids.size)
    iindex = np.full(iids.max() + 1, -1)
    iindex[iids] = np.arange(iids.size)
    with DatasetWriter(dest, block_rows=block_rows, overwrite=overwrite,
                       attrs={"source": "movielens_views", "target": target,
                              "view_names": ["user", "item"]}) as w:
        vdt = as_dtype(dtype)
        w.add_csr("X0", n_cols=uids.size + uside.shape[1], dtype=vdt)
        w.add_csr("X1", n_cols=iids.size + iside.shape[1], dtype=vdt)
        w.add_dense("y", n_cols=1, dtype="float64")
        done = 0
        for src in srcs:
            with open_text(src) as f:
                buf = []
                for lineno, line in enumerate(f, 1):
                    if line.strip():
                        buf.append((lineno, line))
                    if len(buf) >= _CHUNK:
                        done += _write_chunk(w, src, buf, uindex, iindex, uside, iside, target, vdt)
                        buf = []
                        if progress:
                            progress(done)
                if buf:
                    done += _write_chunk(w, src, buf, uindex, iindex, uside, iside, target, vdt)
                    if progress:
                        progress(done)
        if done == 0:
            raise ConversionError(srcs[0], None, "no ratings in the source file(s)",
                                  fix="check the file (an empty file gives no dataset)")
    from ..storage import open_dataset

    return open_dataset(dest)


def _write_chunk(w, src, buf, uindex, iindex, uside, iside, target, vdt):
    u = np.empty(len(buf), np.int64)
    it = np.empty(len(buf), np.int64)
    r = np.empty(len(buf))
    for j, (lineno, line) in enumerate(buf):
        parts = line.split()
        try:
            u[j], it[j], r[j] = int(parts[0]), int(parts[1]), float(parts[2])
        except (ValueError, IndexError):
            raise ConversionError(src, lineno, "a rating line is 'user item rating [timestamp]'",
                                  line.strip()[:80]) from None
        if not (0 <= u[j] < uindex.size and uindex[u[j]] >= 0):
            raise ConversionError(src, lineno, "user id not in u.user", int(u[j]),
                                  "use the side files of the same MovieLens release")
        if not (0 <= it[j] < iindex.size and iindex[it[j]] >= 0):
            raise ConversionError(src, lineno, "item id not in u.item", int(it[j]),
                                  "use the side files of the same MovieLens release")
        if not np.isfinite(r[j]):
            raise ConversionError(src, lineno, "rating must be finite", parts[2])
    X0 = _one_hot_plus(u, uindex, uside, int((uindex >= 0).sum()))
    X1 = _one_hot_plus(it, iindex, iside, int((iindex >= 0).sum()))
    y = (r >= 4).astype(np.float64) if target == "binary" else r
    w.append(X0=X0.astype(vdt), X1=X1.astype(vdt), y=y[:, None])
    return len(buf)
