"""The shared estimator skeleton (issue 29): ``verbose`` progress lines on every iterative
estimator, ``tol`` on GreedyLowRank, ``callback`` on the CV searches, the shared parameter
checks and model-file parameters."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp

import ooc_lowrank as ool
from ooc_lowrank._base import check_common_params, params, saved_params
from ooc_lowrank.gimc import GIMCCV
from ooc_lowrank.glrl import GreedyLowRank, GreedyLowRankCV
from ooc_lowrank.imc import InductiveMatrixCompletion
from ooc_lowrank.imc.clustering import GIMCClustering, sample_constraints
from ooc_lowrank.kernelmaxide import KernelMaxide, KernelMaxideCV, Maxide, MaxideCV, mask_labels


def _ml(seed=0, n=80, d=5, L=6):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, d))
    Y = (X @ r.standard_normal((d, 2)) @ r.standard_normal((2, L)) > 0).astype(float)
    return X, Y


def _imc_data(seed=0, n1=30, n2=20):
    r = np.random.default_rng(seed)
    X1, X2 = r.standard_normal((n1, 4)), r.standard_normal((n2, 3))
    rows, cols = np.nonzero(r.random((n1, n2)) < 0.4)
    return X1, X2, (rows, cols, r.standard_normal(rows.size))


def _imc_fit(verbose):
    X1, X2, trip = _imc_data()
    est = InductiveMatrixCompletion(n_components=2, max_iter=3, tol=0, verbose=verbose)
    return est.fit(trip, X_row=X1, X_col=X2, shape=(30, 20)), "IMC "


def _clustering_fit(verbose):
    r = np.random.default_rng(1)
    y = np.repeat(np.arange(2), 20)
    X = r.standard_normal((40, 3)) + 3 * r.standard_normal((2, 3))[y]
    cons = sample_constraints(y, 200, random_state=0)
    est = GIMCClustering(n_clusters=2, alpha=0.5, n_features_map=10, max_iter=3, tol=0, n_init=2,
                         random_state=0, verbose=verbose)  # fmt: skip
    return est.fit(X, constraints=cons).imc_, "IMC "


def _km_fit(verbose, cls=KernelMaxide, **kw):
    X, Y = _ml()
    kw = dict(n_features_map=20, random_state=0) if cls is KernelMaxide else {}
    est = cls(alpha=0.5, max_iter=4, tol=0, verbose=verbose, **kw)
    return est.fit(X, mask_labels(Y, 50, random_state=0)), "maxide iter"


def _maxide_fit(verbose):
    return _km_fit(verbose, Maxide)


@pytest.mark.parametrize("fit", [_imc_fit, _clustering_fit, _km_fit, _maxide_fit])
def test_verbose_logs_one_info_line_per_iteration(fit, caplog):
    """verbose=True: one INFO line per iteration (IMC's init too); verbose=False: the same lines
    at DEBUG only (before issue 29 IMC and Maxide logged at INFO whatever the setting, and
    ``verbose`` was refused as an unknown parameter)."""
    for verbose in (True, False):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="ooc_lowrank"):
            est, prefix = fit(verbose)
        lines = [r for r in caplog.records if r.getMessage().startswith(prefix)]
        n_lines = est.n_iter_ + (1 if prefix.startswith("IMC") else 0)
        assert len(lines) >= n_lines >= 3
        level = logging.INFO if verbose else logging.DEBUG
        assert {r.levelno for r in lines} == {level}


def _glrl_data(seed=0, m=40, n=30):
    r = np.random.default_rng(seed)
    M = r.standard_normal((m, 3)) @ r.standard_normal((3, n))
    rows, cols = np.nonzero(r.random((m, n)) < 0.5)
    return (rows, cols, M[rows, cols] + 0.5 * r.standard_normal(rows.size)), (m, n)


def test_glrl_tol_stops_on_the_relative_objective_decrease():
    data, shape = _glrl_data()
    kw = dict(loss="square", n_components=12, init="zero", power_iter=10, random_state=0)
    full = GreedyLowRank(**kw).fit(data, shape=shape)
    assert full.tol == 0.0 and full.n_iter_ == 12  # the default takes the whole budget
    obj = full.objective_path_
    dec = (obj[:-1] - obj[1:]) / np.abs(obj[:-1])
    tol = float(np.sort(dec)[len(dec) // 2])  # a threshold that some step falls under
    stop = int(np.argmax(dec < tol)) + 1  # the first step whose decrease is below tol
    early = GreedyLowRank(**kw, tol=tol).fit(data, shape=shape)
    assert early.n_iter_ == stop < full.n_iter_
    np.testing.assert_allclose(early.objective_path_, obj[: stop + 1], rtol=1e-12)


def test_glrl_tol_is_checked_by_name():
    data, shape = _glrl_data()
    with pytest.raises(ValueError, match="tol"):
        GreedyLowRank(tol=-1.0).fit(data, shape=shape)


def _calls():
    seen = []
    return seen, lambda it, elapsed, obj: seen.append((it, elapsed, obj))


def _check_calls(seen, best, objective):
    its = [s[0] for s in seen]
    assert its[-1] == best.n_iter_ and its == sorted(its) and len(its) >= best.n_iter_
    assert seen[-1][2] == pytest.approx(objective[-1])


def test_gimccv_callback_sees_the_refit(tmp_path):
    X, Y = _ml(n=60)
    seen, cb = _calls()
    cv = GIMCCV(n_features_map=6, max_iter=3, gamma_scales=[1.0], alphas=[1.0], cv=2,
                random_state=0, callback=cb).fit(X, sp.csr_matrix(Y))  # fmt: skip
    assert [s[0] for s in seen] == list(range(cv.best_estimator_.n_iter_ + 1))
    _check_calls(seen, cv.best_estimator_, cv.best_estimator_.objective_)
    cv.save(str(tmp_path / "m"))  # the callable is not a saved parameter
    assert ool.load(str(tmp_path / "m")).callback is None


def test_glrl_cv_callback_sees_the_refit(tmp_path):
    data, shape = _glrl_data()
    seen, cb = _calls()
    cv = GreedyLowRankCV(n_components=4, alphas=[0.0, 1.0], greedy_l2s=[0.0], cv=2, power_iter=5, random_state=0,
                         callback=cb).fit(data, shape=shape)  # fmt: skip
    assert [s[0] for s in seen] == list(range(1, cv.best_estimator_.n_iter_ + 1))
    _check_calls(seen, cv.best_estimator_, cv.best_estimator_.objective_path_)
    cv.save(str(tmp_path / "m"))
    assert ool.load(str(tmp_path / "m")).callback is None


@pytest.mark.parametrize("cls", [KernelMaxideCV, MaxideCV])
def test_maxide_cv_callback_sees_the_refit(cls):
    X, Y = _ml()
    kw = dict(gammas=[1.0], gamma_scales=None, n_features_map=20) if cls is KernelMaxideCV else {}
    seen, cb = _calls()
    cv = cls(alphas=[0.5, 2.0], n_splits=1, max_iter=5, callback=cb, **kw)
    cv.fit(X, mask_labels(Y, 50, random_state=0))
    assert [s[0] for s in seen] == list(range(1, cv.best_estimator_.n_iter_ + 1))
    _check_calls(seen, cv.best_estimator_, cv.best_estimator_.objective_)


@pytest.mark.parametrize(
    "est",
    [GIMCCV(), GreedyLowRankCV(), KernelMaxideCV(), MaxideCV(), InductiveMatrixCompletion()],
    ids=type,
)
def test_a_callback_that_is_not_callable_is_refused_by_name(est):
    X, Y = _ml()
    with pytest.raises(TypeError, match="callback"):
        est.set_params(callback=3)
        if isinstance(est, GreedyLowRankCV):
            est.fit(_glrl_data()[0], shape=(40, 30))
        elif isinstance(est, InductiveMatrixCompletion):
            X1, X2, trip = _imc_data()
            est.fit(trip, X_row=X1, X_col=X2, shape=(30, 20))
        elif isinstance(est, GIMCCV):
            est.fit(X, sp.csr_matrix(Y))
        else:
            est.fit(X, mask_labels(Y, 50, random_state=0))


@params
class _Toy:
    max_iter: int = 1
    tol: float = 0.0
    block_rows: int | None = None
    cache_bytes: int | None = None
    callback: object = None

    def get_params(self, deep=True):
        return dict(vars(self))


def test_params_dataclass_and_common_checks():
    t = _Toy(max_iter=3, callback=print)
    assert t.get_params() == dict(max_iter=3, tol=0.0, block_rows=None, cache_bytes=None,
                                  callback=print)  # fmt: skip
    assert saved_params(t) == dict(max_iter=3, tol=0.0, block_rows=None, cache_bytes=None)
    check_common_params(t)
    for bad, exc in [
        (dict(max_iter=-1), ValueError),
        (dict(tol=-1.0), ValueError),
        (dict(block_rows=0), ValueError),
        (dict(cache_bytes=-1), ValueError),
        (dict(callback="x"), TypeError),
    ]:
        with pytest.raises(exc, match=next(iter(bad))):
            check_common_params(_Toy(**bad))
    check_common_params(_Toy(max_iter=None), max_iter_none=True)
    with pytest.raises(TypeError, match="max_iter"):
        check_common_params(_Toy(max_iter=None))


@pytest.mark.parametrize(
    "command,flags",
    [
        ("imc", ["--verbose"]),
        ("kernelmaxide", ["--verbose"]),
        ("maxide", ["--verbose"]),
        ("glrl", ["--tol", "--verbose"]),
    ],
)
def test_cli_help_lists_the_new_parameters(command, flags, capsys):
    from ooc_lowrank import cli

    with pytest.raises(SystemExit):
        cli.main(["fit", command, "--help"])
    out = capsys.readouterr().out
    for flag in flags:
        assert flag in out


def test_every_estimator_with_a_model_file_loads_through_its_class(tmp_path):
    """``Estimator.load`` (``_base.Loadable``) on every estimator that saves; GIMC, GIMCCV,
    KernelMaxide and Maxide had none before issue 29."""
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    for cls in (GIMC, GIMCCV, GreedyLowRank, GreedyLowRankCV, InductiveMatrixCompletion,
                KernelMaxide, Maxide, MultiViewMachineRegressor, MultiViewMachineClassifier):  # fmt: skip
        assert callable(cls.load)
    est, _ = _maxide_fit(False)
    est.save(str(tmp_path / "m"))
    back = Maxide.load(str(tmp_path / "m"))
    np.testing.assert_array_equal(back.coef_, est.coef_)
    with pytest.raises(ValueError, match="holds a 'Maxide', not a GIMC"):
        GIMC.load(str(tmp_path / "m"))


def test_classifier_defaults_differ_only_where_said():
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    reg, clf = MultiViewMachineRegressor().get_params(), MultiViewMachineClassifier().get_params()
    assert {k for k in reg if reg[k] != clf[k]} == {"alpha", "tol"}
    assert (clf["alpha"], clf["tol"]) == (1e-2, 1e-3)


def test_shared_params_hands_on_same_names_only():
    """``_base.shared_params``: the target's parameters that the source has, minus ``exclude``,
    plus ``overrides``; nothing the target lacks."""
    from ooc_lowrank._base import shared_params

    src = KernelMaxideCV(max_iter=7, tol=0.5, n_trials=3, n_components=4, n_features_map=9,
                         block_rows=11, cache_bytes=12, verbose=True, callback=print)  # fmt: skip
    got = shared_params(src, KernelMaxide, exclude=("verbose",), random_state=5)
    assert got == dict(n_features_map=9, n_components=4, max_iter=7, tol=0.5, n_trials=3,
                       cache_bytes=12, block_rows=11, random_state=5, callback=print)  # fmt: skip
    assert "alphas" not in got and "verbose" not in got


def test_searches_hand_on_the_parameters_they_always_did():
    """The estimators the searches and GIMCClustering build (now by ``shared_params``) get the
    parameters the hand-written lists gave them before issue 29, with the same values."""
    from ooc_lowrank.gimc import GIMC

    cb = print
    g = GIMCCV(features="both", n_features_map=7, learn_features=False, max_iter=3, tol=0.1,
               landmarks="kmeans", normalize_rows=True, n_trials=4, block_rows=5, cache_bytes=6,
               verbose=True, callback=cb)._base(9)  # fmt: skip
    assert g.get_params() == GIMC(features="both", n_features_map=7, gamma=1.0, alpha=1.0,
                                  learn_features=False, max_iter=3, tol=0.1, landmarks="kmeans",
                                  normalize_rows=True, n_trials=4, block_rows=5, cache_bytes=6,
                                  random_state=9, verbose=True).get_params()  # fmt: skip
    common = dict(max_iter=8, tol=0.2, n_trials=3, cache_bytes=4, block_rows=5)
    k = KernelMaxideCV(**common, n_features_map=6, n_components=2, verbose=True, callback=cb)
    assert k._base(1) == dict(**common, random_state=1, n_features_map=6, n_components=2)
    m = MaxideCV(**common, verbose=True, callback=cb)
    assert m._base(1) == dict(**common, random_state=1)
    glrl = dict(loss="huber", n_components=4, init="mean", power_iter=3, power_tol=0.1,
                lbfgs_iter=2, huber_delta=0.5, nu=0.9, bias_sweeps=2, duplicates="keep",
                n_iter_no_change=3, block_rows=5, cache_bytes=6, verbose=True)  # fmt: skip
    base = GreedyLowRankCV(**glrl, coef_refit="economic", random_state=2, callback=cb).base_params()
    assert base == dict(**glrl, refit="economic", random_state=2)
    c = GIMCClustering(n_clusters=3, features="nystrom", n_features_map=6, gamma=0.5,
                       learn_features=False, cg_iter=4, cg_tol=0.1, tol=0.2, block_rows=5,
                       cache_bytes=6, verbose=True, callback=cb)  # fmt: skip
    assert c._imc(0.7, 8, 2).get_params() == InductiveMatrixCompletion(
        n_components=3, alpha=0.7, row_map="nystrom", col_map="nystrom", n_features_map=6,
        gamma=0.5, learn_features=False, max_iter=2, cg_iter=4, cg_tol=0.1, tol=0.2,
        block_rows=5, cache_bytes=6, random_state=8, callback=cb, verbose=True,
    ).get_params()  # fmt: skip


@pytest.mark.parametrize(
    "make, unit",
    [
        (lambda **kw: ool.gimc.FourierFeatures(**kw), "random feature"),
        (lambda **kw: ool.gimc.NystromFeatures(**kw), "landmark"),
    ],
)
def test_feature_maps_share_their_checks_and_transform(make, unit):
    """FourierFeatures / NystromFeatures share ``_FeatureMap``: the n_components and gamma checks
    (each naming its own unit), the seed, and ``transform``'s width check naming the class."""
    X = np.random.default_rng(0).standard_normal((30, 4))
    with pytest.raises(ValueError, match=f"Use at least one {unit}, e.g. n_components=500"):
        make(n_components=0).fit(X)
    with pytest.raises(ValueError, match="gamma"):
        make(n_components=3, gamma=-1.0).fit(X)
    a = make(n_components=3, random_state=1).fit(X)
    b = make(n_components=3, random_state=1).fit(X)
    np.testing.assert_array_equal(a.transform(X), b.transform(X))
    name = type(a).__name__
    with pytest.raises(ValueError, match=f"but {name} is expecting 4 features"):
        a.transform(X[:, :3])


def test_diagnose_lines_first_bad_line_else_the_chunk():
    """``io._common.diagnose_lines``: the first line's own error, else one for the chunk at its
    first line (the svmlight, ratings and dense-text slow paths)."""
    from ooc_lowrank.io._common import ConversionError, diagnose_lines

    def check_line(lineno, text):
        if text == "bad":
            raise ConversionError("f.txt", lineno, "bad line", text)

    with pytest.raises(ConversionError, match=r"f.txt, line 8: bad line \(got 'bad'\)"):
        diagnose_lines("f.txt", [7, 8, 9], ["ok", "bad", "bad"], check_line, "chunk rule")
    with pytest.raises(ConversionError, match="f.txt, line 7: chunk rule. Fix: do this") as e:
        diagnose_lines("f.txt", [7, 8], ["ok", "ok"], check_line, "chunk rule", "do this")
    assert (e.value.line, e.value.value) == (7, None)
    with pytest.raises(ConversionError, match="^f.txt: chunk rule$"):
        diagnose_lines("f.txt", [], [], check_line, "chunk rule")


def test_search_state_round_trip_and_one_save():
    """``_base.search_state`` / ``restore_search`` / ``restore_best``: a search's CV table (but
    the columns ``skip`` names) and refitted model in a model file and back; ``save`` is written
    once (``_base.Loadable``) for every estimator with a model file."""
    import types

    from ooc_lowrank import _base

    best = Maxide(alpha=0.5, max_iter=3)
    best._state = lambda: ({"alpha": 0.5}, {"coef": np.ones(2)}, {"n_iter": 3})
    search = types.SimpleNamespace(
        cv_results_={"params": [{"a": 1}, {"a": 2}], "mean_test_score": np.array([0.1, 0.2]),
                     "param_a": np.array([1, 2])},  # fmt: skip
        best_estimator_=best,
        refit_time_=1.5,
    )
    arrays, extra = {}, {"n_splits": 2}
    _base.search_state(search, arrays, extra, skip=lambda k, v: k == "param_a")
    assert sorted(arrays) == ["best/coef", "cv_results/mean_test_score"]
    assert extra["params_list"] == [{"a": 1}, {"a": 2}] and extra["refit_time"] == 1.5
    assert extra["best"] == {"params": {"alpha": 0.5}, "extra": {"n_iter": 3}}
    res = _base.restore_search(arrays, extra)
    assert res["params"] == [{"a": 1}, {"a": 2}] and "param_a" not in res
    np.testing.assert_array_equal(res["mean_test_score"], [0.1, 0.2])

    class Base:
        @classmethod
        def _from_saved(cls, params, arrays, extra):
            return (params, sorted(arrays), extra)

    back = types.SimpleNamespace()
    _base.restore_best(back, Base, arrays, extra)
    assert back.best_estimator_ == ({"alpha": 0.5}, ["coef"], {"n_iter": 3})
    assert back.refit_time_ == 1.5
    _base.restore_best(back2 := types.SimpleNamespace(), Base, {}, {})
    assert not hasattr(back2, "best_estimator_")
    from ooc_lowrank.gimc import GIMC
    from ooc_lowrank.mvm import MultiViewMachineRegressor

    for cls in (GIMC, GIMCCV, GreedyLowRank, GreedyLowRankCV, InductiveMatrixCompletion,
                KernelMaxide, Maxide, MultiViewMachineRegressor):  # fmt: skip
        assert cls.save is _base.Loadable.save and callable(cls._state)


def test_refitted_names_the_search_and_the_fix():
    """``_base.refitted`` (GIMCCV / GreedyLowRankCV delegation): NotFittedError before fit, the
    search's own message after ``refit=False``."""
    import types

    from sklearn.exceptions import NotFittedError

    from ooc_lowrank._base import refitted

    with pytest.raises(NotFittedError):
        refitted(GIMCCV(), "fix it")
    cv = GreedyLowRankCV()
    cv.cv_results_ = {}
    with pytest.raises(AttributeError, match=r"^GreedyLowRankCV\(refit=False\) has no refitted "
                                             r"model; fix it$"):  # fmt: skip
        refitted(cv, "fix it")
    cv.best_estimator_ = best = types.SimpleNamespace()
    assert refitted(cv, "fix it") is best


def test_sparse_input_tag_written_once():
    """``_base.SparseInput``: the feature maps, KernelMaxide / Maxide and the MVMs tag scipy.sparse
    input as native, keeping their other tags."""
    from sklearn.utils import get_tags

    from ooc_lowrank._base import SparseInput
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    for cls in (ool.gimc.FourierFeatures, ool.gimc.NystromFeatures, KernelMaxide, Maxide,
                MultiViewMachineRegressor, MultiViewMachineClassifier):  # fmt: skip
        assert issubclass(cls, SparseInput) and get_tags(cls()).input_tags.sparse
    assert get_tags(MultiViewMachineClassifier()).estimator_type == "classifier"
    assert get_tags(ool.gimc.FourierFeatures()).transformer_tags is not None


def test_with_signature_binds_the_public_signature():
    """``_signature.with_signature`` (the converters' and generators' shared options): the public
    signature is the one given, calls are bound to it with defaults applied, name and doc kept."""
    import inspect

    from ooc_lowrank._signature import keyword_options, with_signature

    def body_fn(src, *, own=1):
        """Doc."""

    params = [*inspect.signature(body_fn).parameters.values(), *keyword_options({"seed": 0})]
    f = with_signature(body_fn, params, lambda args: args)
    assert str(inspect.signature(f)) == "(src, *, own=1, seed=0)"
    assert (f.__name__, f.__doc__) == ("body_fn", "Doc.")
    assert f("a", seed=3) == {"src": "a", "own": 1, "seed": 3}
    with pytest.raises(TypeError):
        f("a", other=1)
    req = keyword_options({"n_rows": inspect.Parameter.empty})
    assert req[0].default is inspect.Parameter.empty and req[0].kind is req[0].KEYWORD_ONLY


def test_estimators_declare_their_parameters_as_keyword_only_fields():
    """Every estimator is a ``_base.params`` dataclass (issue 29): ``__init__`` takes its fields,
    keyword-only and each with a default, stores exactly them (nothing else), keeps identity
    equality and hashing and scikit-learn's repr; the shared groups keep one default."""
    import dataclasses
    import inspect

    from ooc_lowrank.gimc import GIMC, FourierFeatures, NystromFeatures
    from ooc_lowrank.mvm import MultiViewMachineClassifier, MultiViewMachineRegressor

    classes = (GIMC, GIMCCV, FourierFeatures, NystromFeatures, GreedyLowRank, GreedyLowRankCV,
               InductiveMatrixCompletion, GIMCClustering, KernelMaxide, Maxide, KernelMaxideCV,
               MaxideCV, MultiViewMachineRegressor, MultiViewMachineClassifier)  # fmt: skip
    for cls in classes:
        assert dataclasses.is_dataclass(cls), cls
        sig = [p for n, p in inspect.signature(cls.__init__).parameters.items() if n != "self"]
        assert [p.name for p in sig] == [f.name for f in dataclasses.fields(cls)]
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in sig), cls
        est = cls()
        assert vars(est) == est.get_params(deep=False)
        assert est != cls() and hash(est) != hash(cls())
        assert repr(cls(random_state=3)) == f"{cls.__name__}(random_state=3)"
        defaults = est.get_params()
        for name, default in [("block_rows", None), ("cache_bytes", None), ("callback", None)]:
            assert defaults.get(name, default) is default


@pytest.mark.parametrize(
    "command,first,shared",
    [
        ("gimc-lff", "--n-features-map", "--block-rows"),
        ("glrl", "--loss", "--cache-bytes"),
        ("kernelmaxide", "--n-features-map", "--verbose"),
    ],
)
def test_cli_help_lists_the_methods_own_parameters_first(command, first, shared, capsys):
    """The estimators' signatures start with the ``_base`` groups; ``fit METHOD --help`` keeps
    the docstring's order (the method's own parameters first)."""
    from ooc_lowrank import cli

    with pytest.raises(SystemExit):
        cli.main(["fit", command, "--help"])
    out = capsys.readouterr().out
    assert out.index(first + " ") < out.index(shared + " ")
