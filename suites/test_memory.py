"""Memory: copy bandwidth over working-set sizes.

Bytes counted: a copy of N bytes reads N and writes N (2N). Write-allocate traffic (the read of
the destination line before it is written, when stores are not streaming) is not counted, so
the achieved figure is the STREAM convention's.
"""
from __future__ import annotations

import numpy as np
import pytest

from pytest_charz import Work

KIB = 1024
MIB = 1024 * KIB

COPY_SIZES = [
    pytest.param(16 * KIB, id="16KiB"),
    pytest.param(256 * KIB, id="256KiB"),
    pytest.param(4 * MIB, id="4MiB"),
    pytest.param(64 * MIB, id="64MiB"),
    pytest.param(512 * MIB, id="512MiB", marks=pytest.mark.charz_slow),
]


@pytest.mark.charz(noise=0.01, max_time=2.0)
@pytest.mark.parametrize("size_bytes", COPY_SIZES)
def test_copy(charz, device, size_bytes):
    if device.backend != "cpu":
        pytest.skip("this copy case drives host memory with NumPy; GPU copies are in test_movement.py")
    src = charz.rng.random(size_bytes // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    assert np.array_equal(dst, src)
    work = Work(bytes={"dram": 2 * src.nbytes}, op="copy", shape={"working_set_bytes": 2 * src.nbytes})
    charz.measure(lambda: np.copyto(dst, src), work=work)
