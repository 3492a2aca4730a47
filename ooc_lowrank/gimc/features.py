"""Random / learnable feature maps as scikit-learn transformers (SPEC 1.2, 1.6).

:class:`FourierFeatures` (RFF; the initial point of GIMC-LFF) and :class:`NystromFeatures`
(IMC-NYS with ``normalize=True``; the initial point of GIMC-LNYS with ``normalize=False``) work
alone on dense or CSR input held as NumPy / scipy.sparse (result: ndarray), Dask arrays or store
arrays (result: a lazy Dask array).  ``gamma=None`` uses the median heuristic
``1 / median ||x_i - x_j||^2`` on a random sample of rows.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from ooc_lowrank import _base, engine
from ooc_lowrank._inputs import as_features, check_features_memory
from ooc_lowrank._inputs import is_lazy as _is_lazy
from ooc_lowrank._validation import check_random_state, check_scalar, param_error
from ooc_lowrank.gimc import _blocks

__all__ = ["FourierFeatures", "NystromFeatures", "median_gamma", "sample_rows"]

_SAMPLE = 1000


def sample_rows(X, n_samples, rng):
    """A random sample of at most ``n_samples`` rows of ``X`` (dense ndarray or CSR).

    In-memory inputs are indexed directly; store arrays read a few random row blocks; Dask
    arrays compute only the sampled rows (one small ``dask.compute``).
    """
    if isinstance(X, engine.Blocked):
        X = X.source if (X.source is not None) else X.dask
    if hasattr(X, "read") and hasattr(X, "kind"):  # store ArrayHandle
        n, B = X.shape[0], X.block_rows
        nb = -(-n // B)
        pick = np.sort(rng.choice(nb, size=min(nb, max(1, -(-n_samples // B) + 1)), replace=False))
        parts = [X.read(int(b * B), int(min(n, (b + 1) * B))) for b in pick]
        S = sp.vstack(parts, format="csr") if sp.issparse(parts[0]) else np.vstack(parts)
        return sample_rows(S, n_samples, rng)
    idx = sample_row_indices(X.shape[0], n_samples, rng)
    try:
        import dask.array as da

        if isinstance(X, da.Array):
            (S,) = engine.compute(X[idx])
            return sp.csr_matrix(S) if sp.issparse(S) else np.asarray(S)
    except ImportError:  # pragma: no cover
        pass
    if sp.issparse(X):
        return sp.csr_matrix(X)[idx]
    return np.asarray(X)[idx]


def sample_row_indices(n, n_samples, rng):
    """The sorted row indices :func:`sample_rows` takes from an in-memory ``X`` of ``n`` rows
    (the same draws from ``rng``): ``min(n, n_samples)`` distinct rows, uniformly."""
    return np.sort(rng.choice(n, size=min(n, n_samples), replace=False))


def median_gamma(S):
    """``1 / median_{i<j} ||s_i - s_j||^2`` over the rows of a sample (dense or CSR)."""
    if sp.issparse(S):
        sq = np.asarray(S.multiply(S).sum(axis=1), dtype=np.float64).ravel()
        G = np.asarray((S @ S.T).todense(), dtype=np.float64)
    else:
        S = np.asarray(S, dtype=np.float64)
        sq = np.einsum("ij,ij->i", S, S)
        G = S @ S.T
    return gamma_from_sq_dists(np.maximum(sq[:, None] + sq[None, :] - 2 * G, 0.0))


#: :func:`exact_median` selects among the values between two quantiles of a strided sample of
#: this many values (+- ``_MEDIAN_BAND`` around the half), when the array is larger than 4x it
_MEDIAN_SAMPLE = 8192
_MEDIAN_BAND = 0.02


def exact_median(v):
    """``np.median(v)`` of a 1-d float array, bitwise, by selecting only among the values
    between two quantiles of a strided sample (which hold the middle ranks with near
    certainty: checked by counting, else the full ``np.median``).  The median heuristic's
    499,500 pair distances: about 2 ms in place of 6 (issue 24)."""
    v = np.asarray(v)
    n = v.size
    if n <= 4 * _MEDIAN_SAMPLE or v.ndim != 1 or not np.isfinite(v).all():
        return np.median(v)
    sample = np.sort(v[:: n // _MEDIAN_SAMPLE])
    m = sample.size
    lo = sample[max(int((0.5 - _MEDIAN_BAND) * m), 0)]
    hi = sample[min(int((0.5 + _MEDIAN_BAND) * m), m - 1)]
    below = int(np.count_nonzero(v < lo))
    cand = v[(v >= lo) & (v <= hi)]
    k1, k2 = (n - 1) // 2, n // 2  # the middle ranks (equal for odd n)
    if not (below <= k1 and below + cand.size > k2):
        return np.median(v)
    part = np.partition(cand, [k1 - below, k2 - below])
    return np.mean(part[[k1 - below, k2 - below]]) if k1 != k2 else part[k1 - below]


def gamma_from_sq_dists(D2):
    """``1 / median_{i<j} D2[i, j]`` (the median of the positive ones if that is 0; 1 if none
    is) from the squared distances ``D2`` (n x n) of a row sample."""
    n = D2.shape[0]
    pairs = np.concatenate([D2[i, i + 1 :] for i in range(n - 1)]) if n > 1 else np.zeros(0)
    med = float(exact_median(pairs)) if pairs.size else 0.0
    if med <= 0:
        pos = pairs[pairs > 0]
        med = float(np.median(pos)) if pos.size else 1.0
    return 1.0 / med


def _check_gamma(gamma):
    if gamma is None:
        return None
    return check_scalar(
        gamma,
        "gamma",
        low=0.0,
        low_inclusive=False,
        fix="Pass a positive kernel width, or gamma=None for the median heuristic",
    )


def _n_features(X):
    return int(X.shape[1])


def _checked_input(X, min_rows):
    """X converted at the boundary (:mod:`ooc_lowrank._inputs`); in-memory X validated whole."""
    X = as_features(X, "X")
    if not _is_lazy(X):
        X = check_features_memory(X, "X", min_rows=min_rows)
    return X


def _transform(X, U, spec, n_features_in, owner):
    """Apply a feature spec: ndarray out for in-memory input, lazy Dask array otherwise."""
    X = _checked_input(X, min_rows=0)
    if _n_features(X) != n_features_in:
        raise ValueError(
            f"X has {_n_features(X)} features, but {owner} is expecting {n_features_in} "
            "features as input (as in fit); pass data with the same columns as in fit"
        )
    lazy = _is_lazy(X)
    B = engine.as_blocked(X, name="X")
    dt = B.dtype if B.dtype in (np.float32, np.float64) else np.dtype(np.float64)
    arr = engine.map_rows(
        _blocks.features_block, B, args=(U.astype(dt), spec), n_cols=spec.n_features, dtype=dt
    )
    if lazy:
        return arr
    (out,) = engine.compute(arr)
    return out


@_base.params
class _FeatureMap(_base.SparseInput, TransformerMixin, BaseEstimator):
    """What the two feature maps share: the ``n_components`` / ``gamma`` checks, the input
    conversion and seed at the start of ``fit``, the feature spec and ``transform``.
    A subclass names its ``_kind`` ("fourier" / "nystrom"), what one component is (``_unit``,
    for the error text) and, with ``_normalization``, its spec's normalization matrix."""

    _kind = _unit = None

    n_components: int = 500
    gamma: float | None = None
    random_state: object = None

    def _check_map_params(self):
        check_scalar(
            self.n_components,
            "n_components",
            kind=numbers.Integral,
            low=1,
            fix=f"Use at least one {self._unit}, e.g. n_components=500",
        )
        _check_gamma(self.gamma)

    def _fit_input(self, X):
        """-> (X converted at the boundary, the fit's Generator)."""
        return _checked_input(X, min_rows=1), np.random.default_rng(
            check_random_state(self.random_state).randint(2**31 - 1)
        )

    def _normalization(self):
        return None

    def _spec(self):
        return _blocks.FeatureSpec.build(
            [(self._kind, self.components_.shape[1], self.gamma_, self._normalization(), False)]
        )

    def transform(self, X):
        """``Phi`` of shape (n_samples, n_output_features); lazy for lazy input (the
        class docstring gives the output width)."""
        check_is_fitted(self, "components_")
        return _transform(
            X, self.components_, self._spec(), self.n_features_in_, type(self).__name__
        )


@_base.params
class FourierFeatures(_FeatureMap):
    """Random Fourier features ``phi(x) = [cos(U^T x), sin(U^T x)] / sqrt(m)`` (SPEC 1.2).

    ``E[phi(x)^T phi(y)] = exp(-gamma ||x - y||^2)`` for ``u_r ~ N(0, 2 gamma I)``.

    Parameters
    ----------
    n_components : int, default=500
        Number of projections ``m``; the output has ``2 m`` columns.
    gamma : float or None, default=None
        RBF width; ``None`` uses the median heuristic on a sample of rows.
    random_state : int, RandomState, Generator or None

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        The projection matrix ``U``.
    gamma_ : float
    n_features_in_ : int
    """

    _kind, _unit = "fourier", "random feature"

    def fit(self, X, y=None):
        """Draw ``U`` (uses only the shape of X, plus a row sample for the median heuristic)."""
        self._check_map_params()
        X, rng = self._fit_input(X)
        d = _n_features(X)
        if self.gamma is None:
            self.gamma_ = median_gamma(sample_rows(X, _SAMPLE, rng))
        else:
            self.gamma_ = float(self.gamma)
        self.components_ = rng.normal(0.0, np.sqrt(2.0 * self.gamma_), size=(d, self.n_components))
        self.n_features_in_ = d
        return self


@_base.params
class NystromFeatures(_FeatureMap):
    """Nystrom features on RBF landmarks, ``phi(x) = [k(x, u_1), ..., k(x, u_m)] M`` (SPEC 1.2).

    Parameters
    ----------
    n_components : int, default=500
        Number of landmarks ``m`` (capped at the number of rows sampled).
    gamma : float or None, default=None
        RBF width ``k(x, u) = exp(-gamma ||x - u||^2)``; ``None``: median heuristic.
    landmarks : {"random", "kmeans"}, default="random"
        Uniform sample of rows, or k-means centres of a row sample.
    normalize : bool, default=True
        ``M = (E^+)^(1/2)`` with ``E = k(U, U)`` (IMC-NYS); ``False`` gives ``M = I`` (the raw
        kernel columns, the GIMC-LNYS parametrization).
    random_state : int, RandomState, Generator or None

    Attributes
    ----------
    components_ : ndarray of shape (n_features, n_components)
        Landmarks as columns.
    normalization_ : ndarray of shape (n_components, n_components) or None
    gamma_ : float
    n_features_in_ : int
    """

    _kind, _unit = "nystrom", "landmark"

    landmarks: str = "random"
    normalize: bool = True

    def fit(self, X, y=None):
        """Pick landmarks from a row sample (and the normalization)."""
        self._check_map_params()
        if self.landmarks not in ("random", "kmeans"):
            raise param_error("landmarks", "must be 'random' or 'kmeans'", self.landmarks)
        X, rng = self._fit_input(X)
        m = self.n_components
        S = sample_rows(
            X, max(_SAMPLE, 4 * m) if self.landmarks == "kmeans" else max(_SAMPLE, m), rng
        )
        self.gamma_ = median_gamma(S[:_SAMPLE]) if self.gamma is None else float(self.gamma)
        m = min(m, S.shape[0])
        if self.landmarks == "kmeans" and S.shape[0] > m:
            from sklearn.cluster import KMeans

            km = KMeans(
                n_clusters=m, n_init=1, max_iter=50, random_state=int(rng.integers(2**31 - 1))
            )
            km.fit(S)
            C = np.asarray(km.cluster_centers_, dtype=np.float64)
        else:
            pick = rng.choice(S.shape[0], size=m, replace=False)
            C = S[pick]
            C = C.toarray() if sp.issparse(C) else np.asarray(C, dtype=np.float64)
        self.components_ = np.ascontiguousarray(C.T, dtype=np.float64)
        self.normalization_ = (
            nystrom_normalization(self.components_, self.gamma_) if self.normalize else None
        )
        self.n_features_in_ = _n_features(X)
        return self

    def _normalization(self):
        return self.normalization_


def nystrom_normalization(U, gamma):
    """``(E^+)^(1/2)`` for ``E_rs = exp(-gamma ||u_r - u_s||^2)`` (landmarks as columns of U)."""
    sq = np.einsum("ij,ij->j", U, U)
    E = np.exp(-gamma * np.maximum(sq[:, None] + sq[None, :] - 2 * U.T @ U, 0.0))
    ev, vec = np.linalg.eigh(E)
    keep = ev > 1e-10 * max(ev.max(), 1e-300)
    inv = np.where(keep, 1.0 / np.sqrt(np.where(keep, ev, 1.0)), 0.0)
    return (vec * inv) @ vec.T
