"""The plumbing every estimator shares, written once (issue 29).

Each method's ``estimator.py`` / ``cv.py`` keeps what is its own (its parameters, their
method-specific checks, its fit and its model file); what they all do alike lives here:

- :data:`params`: every estimator is a keyword-only dataclass of its hyperparameters, so its
  generated ``__init__`` stores them and nothing else (scikit-learn's contract), and
  :class:`Streaming` / :class:`RunControl` declare the parameter groups most estimators share
  once; a subclass that changes only defaults redeclares those fields (dataclass fields keep
  their place in the signature);
- :func:`check_common_params`: the checks of the parameters every streaming / iterative
  estimator shares (``block_rows``, ``cache_bytes``, ``max_iter``, ``tol``, ``callback``), with
  the same error text everywhere;
- :func:`saved_params`: the hyperparameters a model file keeps (never a callable);
- :func:`shared_params`: the parameters a search or a composite hands on, by name, to the
  estimator it runs;
- :class:`Loadable`: ``save(path)`` / ``Estimator.load(path)`` for every estimator with a model
  file (each gives its ``_state`` and ``_from_saved``); :func:`search_state`,
  :func:`restore_search`, :func:`restore_best`: a search's CV table and refitted model in
  its model file; :func:`refitted`: the refitted model a search delegates to;
- :class:`SparseInput`: the scikit-learn tag of estimators that read scipy.sparse natively;
- :func:`is_dataset`, :func:`open_if_path`: a store given as a path, URL or opened Dataset.

Progress lines and the ``callback`` are :mod:`ooc_lowrank._progress`; input resolution is
:mod:`ooc_lowrank._inputs`; model files :mod:`ooc_lowrank._persist`; checkpoints
:mod:`ooc_lowrank._checkpoint`.
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers
import os

from sklearn.utils.validation import check_is_fitted

from ooc_lowrank._persist import load_as, save_model
from ooc_lowrank._validation import check_scalar, param_error

#: hyperparameters a model file never holds (callables; they do not survive JSON)
NOT_SAVED = ("callback",)


def is_dataset(obj):
    """Whether ``obj`` is an opened store (:class:`ooc_lowrank.storage.Dataset` or alike)."""
    return hasattr(obj, "names") and hasattr(obj, "n_rows") and hasattr(obj, "__getitem__")


def open_if_path(X):
    """A store path or URL (str / os.PathLike) -> the opened Dataset; anything else unchanged."""
    if isinstance(X, (str, os.PathLike)):
        from ooc_lowrank.storage import open_dataset

        return open_dataset(X)
    return X


#: The class decorator of every estimator: its hyperparameters are keyword-only dataclass fields
#: (``name: type = default``), from which Python writes an ``__init__`` that stores each one
#: under its own name and does nothing else, with the signature ``get_params`` / ``clone`` and
#: the CLI flags read.  ``eq=False`` keeps identity equality and hashing, ``repr=False``
#: scikit-learn's ``BaseEstimator`` repr; the parameters of base classes (such as the groups
#: below) come first in the signature, in reverse method-resolution order.
params = dataclasses.dataclass(kw_only=True, eq=False, repr=False)


@params
class Streaming:
    """Parameters of the estimators that stream row blocks: ``block_rows`` (rows per block of
    in-memory input, ``None``: from a memory budget) and ``cache_bytes`` (store inputs up to
    this size kept in memory across passes, ``None``: the engine's budget); each estimator's
    docstring says what they mean for it."""

    block_rows: int | None = None
    cache_bytes: int | None = None


@params
class RunControl:
    """Parameters of every iterative estimator's run: ``random_state``, ``verbose`` (progress
    lines on the ``ooc_lowrank`` logger) and ``callback(iteration, elapsed, objective)``."""

    random_state: object = None
    verbose: bool = False
    callback: object = None


def saved_params(est, not_saved=NOT_SAVED):
    """``est.get_params()`` without the ones a model file does not keep."""
    return {k: v for k, v in est.get_params().items() if k not in not_saved}


def shared_params(est, target, *, exclude=(), **overrides):
    """The ``__init__`` parameters of the estimator class ``target`` that ``est`` has too (same
    name, same meaning), with ``est``'s values, but for ``exclude``; then ``overrides``.

    How a search (``GIMCCV``, ``KernelMaxideCV``, ...) or a composite (``GIMCClustering``)
    builds the estimator it runs: a parameter added to both is handed on without a second list
    to update.  A name the two use for different ideas goes in ``exclude`` or ``overrides``.
    """
    names = inspect.signature(target.__init__).parameters
    own = est.get_params(deep=False)
    out = {name: own[name] for name in names if name in own and name not in exclude}
    out.update(overrides)
    return out


def check_callback(callback):
    """``callback`` is None or callable(iteration, elapsed, objective)."""
    if callback is not None and not callable(callback):
        raise param_error(
            "callback",
            "must be callable(iteration, elapsed, objective) or None",
            callback,
            exc=TypeError,
        )


def check_common_params(est, *, min_iter=0, max_iter_none=False):
    """Check the shared parameters ``est`` has: ``max_iter`` (an int >= ``min_iter``; None too
    with ``max_iter_none``), ``tol`` (>= 0), ``block_rows`` (None or >= 1), ``cache_bytes`` (None
    or >= 0) and ``callback``."""
    params = est.get_params(deep=False)
    if "max_iter" in params and not (max_iter_none and params["max_iter"] is None):
        check_scalar(params["max_iter"], "max_iter", kind=numbers.Integral, low=min_iter)
    if params.get("tol") is not None:
        check_scalar(params["tol"], "tol", low=0.0)
    if params.get("block_rows") is not None:
        check_scalar(params["block_rows"], "block_rows", kind=numbers.Integral, low=1)
    if params.get("cache_bytes") is not None:
        check_scalar(params["cache_bytes"], "cache_bytes", kind=numbers.Integral, low=0)
    check_callback(params.get("callback"))


class Loadable:
    """``save(path)`` and ``load(path)``: the model file of an estimator that gives
    ``_state() -> (params, arrays, extra)`` (fitted or raising ``NotFittedError``) and the
    classmethod ``_from_saved(params, arrays, extra)`` that checks and reads them back;
    ``load`` refuses (naming both) a model of another estimator."""

    def save(self, path, *, overwrite=False):
        """Save the fitted model to a directory (``model.json`` + ``arrays.npz``, loaded without
        pickle); reload with ``ooc_lowrank.load(path)`` or this class's ``load(path)``.

        An existing model at ``path`` is replaced only with ``overwrite=True``; anything else
        there (a store, a folder, a file) is never replaced.
        """
        save_model(path, type(self).__name__, *self._state(), overwrite=overwrite)

    @classmethod
    def load(cls, path):
        """Load a model saved by :meth:`save`; a model of another estimator is refused."""
        return load_as(cls, path)


class SparseInput:
    """scikit-learn tags: scipy.sparse input is native (CSR row blocks), not converted."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def search_state(search, arrays, extra, skip=None):
    """Add a fitted search's CV table and refitted model to its model file's ``arrays`` and
    ``extra``: ``cv_results_["params"]`` as ``extra["params_list"]``, every other column (but
    those ``skip(key, column)`` names) as ``arrays["cv_results/<key>"]``; ``best_estimator_``'s
    own ``_state()`` under ``best/`` (arrays) and ``extra["best"]``, with ``refit_time``."""
    res = search.cv_results_
    extra["params_list"] = res["params"]
    for key, v in res.items():
        if key != "params" and not (skip is not None and skip(key, v)):
            arrays[f"cv_results/{key}"] = v
    if hasattr(search, "best_estimator_"):
        bp, barr, bextra = search.best_estimator_._state()
        arrays |= {f"best/{k}": v for k, v in barr.items()}
        extra["best"] = {"params": bp, "extra": bextra}
        extra["refit_time"] = search.refit_time_


def refitted(search, fix):
    """A fitted search's ``best_estimator_`` (what its predict / score methods delegate to):
    ``NotFittedError`` before ``fit``, ``AttributeError`` ending with ``fix`` after
    ``fit`` with ``refit=False``."""
    check_is_fitted(search, "cv_results_")
    if not hasattr(search, "best_estimator_"):
        raise AttributeError(f"{type(search).__name__}(refit=False) has no refitted model; {fix}")
    return search.best_estimator_


def restore_search(arrays, extra):
    """The CV table :func:`search_state` saved: ``params`` and the ``cv_results/`` columns."""
    res = {"params": [dict(p) for p in extra["params_list"]]}
    for key, v in arrays.items():
        if key.startswith("cv_results/"):
            res[key.split("/", 1)[1]] = v
    return res


def restore_best(search, base, arrays, extra):
    """The refitted model :func:`search_state` saved, if any: ``best_estimator_`` (a ``base``
    read by its ``_from_saved``) and ``refit_time_``."""
    if "best" in extra:
        barr = {k[5:]: v for k, v in arrays.items() if k.startswith("best/")}
        search.best_estimator_ = base._from_saved(
            extra["best"]["params"], barr, extra["best"]["extra"]
        )
        search.refit_time_ = float(extra["refit_time"])
