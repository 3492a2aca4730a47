"""Progress of an iterative fit, written once for every estimator (issue 29).

One line per iteration on the ``ooc_lowrank`` logger, at INFO when the estimator's ``verbose``
is set and at DEBUG otherwise (the logger's level and handlers stay the user's), and the user's
``callback(iteration, elapsed_seconds, objective)`` after it.  No Dask, no estimator: the
functional cores call it.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("ooc_lowrank")


def progress_log(verbose):
    """The call for progress lines: ``logger.info`` when ``verbose``, else ``logger.debug``."""
    return logger.info if verbose else logger.debug


class Progress:
    """``progress(iteration, objective, fmt, *args)``: log ``fmt % args`` with the elapsed time,
    then call ``callback(iteration, elapsed, objective)``; returns the elapsed seconds.

    Parameters
    ----------
    verbose : bool or int
        INFO lines when true, DEBUG lines otherwise.
    callback : callable or None
        ``callback(iteration, elapsed_seconds, objective)``.
    t0 : float, optional
        ``time.perf_counter()`` at the start of the fit (default: now).
    """

    def __init__(self, verbose=False, callback=None, t0=None):
        self.log = progress_log(verbose)
        self.callback = callback
        self.t0 = time.perf_counter() if t0 is None else float(t0)

    def __call__(self, iteration, objective, fmt, *args):
        elapsed = time.perf_counter() - self.t0
        self.log(fmt + " (%.1fs)", *args, elapsed)
        if self.callback is not None:
            self.callback(iteration, elapsed, objective)
        return elapsed
