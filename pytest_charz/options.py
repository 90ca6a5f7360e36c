"""Options defined once: the pytest plugin and the ``charz`` CLI share these definitions."""
from __future__ import annotations

from typing import Any, Callable

AddOption = Callable[..., Any]

DEFAULT_NOISE = 0.01
DEFAULT_MAX_TIME_S = 2.0


def add_measure_options(addoption: AddOption) -> None:
    addoption("--target", dest="charz_target", default=None, metavar="NAME",
              help="target to characterize: a catalogue id or alias (h100, mi300) or 'cpu'; "
                   "default: the visible accelerator, else the host CPU")
    addoption("--charz-out", dest="charz_out", default=None, metavar="PATH",
              help="write the run file here (default: .charz/runs/run-<time>.json, also copied to latest.json)")
    addoption("--charz-noise", dest="charz_noise", default=None, type=float, metavar="FRACTION",
              help=f"stop sampling a case once the 95%% CI of its median is within this relative "
                   f"half-width (default {DEFAULT_NOISE})")
    addoption("--charz-max-time", dest="charz_max_time", default=None, type=float, metavar="SECONDS",
              help=f"time budget of one case, warm-up included (default {DEFAULT_MAX_TIME_S})")
    addoption("--charz-quick", dest="charz_quick", action="store_true", default=False,
              help="a short run for smoke tests and CI: small budgets, fewer samples, quick parameter sets")
    addoption("--charz-seed", dest="charz_seed", default=0, type=int, metavar="N",
              help="seed of the random inputs of every case (default 0)")
