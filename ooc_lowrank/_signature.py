"""Public signatures built from a body's own parameters plus shared options (issue 29).

The converters (:func:`ooc_lowrank.io._common.converter`) and the generators
(``ooc_lowrank.generators._generator``) each add the options they all take to every body's own
keyword arguments; :func:`with_signature` is that mechanism, written once: the public function
shows the whole signature (``help``, ``inspect.signature``, the CLI) and hands the body the
bound arguments, defaults applied.
"""

from __future__ import annotations

import functools
import inspect


def keyword_options(defaults):
    """Keyword-only :class:`inspect.Parameter` s for ``{name: default}``
    (``inspect.Parameter.empty``: required)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    return [inspect.Parameter(name, kw, default=d) for name, d in defaults.items()]


def with_signature(fn, params, body):
    """``fn`` (its name and docstring) with the public signature ``params``: a call binds its
    arguments to them, applies the defaults and returns ``body(arguments)`` (a dict)."""
    public = inspect.signature(fn).replace(parameters=params)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        arg = public.bind(*args, **kwargs)
        arg.apply_defaults()
        return body(dict(arg.arguments))

    run.__signature__ = public
    return run
