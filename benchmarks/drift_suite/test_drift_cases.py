"""Cases for the drift experiment (benchmarks/drift_power.py).

``CHARZ_EXTRA_WORK`` (default 1.0) makes every case silently do that much more work than its
declared Work says: the regression a performance gate must catch."""
from __future__ import annotations

import os

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from pytest_charz import Work

EXTRA = float(os.environ.get("CHARZ_EXTRA_WORK", "1.0"))


@pytest.mark.charz(noise=0.005, max_time=1.5)
@pytest.mark.parametrize("size_bytes", [1 << 20, 16 << 20], ids=["1MiB", "16MiB"])
def test_copy(charz, size_bytes):
    n = size_bytes // 8
    src = charz.rng.random(int(n * EXTRA))
    dst = np.empty_like(src)
    np.copyto(dst, src)
    assert np.array_equal(dst, src)
    charz.measure(lambda: np.copyto(dst, src), work=Work(bytes=2 * n * 8, op="copy",
                                                       shape={"working_set_bytes": 2 * n * 8}))


@pytest.mark.charz(noise=0.005, max_time=1.5)
@pytest.mark.parametrize("n", [96, 192])
def test_gemm_fp64(charz, n):
    m = int(round(n * EXTRA))                 # m x n times n x n: EXTRA times the FLOPs
    a = charz.rng.standard_normal((m, n))
    b = charz.rng.standard_normal((n, n))
    c = np.empty((m, n))
    np.matmul(a, b, out=c)
    np.testing.assert_allclose(c[0], a[0] @ b, rtol=1e-10)
    # One BLAS thread: a GEMM this small split over the two vCPUs of a small guest runs at one of
    # two speeds from process to process (whether the second vCPU is free), a case of its own.
    with threadpool_limits(limits=1, user_api="blas"):
        charz.measure(lambda: np.matmul(a, b, out=c),
                      work=Work(flops=2.0 * n**3, bytes=3.0 * n * n * 8, dtype="fp64", op="gemm",
                                shape={"m": n, "n": n, "k": n, "threads": 1}))
