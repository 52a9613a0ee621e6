"""The linear-algebra helpers: BLAS on one thread (`ferl.novelty.linalg`), shared whitenings
(`ferl.novelty.linalg`)."""

from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

import ferl.novelty.leaf_gaussians as leaf_gaussians
import ferl.novelty.linalg as linalg
from ferl.novelty.leaf_gaussians import RIDGE
from ferl.novelty.linalg import one_blas_thread, whitening


def blas_threads():
    """Thread counts of the BLAS libraries `one_blas_thread` controls: those loaded when it was first
    used (a library another package loads later, such as OpenCV's OpenBLAS, is not among them)."""
    known = {lib.filepath for lib in linalg._blas()}
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and i["filepath"] in known]


def test_one_blas_thread_limits_only_a_pool_of_several_threads():
    with threadpool_limits(1, user_api="blas"):
        assert isinstance(one_blas_thread(), nullcontext)  # nothing to limit, nothing to restore
    before = blas_threads()
    with one_blas_thread():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before


def test_overlapping_uses_in_several_threads_restore_the_pool(monkeypatch):
    """Read-outs in concurrent threads: two that both found the pool at several threads (the
    second checked before the first pinned it), then enter A, B, leave A, B. Each limiter used to
    restore what it saw, so B put back A's one thread and the pool stayed at one after the read-outs
    (seen after 132 rounds of 16 read-outs in 4 threads)."""
    with threadpool_limits(2, user_api="blas"):  # a pool of several threads where BLAS allows it
        before = blas_threads()
        libs = linalg._blas()
        saw = [SimpleNamespace(get_num_threads=lambda: 2) for _ in libs]
        monkeypatch.setattr(linalg, "_blas", lambda: saw)  # what both checks saw, before any limit
        a, b = one_blas_thread(), one_blas_thread()
        monkeypatch.setattr(linalg, "_blas", lambda: libs)
        a.__enter__()
        b.__enter__()
        a.__exit__(None, None, None)
        assert all(n == 1 for n in blas_threads())  # B still runs
        b.__exit__(None, None, None)
        assert blas_threads() == before


def test_the_leaf_gaussians_run_blas_on_one_thread_and_restore_the_pool(monkeypatch, wine_deep, wine):
    """OpenBLAS's thread pool doubled the leaf Gaussians' CPU time (`ferl.novelty.linalg`): their BLAS calls
    run on one thread, and the pool's size is back afterwards."""
    before = blas_threads()
    seen = []
    kernel = leaf_gaussians._leaf_kernel
    monkeypatch.setattr(leaf_gaussians, "_leaf_kernel",
                        lambda *a: (seen.append(blas_threads()), kernel(*a))[1])
    wine_deep.anomalous_features(wine[1][:20])  # the per-feature split of the score (`leaf_terms`)
    assert seen and all(n == 1 for n in seen[0])
    with one_blas_thread():
        assert all(n == 1 for n in blas_threads())
    assert blas_threads() == before


def test_the_whitening_of_shared_covariances_is_each_ones_own_bit_for_bit():
    """Distinct covariances are decomposed once (`ferl.novelty.linalg`); each leaf gets what a decomposition
    of its own matrix gives."""
    rng = np.random.default_rng(3)
    A = rng.normal(size=(3, 6, 9))
    distinct = A @ np.swapaxes(A, 1, 2) / 9 + RIDGE * np.eye(6)
    cov = distinct[[0, 1, 0, 2, 2, 0]]
    whiten_t, half_share = whitening(cov, RIDGE)
    for j in range(len(cov)):
        own_t, own_share = whitening(cov[j:j + 1], RIDGE)
        assert np.array_equal(whiten_t[j], own_t[0]) and np.array_equal(half_share[j], own_share[0])
        np.testing.assert_allclose(whiten_t[j].T @ cov[j] @ whiten_t[j], np.eye(6), atol=1e-10)
    assert whiten_t.flags.c_contiguous
