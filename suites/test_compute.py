"""Compute: the vendor GEMM (NumPy's BLAS on the CPU) over sizes and dtypes.

FLOPs: 2*n^3 per n x n x n product. Bytes: the compulsory traffic 3*n^2*itemsize (A and B read
once, C written once); real traffic is higher when the operands exceed the caches.
"""
from __future__ import annotations

import numpy as np
import pytest

from pytest_charz import Work

DTYPES = {"fp64": np.float64, "fp32": np.float32}


def check_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray, rng: np.random.Generator) -> None:
    """Compare sampled entries of ``c`` with dot products done without BLAS, in float64."""
    n = a.shape[0]
    rows = rng.integers(0, n, size=8)
    cols = rng.integers(0, n, size=8)
    expected = np.array([np.sum(a[i, :].astype(np.float64) * b[:, j].astype(np.float64)) for i, j in zip(rows, cols)])
    tolerance = 1e-10 if a.dtype == np.float64 else 1e-4
    np.testing.assert_allclose(c[rows, cols], expected, rtol=tolerance * np.sqrt(n), atol=tolerance * n)


@pytest.mark.charz(noise=0.02, max_time=2.0)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("n", [64, 256, 1024, pytest.param(2048, marks=pytest.mark.charz_slow)])
def test_gemm(charz, device, n, dtype):
    if device.backend != "cpu":
        pytest.skip("this GEMM case runs NumPy's BLAS on the host")
    np_dtype = DTYPES[dtype]
    a = charz.rng.standard_normal((n, n)).astype(np_dtype)
    b = charz.rng.standard_normal((n, n)).astype(np_dtype)
    c = np.empty((n, n), dtype=np_dtype)
    np.matmul(a, b, out=c)
    check_gemm(a, b, c, charz.rng)
    itemsize = np.dtype(np_dtype).itemsize
    work = Work(flops=2.0 * n**3, bytes=3.0 * n * n * itemsize, dtype=dtype, op="gemm",
                shape={"m": n, "n": n, "k": n})
    charz.measure(lambda: np.matmul(a, b, out=c), work=work)
