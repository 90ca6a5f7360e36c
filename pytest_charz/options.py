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
