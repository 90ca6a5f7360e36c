"""Options defined once: the pytest plugin and the ``charz`` CLI share these definitions, and
the checks of their values that the command-line parser cannot make (run by ``pytest_configure``,
so a bad value is a usage error before any case runs)."""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping

import pytest

from .errors import UsageError

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
    addoption("--charz-table", dest="charz_table", action="store_true", default=False,
              help="print the table of every measured case in the summary (also with -v)")
    addoption("--charz-seed", dest="charz_seed", default=0, type=int, metavar="N",
              help="seed of the random inputs of every case (default 0)")
    addoption("--charz-counters", dest="charz_counters", default="auto", choices=("auto", "off"),
              help="profiler counters of each case's timed samples (Linux perf events on CPUs, CUPTI on NVIDIA "
                   "GPUs): auto counts what this machine exposes and records why the rest is missing; off "
                   "records none (default auto). Energy is measured either way where a counter exists")
    addoption("--charz-sim-profile", dest="charz_sim_profile", default=None, metavar="PATH",
              help="with --target=sim:NAME: simulate the machine a measured capability profile describes "
                   "(e.g. --target=sim:cpu with this host's profile) instead of the catalogue's figures")
    addoption("--charz-sim-param", dest="charz_sim_params", action="append", default=[], metavar="NAME=VALUE",
              help="with --target=sim:NAME: change a machine parameter of the simulation (repeatable; "
                   "e.g. memory_bandwidth=3.0e12; the names are those of charz sweep)")


DEFAULT_THRESHOLD = 0.05


def add_verdict_options(addoption: AddOption) -> None:
    addoption("--charz-baselines", dest="charz_baselines", default=None, metavar="DIR",
              help="baseline store directory (default: <rootdir>/baselines)")
    addoption("--charz-accept", dest="charz_accept", default=None, metavar="REASON",
              help="accept this run's measurements as the new references, with the reason kept in "
                   "each case's history (e.g. 'driver 580 -> 590')")
    addoption("--charz-no-save", dest="charz_save_new", action="store_false", default=None,
              help="do not save references for new cases (the default saves them, except in --charz-quick)")
    addoption("--charz-threshold", dest="charz_threshold", default=None, type=float, metavar="FRACTION",
              help=f"drift threshold: the smallest change from the reference that is judged drift "
                   f"(default {DEFAULT_THRESHOLD}; a case's marker may set its own)")
    addoption("--charz-strict", dest="charz_strict", action="store_true", default=False,
              help="fail inconclusive and explained cases too (by default only model-error and drift fail)")
    addoption("--charz-model", dest="charz_model", default=None, metavar="NAME",
              help="the model that predicts each case (default: the composite model, "
                   "pytest_charz.models.registry.DEFAULT_MODEL)")
    addoption("--charz-profile", dest="charz_profile", default=None, metavar="PATH",
              help="a capability profile whose measured ceilings the model uses instead of the datasheet's")


#: The capability profile of ``--charz-profile``, read and checked once by ``pytest_configure``
#: (the judge of the session's cases reads it from here).
PROFILE_KEY = pytest.StashKey[Mapping[str, Any]]()


def check_option_values(getoption: Callable[[str], Any]) -> None:
    """Check the values of the charz options that the command-line parser cannot: raise
    :class:`~pytest_charz.errors.UsageError` naming the option, its value and what would be
    valid. ``getoption`` reads an option by its ``dest`` (``config.getoption``). The models of
    ``pytest_charz_models`` must be registered before, so ``--charz-model`` may name them."""
    noise = getoption("charz_noise")
    if noise is not None and not (math.isfinite(noise) and 0 < noise < 1):
        raise UsageError(f"--charz-noise must be a fraction in (0, 1), e.g. {DEFAULT_NOISE} for 1%; got {noise!r}")
    max_time = getoption("charz_max_time")
    if max_time is not None and not (math.isfinite(max_time) and max_time > 0):
        raise UsageError(f"--charz-max-time must be a positive number of seconds, e.g. {DEFAULT_MAX_TIME_S}; "
                         f"got {max_time!r}")
    threshold = getoption("charz_threshold")
    if threshold is not None and not (math.isfinite(threshold) and 0 < threshold < 1):
        raise UsageError(f"--charz-threshold must be a fraction in (0, 1), e.g. {DEFAULT_THRESHOLD} for 5%; "
                         f"got {threshold!r}")
    seed = getoption("charz_seed")
    if seed is not None and seed < 0:
        raise UsageError(f"--charz-seed must be a non-negative integer, got {seed!r}")
    reason = getoption("charz_accept")
    if reason is not None and not reason.strip():
        raise UsageError("--charz-accept needs a reason kept in each case's history (e.g. 'driver 580 -> 590'), "
                         f"got {reason!r}")
    baselines = getoption("charz_baselines")
    if baselines and os.path.exists(baselines) and not os.path.isdir(baselines):
        raise UsageError(f"--charz-baselines must be a directory (or a path to create one at), "
                         f"but {baselines!r} is a file")
    model = getoption("charz_model")
    if model is not None:
        from .models.registry import MODELS

        if model not in MODELS:
            raise UsageError(f"--charz-model: unknown model {model!r}; known models: {', '.join(MODELS)}")
