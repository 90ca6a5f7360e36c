"""Suite-wide options, fixtures and settings of the characterization suites (``suites/``).

The plugin (``pytest_charz``) provides the ``target``, ``device`` and ``charz`` fixtures and the
``charz`` markers; what the suites share on top of it lives here: the pointer-chase page option,
the GPU fixtures (PyTorch on the bound GPU, the raw kernels) and the sizing plan of the bound
target, whose sweeps ``suites/_sizes.py`` derives from the target's memory levels. The plugin's
own tests (``tests/``) run their suites in isolated directories with ``pytester`` and never see
these fixtures."""
from __future__ import annotations

from typing import Any

import pytest

HUGEPAGES_CHOICES = ("huge", "base")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("charz-suites", "pytest-charz suites")
    group.addoption(
        "--charz-chase-pages", dest="charz_chase_pages", choices=HUGEPAGES_CHOICES, default="huge",
        help="pages under the CPU pointer-chase buffers: 'huge' asks for transparent huge pages "
             "(madvise; falls back to base pages when refused), 'base' keeps 4 KiB pages, whose "
             "TLB misses then add to the latency of large working sets (default: huge)")


@pytest.fixture(scope="session")
def gpu_torch(device: Any) -> Any:
    """PyTorch, for cases that drive the bound GPU (cuda or rocm) through it; skips elsewhere."""
    if device.backend not in ("cuda", "rocm"):
        pytest.skip(f"a GPU case; the bound device is {device.backend}")
    torch = pytest.importorskip("torch", reason="the GPU cases drive GEMM, copies and graphs through PyTorch")
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch build sees no GPU (torch.cuda.is_available() is False)")
    unavailable = getattr(device, "torch_unavailable", None)
    if unavailable:
        pytest.skip(f"the device does not share its stream with PyTorch: {unavailable}")
    return torch


@pytest.fixture(scope="session")
def gpu_kernels(device: Any) -> Any:
    """The raw GPU kernels (``kernels/gpu_kernels.cu``) compiled for the bound CUDA device."""
    if device.backend != "cuda":
        pytest.skip(f"the raw GPU kernels are compiled with CuPy on the cuda backend; the bound "
                    f"device is {device.backend}")
    return device.kernels()


@pytest.fixture
def torch_device(device: Any, gpu_torch: Any) -> Any:
    """The ``torch.device`` of the bound GPU."""
    return gpu_torch.device("cuda", device.index)


@pytest.fixture(scope="session")
def size_plan(pytestconfig: pytest.Config) -> Any:
    """The sizing plan of the bound target (``_sizes.SizePlan``): caches, threads, buffer cap."""
    from _sizes import plan_for  # suites/ is on sys.path once a suite module is collected

    return plan_for(pytestconfig)
