"""The loss family of GLRL (SPEC 2.2-2.5): value and (sub)gradient on observed entries.

Every objective is a *sum* over the observed entries (not a mean), so the Lipschitz constants
of the gradient are those of SPEC 2.3: 1 for the square loss, 1/4 for the logistic loss and 1
for Huber.  The nonsmooth losses (``l1``, ``hinge``) have no Lipschitz constant; GLRL switches
to the nonsmooth algorithm of SPEC 2.4 for them.

The NumPy functions here are the reference used for validation and tests; the Numba kernels
in :mod:`ooc_lowrank.kernels.glrl` implement the same formulas per entry.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ooc_lowrank.kernels import glrl as _k


@dataclass(frozen=True)
class Loss:
    """One loss: its kernel code, smoothness, Lipschitz constant and label rule."""

    name: str
    code: int
    smooth: bool
    lipschitz: float | None
    labels_pm1: bool
    description: str

    def value(self, x, o, delta=1.0):
        """Per-entry loss values, shape ``(n_entries,)``."""
        return _value(self.code, np.asarray(x, float), np.asarray(o, float), delta)

    def grad(self, x, o, delta=1.0):
        """Per-entry (sub)gradient with respect to the prediction, shape ``(n_entries,)``."""
        return _grad(self.code, np.asarray(x, float), np.asarray(o, float), delta)


LOSSES = {
    "square": Loss("square", _k.SQUARE, True, 1.0, False, "(x - o)^2 / 2 (R1MP with refit='full')"),
    "logistic": Loss("logistic", _k.LOGISTIC, True, 0.25, True, "log(1 + exp(-o x)), o in {-1,+1}"),
    "huber": Loss("huber", _k.HUBER, True, 1.0, False, "Huber with threshold huber_delta"),
    "l1": Loss("l1", _k.L1, False, None, False, "|x - o| (robust MF, nonsmooth)"),
    "hinge": Loss("hinge", _k.HINGE, False, None, True, "max(0, 1 - o x), o in {-1,+1}, nonsmooth"),
}


def get_loss(name):
    """Return the :class:`Loss` called ``name`` or raise a ValueError listing the choices."""
    try:
        return LOSSES[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"loss must be one of {sorted(LOSSES)}; got {name!r}. "
            "Use 'square' for R1MP, 'logistic' for signed links, 'l1' for robust MF."
        ) from None


def _value(code, x, o, delta):
    r = x - o
    if code == _k.SQUARE:
        return 0.5 * r * r
    if code == _k.LOGISTIC:
        return np.logaddexp(0.0, -o * x)
    if code == _k.HUBER:
        ar = np.abs(r)
        return np.where(ar <= delta, 0.5 * r * r, delta * (ar - 0.5 * delta))
    if code == _k.L1:
        return np.abs(r)
    return np.maximum(0.0, 1.0 - o * x)


def _grad(code, x, o, delta):
    r = x - o
    if code == _k.SQUARE:
        return r
    if code == _k.LOGISTIC:
        return -o / (1.0 + np.exp(o * x))
    if code == _k.HUBER:
        return np.clip(r, -delta, delta)
    if code == _k.L1:
        return np.sign(r)
    return np.where(o * x < 1.0, -o, 0.0)
