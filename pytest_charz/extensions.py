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
    """Registers the ``sim`` backend with this session's ``--charz-sim-profile`` and
    ``--charz-sim-param`` settings, both read and checked once, here (a bad one is a UsageError
    when the session is configured); the simulator itself is imported only when a ``sim:``
    target is bound."""

    def __init__(self, config: pytest.Config) -> None:
        self.params: dict[str, float] = {}
        settings = list(config.getoption("charz_sim_params") or [])
        if settings:
            from .sim.backend import parse_param_settings

            self.params = parse_param_settings(settings)
        self.profile_path = config.getoption("charz_sim_profile")
        self.profile = None
        if self.profile_path:
            from .errors import CharzError, UsageError
            from .formats import PROFILE

            try:
                self.profile = PROFILE.load(self.profile_path)
            except CharzError as exc:
                raise UsageError(f"--charz-sim-profile: {exc}") from None

    def pytest_charz_backends(self, register: "Callable[[Any], None]") -> None:
        from .sim.backend import SimBackend

        register(SimBackend(self.profile, self.profile_path or "", dict(self.params)))
