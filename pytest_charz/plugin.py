"""pytest glue: options, the plugin's own hooks, the ``target``/``device``/``charz`` fixtures,
the ``charz`` marker, the run file and the terminal summary. Thin on purpose: nothing heavy is
imported until a case asks for the ``charz`` fixture, and nothing is written unless a case
measures something.

A bad option value is found by ``pytest_configure`` and is a usage error (exit code 4, one line).
What the file system refuses (a read-only baseline store, a full disk at the end) never fails a
case: every measured case stays in the run file, its journal or the fallback file, and the
terminal summary says, one line per failure, what was not written, why, and where the cases are.
The exit code is the verdicts' either way."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator

import pytest

from .options import add_measure_options, add_verdict_options

if TYPE_CHECKING:
    from .devices.base import Backend
    from .session import CharzSession

MARKER_HELP = (
    "charz(noise=FRACTION, mode='hot'|'cold', max_time=SECONDS, min_samples=N, warmup=SECONDS, "
    "threshold=FRACTION, strict=BOOL, quick=dict(...)): per-case measurement and verdict settings"
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspec

    pluginmanager.add_hookspecs(hookspec)


def pytest_charz_backends(register: "Callable[[Backend], None]") -> None:
    """The built-in backends go through the same hook as everyone else's."""
    from .devices.registry import builtin_backends

    for backend in builtin_backends():
        register(backend)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("charz", "hardware characterization (pytest-charz)")
    add_measure_options(group.addoption)
    add_verdict_options(group.addoption)


class XdistHooks:
    """On the pytest-xdist controller: give every worker the same run path, and merge their
    run files at the end."""

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        from .session import session_for

        node.workerinput["charz_run_path"] = session_for(node.config).run_path()


def _is_xdist_controller(config: pytest.Config) -> bool:
    return (config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput")
            and bool(getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None)))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_HELP)
    if _is_xdist_controller(config):
        config.pluginmanager.register(XdistHooks(), "charz-xdist")
    config.addinivalue_line("markers", "charz_slow: a long case, left out of --charz-quick runs")
    from .errors import CharzError, UsageError
    from .extensions import register_models
    from .options import check_option_values

    try:
        register_models(config)
    except CharzError as exc:
        raise pytest.UsageError(f"pytest_charz_models: {exc}") from None
    try:
        check_option_values(config.getoption)
    except CharzError as exc:
        raise pytest.UsageError(str(exc)) from None
    import importlib.util

    if importlib.util.find_spec("pytest_charz.sim") is not None:
        from .extensions import SimBackendHook

        try:
            config.pluginmanager.register(SimBackendHook(config), "charz-sim")
        except CharzError as exc:
            raise pytest.UsageError(str(exc)) from None
    # Fail before collection: an unknown or absent target, a profile that cannot be read, or a
    # run file that cannot be written, is a usage error (exit code 4), not a test failure.
    if config.getoption("charz_target") or config.getoption("charz_out") or config.getoption("charz_profile"):
        try:
            if config.getoption("charz_profile"):
                from .formats import PROFILE
                from .options import PROFILE_KEY

                try:
                    config.stash[PROFILE_KEY] = PROFILE.load(config.getoption("charz_profile"))
                except CharzError as exc:
                    raise UsageError(f"--charz-profile: {exc}") from None
            if config.getoption("charz_out"):
                from .run import check_writable

                check_writable(config.getoption("charz_out"))
            if config.getoption("charz_target"):
                from .session import session_for

                session_for(config).bind()
        except CharzError as exc:
            raise pytest.UsageError(str(exc)) from None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption("charz_quick"):
        return
    slow = [item for item in items if item.get_closest_marker("charz_slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("charz_slow") is None]


def pytest_collection_finish(session: pytest.Session) -> None:
    """On a terminal session measuring in this process, the time left is said as each suite
    file ends (:class:`pytest_charz.report.terminal.SessionPace`); never under pytest-xdist,
    whose controller sees tests end out of order."""
    config = session.config
    if (config.getoption("verbose") < 0 or config.getoption("collectonly")
            or config.pluginmanager.has_plugin("charz-xdist") or hasattr(config, "workerinput")):
        return
    import time

    from .report.progress import SessionPace

    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or config.pluginmanager.has_plugin("charz-pace"):
        return
    pace = SessionPace([item.nodeid for item in session.items], [item.location[0] for item in session.items],
                       time.monotonic)
    config.pluginmanager.register(_PaceReporter(pace, reporter), "charz-pace")


class _PaceReporter:
    """Writes :class:`SessionPace`'s line after pytest's own progress of the file that ended."""

    def __init__(self, pace: Any, reporter: Any) -> None:
        self.pace = pace
        self.reporter = reporter

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        line = self.pace.finished(nodeid)
        if line is not None:
            self.reporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    from .session import SESSION_KEY

    session = config.stash.get(SESSION_KEY, None)
    if session is not None:
        session.close()
    from .extensions import unregister_models

    unregister_models(config)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    from .session import SESSION_KEY

    interrupted = bool(session.shouldstop) or exitstatus == pytest.ExitCode.INTERRUPTED
    if session.config.pluginmanager.has_plugin("charz-xdist"):
        from .session import session_for

        merged = session_for(session.config).merge_workers(interrupted)
        if merged:
            session.config.stash[MERGED_KEY] = merged
        return
    charz_session = session.config.stash.get(SESSION_KEY, None)
    if charz_session is not None:
        charz_session.finish(interrupted=interrupted)


MERGED_KEY = pytest.StashKey[str]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    from .session import SESSION_KEY

    charz_session = config.stash.get(SESSION_KEY, None)
    merged = config.stash.get(MERGED_KEY, None)
    if merged is not None:
        from .report.terminal import summary_lines
        from .run import load_run

        run = load_run(merged)
        terminalreporter.section("charz: measurements (all workers)")
        for line in summary_lines(run, verbose=config.getoption("verbose"), table=config.getoption("charz_table")):
            terminalreporter.write_line(line)
        terminalreporter.write_line(f"run file: {merged}")
        _write_report_sections(terminalreporter, config, run)
    elif charz_session is not None and charz_session.measured:
        from .report.terminal import summary_lines

        terminalreporter.section("charz: measurements")
        for line in summary_lines(charz_session.run, verbose=config.getoption("verbose"),
                                  table=config.getoption("charz_table")):
            terminalreporter.write_line(line)
        if charz_session.recorder.written and charz_session.out_path:
            terminalreporter.write_line(f"run file: {charz_session.out_path}")
        _write_report_sections(terminalreporter, config, charz_session.run)
    if charz_session is not None:
        problems = charz_session.problems()
        if problems:
            terminalreporter.section("charz: not written", red=True)
            for line in problems:
                terminalreporter.write_line(line, red=True)


def _write_report_sections(terminalreporter: Any, config: pytest.Config, run: Any) -> None:
    """The ``pytest_charz_report_sections`` of other plugins, each as its own terminal section;
    something that is not a ReportSection is reported as such, never dropped silently."""
    from .hookspec import ReportSection

    for answer in config.hook.pytest_charz_report_sections(run=run):
        for section in answer or ():
            if isinstance(section, ReportSection):
                terminalreporter.section(section.title)
                for line in section.lines:
                    terminalreporter.write_line(line)
            else:
                terminalreporter.write_line(
                    f"charz: a pytest_charz_report_sections implementation returned {section!r}, "
                    "not a pytest_charz.hookspec.ReportSection; left out", yellow=True)


@pytest.fixture(scope="session")
def target(request: pytest.FixtureRequest) -> Any:
    """The TargetSpec being characterized (resolved from --target or detected)."""
    return _bound(request).bind().spec


def _bound(request: pytest.FixtureRequest) -> "CharzSession":
    from .session import session_for

    return session_for(request.config)


@pytest.fixture(scope="session")
def device(request: pytest.FixtureRequest) -> Any:
    """The bound Device (cpu, cuda, rocm) that measures the cases."""
    return _bound(request).bind().device


@pytest.fixture
def charz(request: pytest.FixtureRequest) -> Iterator[Any]:
    """The measuring API of one case: ``charz.measure(fn, work=Work(...))``."""
    from .context import CaseContext

    session = _bound(request)
    session.bind()
    yield CaseContext(session, request.node)
