"""Plain NumPy twins of the multi-view machine kernels (SPEC section 3), written for clarity."""

from __future__ import annotations

import itertools

import numpy as np


def split(theta, sizes):
    """Stacked theta -> per-view factors (I_p + 1, k), bias row last."""
    nf, out, start = sum(sizes), [], 0
    for p, w in enumerate(sizes):
        out.append(np.vstack([theta[start:start + w], theta[nf + p:nf + p + 1]]))
        start += w
    return out


def brute_force(views, factors):
    """MVM-4/5: the full tensor W = sum_f outer(theta^(1)_f, ..., theta^(m)_f) contracted with
    the augmented inputs z^(p) = [x^(p); 1], term by term."""
    n = views[0].shape[0]
    dims = [f.shape[0] for f in factors]
    k = factors[0].shape[1]
    out = np.zeros(n)
    for i in range(n):
        z = [np.append(v[i], 1.0) for v in views]
        for idx in itertools.product(*[range(d) for d in dims]):
            w = sum(np.prod([factors[p][idx[p], f] for p in range(len(dims))]) for f in range(k))
            out[i] += w * np.prod([z[p][idx[p]] for p in range(len(dims))])
    return out


def sums(views, factors):
    """s^(p) = Theta^(p)T z^(p), one (n, k) array per view."""
    return [np.column_stack([v, np.ones(v.shape[0])]) @ f for v, f in zip(views, factors, strict=True)]


def predict(views, factors):
    """MVM-9."""
    return np.prod(np.stack(sums(views, factors)), axis=0).sum(axis=1)


def loss_and_slope(yhat, y, loss):
    if loss == "square":
        return (yhat - y) ** 2, 2 * (yhat - y)
    if loss == "logistic":
        return np.logaddexp(0, -y * yhat), -y / (1 + np.exp(y * yhat))
    t = y * yhat
    return np.maximum(0, 1 - t), np.where(t < 1, -y, 0.0)


def loss_grad(views, y, factors, loss):
    """Summed loss and per-view gradients (MVM-16..19), leave-one-out products by np.prod over
    the other views (no division)."""
    s = np.stack(sums(views, factors))  # (m, n, k)
    yhat = np.prod(s, axis=0).sum(axis=1)
    val, dl = loss_and_slope(yhat, y, loss)
    grads = []
    for p, v in enumerate(views):
        others = np.prod(np.delete(s, p, axis=0), axis=0)  # (n, k)
        z = np.column_stack([v, np.ones(v.shape[0])])
        grads.append(z.T @ (dl[:, None] * others))
    return val.sum(), grads


def sgd_sweep(views, y, factors, accum, order, loss, eta, reg, reg_weight, eps=1e-8):
    """One AdaGrad sweep, one row at a time, simultaneous updates of the touched rows."""
    for i in order:
        z = [np.append(v[i], 1.0) for v in views]
        s = np.stack([zz @ f for zz, f in zip(z, factors, strict=True)])
        yhat = np.prod(s, axis=0).sum()
        _, dl = loss_and_slope(np.array([yhat]), np.array([y[i]]), loss)
        new = []
        for p in range(len(views)):
            g = np.prod(np.delete(s, p, axis=0), axis=0)
            G = dl[0] * np.outer(z[p], g)
            th = factors[p]
            if reg == "l2":
                G = G + reg_weight * 2 * th
            elif reg == "l1":
                G = G + reg_weight * th / np.sqrt(th * th + eps)
            touched = (z[p] != 0)[:, None] & np.ones_like(th, bool)
            # rows with z = 0 (but the bias row is always touched) are left alone
            G = np.where(touched, G, 0.0)
            a = accum[p] + np.where(touched, G * G, 0.0)
            step = np.where(touched & (G != 0), eta * G / (np.sqrt(a) + 1e-12), 0.0)
            new.append((th - step, np.where(touched & (G != 0), a, accum[p])))
        for p, (th, a) in enumerate(new):
            factors[p], accum[p] = th, a
    return factors, accum


def two_loop(g, S, Y):
    """L-BFGS direction ``-H g`` of one model from its curvature pairs (lists, oldest first;
    Nocedal & Wright Algorithm 7.4 with ``H0 = s.y / y.y`` of the newest pair): the twin of
    ``core._two_loop``, which runs every model's loop at once."""
    q = g.copy()
    alphas = []
    for s_, y_ in zip(reversed(S), reversed(Y), strict=True):
        a = (s_ @ q) / (y_ @ s_)
        alphas.append(a)
        q -= a * y_
    if S:
        q *= (S[-1] @ Y[-1]) / (Y[-1] @ Y[-1])
    for (s_, y_), a in zip(zip(S, Y, strict=True), reversed(alphas), strict=True):
        q += (a - (y_ @ q) / (y_ @ s_)) * s_
    return -q
