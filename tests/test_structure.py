"""The shape of the package, read from its source: module sizes, the models' imports, and the
versioned files every command writes."""
from __future__ import annotations

import ast
import json
from collections import deque
from pathlib import Path
from typing import Iterator

import pytest

from pytest_charz import cli

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_charz"
MAX_MODULE_LINES = 400
# The models are data in, data out: nothing of the session, the files or the reports.
MODELS_MUST_NOT_IMPORT = ("report", "run", "records", "store", "cli", "profile", "calibration", "session",
                          "plugin", "workloads", "evidence")


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _package_of(path: Path, root: Path) -> str:
    """The dotted package a relative import in ``path`` is relative to (``root`` is the package
    directory, ``pytest_charz``): the directory holding the file, for a module and for a
    package's ``__init__.py`` alike."""
    return ".".join(path.relative_to(root.parent).parts[:-1])


def _absolute(node: ast.ImportFrom, package: str) -> str:
    """The absolute module a ``from ... import`` statement imports from."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(path: Path) -> set[str]:
    """Absolute names of the pytest_charz modules ``path`` imports (relative imports resolved),
    anywhere in the file: a lazy import inside a function counts as much as one at the top."""
    package = _package_of(path, PACKAGE)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            prefix = _absolute(node, package)
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("pytest_charz")}


def _is_type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``): its body never runs."""
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` that can run: the bodies of ``if TYPE_CHECKING:`` are left out
    (their ``else`` is kept), function bodies are kept (a lazy import runs when it is called)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(reversed(node.orelse))
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_module(name: str, root: Path) -> bool:
    """Whether the dotted ``name`` (under ``root``'s package) is a module or a package."""
    parts = name.split(".")[1:]
    where = root.joinpath(*parts)
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def runtime_imports(path: Path, root: Path = PACKAGE) -> list[tuple[int, str]]:
    """The imports of modules of ``root``'s package that ``path`` can run, as (line, absolute
    module name): relative imports resolved, function-level imports included, imports under
    ``if TYPE_CHECKING:`` left out. ``from P import x`` names ``P.x`` when that is a module, else
    ``P`` (the module whose namespace is read)."""
    top = root.name
    package = _package_of(path, root)
    found: list[tuple[int, str]] = []
    for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, package)
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                found.append((node.lineno, candidate if _is_module(candidate, root) else source))
    return sorted({(line, name) for line, name in found if name == top or name.startswith(top + ".")})


def _unit(module: str) -> str:
    """The top-level unit of a module of the package: the first component after the package
    (``pytest_charz.models.base`` -> ``models``), or the package itself for its ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph(root: Path = PACKAGE) -> dict[tuple[str, str], str]:
    """The imports between the package's top-level units that run: (importer, imported) -> one
    example import, ``file:line -> module`` (the first in file order)."""
    edges: dict[tuple[str, str], str] = {}
    for path in sorted(root.rglob("*.py")):
        importer = _unit(".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"))
        for line, module in runtime_imports(path, root):
            imported = _unit(module)
            if imported != importer:
                edges.setdefault((importer, imported), f"{path.relative_to(root.parent)}:{line} -> {module}")
    return edges


def strongly_connected(nodes: set[str], edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of a directed graph (Tarjan's algorithm, iterative),
    each sorted; components of one node included."""
    successors: dict[str, list[str]] = {node: [] for node in nodes}
    for a, b in sorted(edges):
        successors[a].append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(nodes):
        if start in index:
            continue
        work = [(start, iter(successors[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(successors[child])))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return components


def _shortest_path(edges: set[tuple[str, str]], start: str, goal: str) -> list[str]:
    """A shortest path ``start`` ... ``goal`` along ``edges`` (breadth first), [] when none."""
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])  # type: ignore[arg-type]
            return path[::-1]
        for a, b in sorted(edges):
            if a == node and b not in previous:
                previous[b] = node
                queue.append(b)
    return []


def import_cycles(edges: dict[tuple[str, str], str]) -> list[list[str]]:
    """The cycles of the graph, as ``[a, b, ..., a]``: within each strongly connected component,
    for each of its edges the shortest cycle through it, each cycle once."""
    nodes = {node for edge in edges for node in edge}
    cycles: list[list[str]] = []
    for component in strongly_connected(nodes, set(edges)):
        if len(component) < 2:
            continue
        inside = {(a, b) for a, b in edges if a in component and b in component}
        for a, b in sorted(inside):
            cycle = [a] + _shortest_path(inside, b, a)
            turn = cycle.index(min(cycle[:-1]))
            canonical = cycle[turn:-1] + cycle[:turn] + [cycle[turn]]
            if canonical not in cycles:
                cycles.append(canonical)
    return cycles


def private_name_uses(root: Path = PACKAGE) -> list[str]:
    """Every use of another module's private name (one leading underscore, not a dunder) in the
    package: ``from X import _name`` with X another module of the package, and ``module._name``
    where ``module`` is a name bound to an imported module of the package (``a.b._name`` too)."""
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    top = root.name
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        here = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        where = path.relative_to(root.parent)
        package = _package_of(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        modules: dict[str, str] = {}  # a local name -> the module of the package it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = _absolute(node, package)
                if source != top and not source.startswith(top + "."):
                    continue
                for alias in node.names:
                    if private(alias.name) and source != here:
                        found.append(f"{where}:{node.lineno}: from {source} import {alias.name}")
                    if _is_module(f"{source}.{alias.name}", root):
                        modules[alias.asname or alias.name] = f"{source}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == top or alias.name.startswith(top + "."):
                        modules[alias.asname or top] = alias.name if alias.asname else top
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not private(node.attr):
                continue
            chain: list[str] = []
            value: ast.expr = node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in modules:
                continue
            module = ".".join([modules[value.id], *chain])
            if _is_module(module, root) and module != here:
                found.append(f"{where}:{node.lineno}: {module}.{node.attr}")
    return found


def test_no_module_is_over_the_line_limit() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in modules()
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: {long}"


def test_models_import_no_session_file_or_report_layer() -> None:
    forbidden = tuple(f"pytest_charz.{name}" for name in MODELS_MUST_NOT_IMPORT)
    offending = {}
    for path in sorted((PACKAGE / "models").rglob("*.py")):
        bad = sorted(name for name in imported_modules(path)
                     if any(name == f or name.startswith(f + ".") for f in forbidden))
        if bad:
            offending[path.name] = bad
    assert offending == {}


def test_the_import_reader_sees_relative_and_lazy_imports(tmp_path: Path) -> None:
    # The check above is only as good as this reader: it must resolve ``from ..x import y``.
    sample = PACKAGE / "models" / "base.py"
    assert "pytest_charz.errors" in imported_modules(sample)
    assert "pytest_charz.formats.PREDICTION" in imported_modules(sample)
    # ... and relative to the package itself in a package's __init__.py.
    assert "pytest_charz.models.registry" in imported_modules(PACKAGE / "models" / "__init__.py")


def test_no_package_cycle() -> None:
    # Layers, bottom up (docs/DESIGN "Layers"): an import only points down, function-level
    # imports included; so no two top-level units of the package may import each other, however
    # far round. Imports under ``if TYPE_CHECKING:`` never run and do not count.
    edges = import_graph()
    cycles = import_cycles(edges)
    message = "\n".join(" -> ".join(cycle) + "".join(f"\n    {a} -> {b}: {edges[(a, b)]}"
                                                     for a, b in zip(cycle, cycle[1:]))
                        for cycle in cycles)
    assert cycles == [], f"import cycles between the package's top-level units:\n{message}"


def test_the_cycle_finder_sees_a_cycle_and_only_a_cycle() -> None:
    edges = {("a", "b"): "a.py:1 -> b", ("b", "c"): "b.py:1 -> c", ("c", "a"): "c.py:1 -> a",
             ("c", "d"): "c.py:2 -> d", ("d", "e"): "d.py:1 -> e"}
    assert import_cycles(edges) == [["a", "b", "c", "a"]]
    assert sorted(map(len, strongly_connected({"a", "b", "c", "d", "e"}, set(edges)))) == [1, 1, 3]
    assert import_cycles({**edges, ("b", "a"): "b.py:2 -> a"}) == [["a", "b", "a"], ["a", "b", "c", "a"]]
    assert import_cycles({("a", "b"): "", ("b", "c"): ""}) == []


def test_the_runtime_import_reader_skips_type_checking_blocks_only(tmp_path: Path) -> None:
    root = tmp_path / "pytest_charz"
    (root / "low").mkdir(parents=True)
    for name in ("__init__.py", "low/__init__.py", "low/values.py", "high.py", "other.py"):
        (root / name).write_text("")
    (root / "high.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import typing\n"
        "if TYPE_CHECKING:\n    from .other import Thing\n"
        "if typing.TYPE_CHECKING:\n    from . import other\nelse:\n    from .low import values\n"
        "def lazy():\n    from .low import something_defined_in_init\n"
        "    import pytest_charz.other\n")
    (root / "low" / "__init__.py").write_text("from .values import thing\nfrom ..other import name\n")
    assert runtime_imports(root / "high.py", root) == [
        (8, "pytest_charz.low.values"), (10, "pytest_charz.low"), (11, "pytest_charz.other")]
    assert runtime_imports(root / "low" / "__init__.py", root) == [
        (1, "pytest_charz.low.values"), (2, "pytest_charz.other")]
    assert import_graph(root) == {("high", "low"): "pytest_charz/high.py:8 -> pytest_charz.low.values",
                                  ("high", "other"): "pytest_charz/high.py:11 -> pytest_charz.other",
                                  ("low", "other"): "pytest_charz/low/__init__.py:2 -> pytest_charz.other"}


def test_no_private_name_imported_across_modules() -> None:
    # A name with one leading underscore is its module's own: another module that needs it needs
    # a public name (or the helper belongs to the module that uses it).
    offending = private_name_uses()
    assert offending == [], "private names used outside their module:\n" + "\n".join(offending)


def test_the_private_name_finder_sees_imports_and_attributes(tmp_path: Path) -> None:
    root = tmp_path / "pytest_charz"
    (root / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "sub/inner.py"):
        (root / name).write_text("")
    (root / "sub" / "inner.py").write_text("_own = 1\n__version__ = 2\nx = _own\n")
    (root / "user.py").write_text(
        "import pytest_charz.sub.inner\nfrom .sub import inner as alias\nfrom .sub.inner import _own, __version__\n"
        "def f(thing):\n    from . import sub\n"
        "    return alias._own, pytest_charz.sub.inner._own, sub.inner._own, thing._x, alias.__doc__\n")
    assert private_name_uses(root) == [
        "pytest_charz/user.py:3: from pytest_charz.sub.inner import _own",
        "pytest_charz/user.py:6: pytest_charz.sub.inner._own",
        "pytest_charz/user.py:6: pytest_charz.sub.inner._own",
        "pytest_charz/user.py:6: pytest_charz.sub.inner._own"]


SUITE = '''
import pytest
from pytest_charz import Work
from pytest_charz.measure import clock

@pytest.mark.parametrize("cost_ns", [1000, 4000, 16000])
def test_steady(charz, cost_ns):
    fake = clock.current()
    charz.measure(lambda: fake.advance(cost_ns), work=Work(flops=2000.0 * cost_ns, dtype="fp64", bytes=8.0 * cost_ns,
                                                           op="stream", shape={"array_bytes": 8.0 * cost_ns}))
'''


@pytest.fixture
def written(pytester: pytest.Pytester, fake_clock: object, quiet_host: None, monkeypatch: pytest.MonkeyPatch
            ) -> dict[str, Path]:
    """A suite run (saving references), then ``charz profile``, ``calibrate`` and ``validate``."""
    pytester.makepyfile(test_suite=SUITE)
    run = pytester.path / "run.json"
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-out={run}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    result.assert_outcomes(passed=3)
    monkeypatch.chdir(pytester.path)
    assert cli.main(["profile", str(run), "-o", "out"]) == 0
    assert cli.main(["calibrate", str(run), "--out", "out/calibration.json"]) == 0
    assert cli.main(["validate", str(run), "-o", "out"]) == 0
    files = {"run": run, "profile": pytester.path / "out" / "run.profile.json",
             "calibration": pytester.path / "out" / "calibration.json",
             "validation": pytester.path / "out" / "validation.json"}
    files.update({f"baseline:{p.name}": p for p in sorted((pytester.path / "baselines").rglob("*.json"))})
    return files


def test_every_json_file_written_has_a_kind_and_a_version(written: dict[str, Path],
                                                          pytester: pytest.Pytester) -> None:
    everything = sorted(p for p in pytester.path.rglob("*.json")
                        if not any(part.startswith(".") for part in p.relative_to(pytester.path).parts))
    assert set(written.values()) <= set(everything) and any(k.startswith("baseline:") for k in written)
    for path in everything:
        data = json.loads(path.read_text())
        assert isinstance(data.get("kind"), str) and data["kind"].startswith("charz-"), path
        assert isinstance(data.get("version"), int), path
    run = json.loads(written["run"].read_text())
    for case in run["cases"]:
        for record in (case, case["work"], case["measurement"], case["prediction"], case["verdict"]):
            assert record["kind"].startswith("charz-") and isinstance(record["version"], int)
    assert run["target"]["spec"]["kind"] == "charz-target-spec"


def _restamp(path: Path, **changes: object) -> str:
    data = json.loads(path.read_text())
    data.update(changes)
    text = json.dumps(data)
    path.write_text(text)
    return text


@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-something-else"}])
def test_a_run_of_another_version_or_kind_is_refused_naming_it(written: dict[str, Path], change: dict,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    profile_before = written["profile"].read_text()
    run_text = _restamp(written["run"], **change)
    capsys.readouterr()
    assert cli.main(["profile", str(written["run"]), "-o", "out"]) == 2
    assert str(written["run"]) in capsys.readouterr().err
    assert written["profile"].read_text() == profile_before and written["run"].read_text() == run_text
    assert cli.main(["calibrate", str(written["run"]), "--out", "out/calibration.json"]) == 2
    assert cli.main(["validate", str(written["run"]), "-o", "out"]) == 2


@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-run"}])
def test_a_profile_of_another_version_or_kind_is_refused_naming_it(written: dict[str, Path], change: dict,
                                                                   pytester: pytest.Pytester) -> None:
    text = _restamp(written["profile"], **change)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-profile={written['profile']}",
                                          f"--charz-out={pytester.path / 'again.json'}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    assert result.ret != 0
    assert str(written["profile"].name) in (result.stdout.str() + result.stderr.str())
    assert written["profile"].read_text() == text


@pytest.mark.parametrize("which", ["baseline", "calibration"])
@pytest.mark.parametrize("change", [{"version": 99}, {"kind": "charz-profile"}])
def test_a_baseline_or_calibration_of_another_version_or_kind_is_refused_naming_it(
        written: dict[str, Path], change: dict, which: str, pytester: pytest.Pytester) -> None:
    baseline = next(path for key, path in written.items() if key.startswith("baseline:"))
    if which == "calibration":  # where the judge looks for this target's calibration
        calibrated = baseline.parent / "calibration-opclass.json"  # the default model
        calibrated.write_text(written["calibration"].read_text())
        baseline = calibrated
    text = _restamp(baseline, **change)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--charz-out={pytester.path / 'again.json'}",
                                          f"--charz-baselines={pytester.path / 'baselines'}")
    assert result.ret != 0
    assert baseline.name in result.stdout.str() + result.stderr.str()
    assert baseline.read_text() == text
