"""What other plugins and conftests add through the plugin's hooks (:mod:`.hookspec`): the
session's backends and models, asked once per session and kept in ``config.stash``."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import pytest

if TYPE_CHECKING:
    from .devices.registry import BackendRegistry
    from .models.base import Model


BACKENDS_KEY = pytest.StashKey["BackendRegistry"]()
# The models this session added to the model registry, removed again at pytest_unconfigure.
MODELS_KEY = pytest.StashKey["list[tuple[str, Callable[[], Model]]]"]()


def registered_backends(config: pytest.Config) -> "BackendRegistry":
    """The session's backends: every ``pytest_charz_backends`` implementation asked once, on
    first use; a bad or duplicate registration is a UsageError (pytest_charz.errors)."""
    backends = config.stash.get(BACKENDS_KEY, None)
    if backends is None:
        from .devices.registry import BackendRegistry

        backends = BackendRegistry()
        config.hook.pytest_charz_backends(register=backends.register)
        config.stash[BACKENDS_KEY] = backends
    return backends


def register_models(config: pytest.Config) -> None:
    """Ask the ``pytest_charz_models`` implementations for their models (none: nothing is
    imported)."""
    if not config.hook.pytest_charz_models.get_hookimpls():
        return
    from .models.registry import register_model

    added: list[tuple[str, Callable[[], "Model"]]] = []
    config.stash[MODELS_KEY] = added

    def register(name: str, factory: Callable[[], "Model"]) -> None:
        register_model(name, factory)
        added.append((name, factory))

    config.hook.pytest_charz_models(register=register)


def unregister_models(config: pytest.Config) -> None:
    added = config.stash.get(MODELS_KEY, None)
    if not added:
        return
    from .models.registry import MODELS

    for name, factory in added:
        if MODELS.get(name) is factory:
            del MODELS[name]


class SimBackendHook:
    """Registers the ``sim`` backend with this session's ``--charz-sim-profile`` (read and
    checked once) and ``--charz-sim-param`` settings; the simulator is imported only when a
    ``sim:`` target is bound."""

    def __init__(self, config: pytest.Config) -> None:
        self.param_settings = list(config.getoption("charz_sim_params") or [])
        self.profile_path = config.getoption("charz_sim_profile")
        self.profile = None
        if self.profile_path:
            from .formats import PROFILE

            self.profile = PROFILE.load(self.profile_path)

    def pytest_charz_backends(self, register: "Callable[[Any], None]") -> None:
        from .sim.backend import SimBackend, parse_param_settings

        register(SimBackend(self.profile, self.profile_path or "", parse_param_settings(self.param_settings)))
