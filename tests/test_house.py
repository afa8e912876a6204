"""The shape of the code, checked from its own imports and files: every module placed in a
layer by name, no import circle, no import that runs back up the layers, the core importing no
plugin, every module saying what it is for, ruff's lint and format clean, and comments that cite
the project's own docs.

The layers, lowest first (a module may import its own layer and the ones below):

0. foundation: errors, storage, cache, versions, events, bm25, portable
1. the model runtime: runtime/
2. the interfaces plugins implement: api
3. names and places: registry, method and suite options, hook specifications, data folders,
   fetching
4. run files: runs/
5. the analysis: analysis/ (metrics, statistics, catalogue, crisis, comparison, rendering)
6. the methods and suites: prefalign_methods, prefalign_suites
7. the evaluation of a case: evaluation/
8. the pytest plumbing: plumbing/
9. the entry points: plugin, cli
10. the benchmarks: benchmarks/ (scripts; nothing imports them)

The hook specifications may name a higher layer's types in imports under ``if TYPE_CHECKING:``
(annotations only: ``ANNOTATIONS_FROM_ABOVE``); every other import counts as it stands.

Each module of the package's top level is named; a folder is named as a whole (``NAME.*``: the
folder is the layer). A module that no name places fails ``test_every_module_is_placed`` until
it is added to ``LAYERS``; there is no layer for the rest.

There is no cap on a module's length: a module is split where it holds two responsibilities,
not where it passes a count, and nothing is compressed to meet one (docs/architecture.md, "How
a module is split").
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "pytest_prefalign": "pytest_prefalign",
    "prefalign_methods": "methods",
    "prefalign_suites": "suites",
    "benchmarks": "benchmarks",  # scripts, each run with its own folder on the path
}
CORE = "pytest_prefalign"
PLUGINS = ("prefalign_methods", "prefalign_suites")  # the built-ins, registered as any plugin
# (title, the modules it holds: a module by name, a folder as NAME.*), lowest first
LAYERS = [
    (
        "foundation",
        (
            "pytest_prefalign",
            "pytest_prefalign.errors",
            "pytest_prefalign.storage",
            "pytest_prefalign.cache",
            "pytest_prefalign.versions",
            "pytest_prefalign.events",
            "pytest_prefalign.bm25",
            "pytest_prefalign.portable",
        ),
    ),
    ("model runtime", ("pytest_prefalign.runtime.*",)),
    ("interfaces", ("pytest_prefalign.api",)),
    (
        "names and places",
        (
            "pytest_prefalign.registry",
            "pytest_prefalign.method_options",
            "pytest_prefalign.suite_options",
            "pytest_prefalign.hookspec",
            "pytest_prefalign.datadir",
            "pytest_prefalign.inifile",
            "pytest_prefalign.fetch",
            "pytest_prefalign.manifest",
        ),
    ),
    ("run files", ("pytest_prefalign.runs.*",)),
    ("analysis", ("pytest_prefalign.analysis.*",)),
    ("methods and suites", ("prefalign_methods.*", "prefalign_suites.*")),
    ("evaluation", ("pytest_prefalign.evaluation.*",)),
    ("pytest plumbing", ("pytest_prefalign.plumbing.*",)),
    ("entry points", ("pytest_prefalign.plugin", "pytest_prefalign.cli")),
    ("benchmarks", ("benchmarks.*",)),
]


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def places(name: str, module: str) -> bool:
    """Whether a name of ``LAYERS`` places ``module``: the module itself, or ``NAME.*`` its
    folder (the package and everything in it)."""
    if name.endswith(".*"):
        folder = name[:-2]
        return module == folder or module.startswith(folder + ".")
    return module == name


def placed(module: str) -> list[int]:
    """The layers whose names place ``module`` (exactly one, for a module in its place)."""
    return [n for n, (_, names) in enumerate(LAYERS) if any(places(x, module) for x in names)]


def layer(module: str) -> int:
    found = placed(module)
    if len(found) != 1:
        raise AssertionError(f"{module} is in layers {found}: place it once in LAYERS")
    return found[0]


def resolve(name: str, importer: str = "") -> str | None:
    """The project module an import names; a benchmark's bare ``import peak_memory`` is its
    sibling script (the script's folder is on its path)."""
    if importer.startswith("benchmarks.") and f"benchmarks.{name.split('.')[0]}" in MODULES:
        name = f"benchmarks.{name}"
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


class _WithoutTypeChecking(ast.NodeTransformer):
    """A syntax tree without its ``if TYPE_CHECKING:`` blocks (their ``else`` kept)."""

    def visit_If(self, node: ast.If) -> ast.AST | list[ast.stmt]:
        if isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return [self.visit(n) for n in node.orelse]
        return self.generic_visit(node)


def imports(module: str, path: Path, *, type_checking: bool = True) -> set[str]:
    """Every project module ``module`` imports, anywhere in the file (inside functions and
    under TYPE_CHECKING too: each is a dependency a reader must follow); with
    ``type_checking=False``, those it imports when it runs (``if TYPE_CHECKING:`` left out)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if not type_checking:
        tree = _WithoutTypeChecking().visit(tree)
    out = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(p for p in (*up, base) if p)
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        for name in names:
            target = resolve(name, module)
            if target and target != module and not module.startswith(target + "."):
                out.add(target)
    return out


GRAPH = {module: imports(module, path) for module, path in MODULES.items()}
# The modules whose annotations may name a higher layer, imported under ``if TYPE_CHECKING:``
# only: the hook specifications name the records their hooks pass (the run file's, the
# catalogue's ``Metric``), and pytest loads them on every run. Those imports still count for
# import circles.
ANNOTATIONS_FROM_ABOVE = {"pytest_prefalign.hookspec"}


def test_every_module_is_placed() -> None:
    """A new module fails here until ``LAYERS`` names it (or the folder it is in)."""
    unplaced = sorted(f"{m}: layers {placed(m)}" for m in MODULES if len(placed(m)) != 1)
    assert unplaced == []


def test_every_name_in_the_layers_is_a_module() -> None:
    """No name left behind by a module that moved or went."""
    stale = [x for _, names in LAYERS for x in names if not any(places(x, m) for m in MODULES)]
    assert stale == []


def test_no_import_runs_back_up_the_layers() -> None:
    running = {m: imports(m, MODULES[m], type_checking=False) for m in ANNOTATIONS_FROM_ABOVE}
    upward = sorted(
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
        for a, targets in GRAPH.items()
        for b in running.get(a, targets)
        if layer(b) > layer(a)
    )
    assert upward == []


def test_annotations_from_above_are_imported_for_annotations_only() -> None:
    """The exception above sees an import under ``TYPE_CHECKING`` and no other."""
    hookspec = "pytest_prefalign.hookspec"
    running = imports(hookspec, MODULES[hookspec], type_checking=False)
    assert "pytest_prefalign.runs.records" in GRAPH[hookspec]
    assert "pytest_prefalign.runs.records" not in running
    assert all(layer(b) <= layer(hookspec) for b in running)


def test_no_import_circle() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_core_imports_no_plugin() -> None:
    """The built-in methods and suites are plugins like any other: the core reaches them
    through the registry (their entry points), never by import."""
    core = sorted(
        f"{a} imports {b}"
        for a, targets in GRAPH.items()
        if a == CORE or a.startswith(CORE + ".")
        for b in targets
        if b.split(".")[0] in PLUGINS
    )
    assert core == []


def test_every_module_says_what_it_is_for() -> None:
    """A module opens with a docstring naming its one responsibility: what a reader needs to
    find it, and what tells the next change whether it belongs there or in a module of its
    own. A package's empty ``__init__.py`` says nothing."""
    silent = [
        module
        for module, path in MODULES.items()
        if (tree := ast.parse(path.read_text(encoding="utf-8"))).body
        and not (ast.get_docstring(tree) or "").strip()
    ]
    assert silent == []


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def layer_table() -> dict[int, str]:
    """docs/architecture.md's layer table: each row's text by its layer's number."""
    rows = {}
    for line in ARCHITECTURE.read_text(encoding="utf-8").splitlines():
        found = re.match(r"\| (\d+)\. [^|]+ \|", line)
        if found:
            rows[int(found[1])] = line
    return rows


def named_in(row: str, module: str, path: Path) -> bool:
    """Whether a row of the layer table names ``module``: a module of the package by its file
    (```quiet.py``` or ```runtime/quiet.py```), a plugin's or a benchmark's by its folder
    (```suites/```, ```methods/decoders/```), as the table places those as folders."""
    if module.startswith(CORE + "."):
        return re.search(r"[`/]" + re.escape(path.name) + "`", row) is not None
    folder = path.relative_to(ROOT).parts
    return any(f"`{'/'.join(folder[:n])}/`" in row for n in range(1, len(folder)))


def test_every_module_is_in_the_docs_layer_table() -> None:
    """The table a newcomer reads names each module in the row of its layer (``LAYERS``), so
    it cannot fall behind the code: a module added, moved or renamed fails here until the
    table says where it is and what it does."""
    rows = layer_table()
    assert sorted(rows) == list(range(len(LAYERS)))
    missing = sorted(
        f"{module} (layer {layer(module)}: {LAYERS[layer(module)][0]})"
        for module, path in MODULES.items()
        if path.name != "__init__.py" and not named_in(rows[layer(module)], module, path)
    )
    assert missing == []


def cites_outside(text: str) -> bool:
    """Whether ``text`` cites the specification that lives beside the repository, not in it."""
    return re.search(r"\bSPEC(\.md\b|, | section)", text) is not None


def test_comments_cite_the_projects_own_docs() -> None:
    """Nothing cites a file outside the repository (SPEC.md lives beside it, not in it): not
    the code, not the docs, not the install script."""
    shown = [ROOT / "README.md", ROOT / "install.sh", *sorted((ROOT / "docs").glob("*.md"))]
    cited = [
        str(path.relative_to(ROOT))
        for path in [*MODULES.values(), *shown]
        if cites_outside(path.read_text(encoding="utf-8"))
    ]
    assert cited == []
    assert cites_outside("(SPEC.md section 7)") and cites_outside('(SPEC, "Working points")')
    assert not cites_outside("SPECIALS = [UNK, PAD]")


# the packages whose private names (a leading ``_``, not a dunder) are off limits
OFF_LIMITS = ("_pytest", "pytest", "xdist")


def is_private(name: str) -> bool:
    """``_tw``, ``_split_scope``; not a dunder, not ``_`` alone."""
    return name.startswith("_") and name != "_" and not (name[:2] == name[-2:] == "__")


def defined_privates(tree: ast.AST, theirs: bool = False) -> set[str]:
    """The private names ``tree`` defines: its private functions, methods and classes, the
    private attributes it sets on ``self`` or ``cls``, and its private module and class
    level names; with ``theirs``, not those of a class derived from pytest's or xdist's (what
    such a class defines may be theirs, overridden)."""
    skip = imported_from_pytest(tree) if theirs else set()
    found = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.ClassDef) and derives_from(node, skip):
            continue
        stack += ast.iter_child_nodes(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if on_self(node):
                found.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.add(node.id)
    return {name for name in found if is_private(name)}


@functools.cache
def pytests_privates() -> frozenset[str]:
    """Every private name pytest and pytest-xdist define (``_tw``, ``_fixturemanager``,
    ``_split_scope``, ...), read from their installed sources."""
    found: set[str] = set()
    for package in OFF_LIMITS:
        spec = importlib.util.find_spec(package)
        for folder in (spec and spec.submodule_search_locations) or []:
            for path in Path(folder).rglob("*.py"):
                found |= defined_privates(ast.parse(path.read_text(encoding="utf-8")))
    return frozenset(found)


def off_limits(module: str) -> bool:
    return module.split(".")[0] in OFF_LIMITS


def imported_from_pytest(tree: ast.AST) -> set[str]:
    """The names ``tree`` binds to pytest's or xdist's modules and objects (``pytest``,
    ``LoadScopeScheduling``, ...)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if off_limits(a.name)}
        elif isinstance(node, ast.ImportFrom) and not node.level and off_limits(node.module or ""):
            names |= {a.asname or a.name for a in node.names}
    return names


def private_pytest_uses(tree: ast.AST, own: set[str] | frozenset[str] = frozenset()) -> list[str]:
    """What in ``tree`` reaches into pytest's or pytest-xdist's internals: an import of
    ``_pytest``, of a private module or a private name of ``pytest`` or ``xdist``; an attribute
    that is one of their private names (``tr._tw``, ``session._fixturemanager``) and none of
    ``own`` (the project's own private names; ``self`` and ``cls`` are the project's own); in a
    class derived from one of theirs, a private method of theirs overridden (``_split_scope``)
    or their private attribute on ``self``; and any of these named in a string
    (``getattr(tr, "_tw")``, ``import_module("_pytest._io")``). In the order of the lines."""
    theirs = pytests_privates() - own
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            found += [
                (line, f"import {a.name}")
                for a in node.names
                if off_limits(a.name) and any(map(is_private, a.name.split(".")))
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level and off_limits(node.module or ""):
            module = node.module or ""
            if any(map(is_private, module.split("."))):
                found.append((line, f"from {module} import ..."))
            found += [
                (line, f"from {module} import {a.name}") for a in node.names if is_private(a.name)
            ]
        elif isinstance(node, ast.Attribute) and node.attr in theirs and not on_self(node):
            found.append((line, f".{node.attr}"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in theirs or node.value.split(".")[0] == "_pytest":
                found.append((line, repr(node.value)))
        elif isinstance(node, ast.ClassDef) and derives_from(node, imported_from_pytest(tree)):
            found += [(line, f"{node.name} overrides {x}") for x in method_names(node) & theirs]
            found += [(line, f"{node.name} uses self.{x}") for x in self_attributes(node) & theirs]
    return [f"line {line}: {what}" for line, what in sorted(found)]


def on_self(node: ast.Attribute) -> bool:
    return isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")


def derives_from(cls: ast.ClassDef, names: set[str]) -> bool:
    """Whether a base of ``cls`` is one of ``names``, or an attribute of one."""
    for base in cls.bases:
        while isinstance(base, ast.Attribute):
            base = base.value
        if isinstance(base, ast.Name) and base.id in names:
            return True
    return False


def method_names(cls: ast.ClassDef) -> set[str]:
    return {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def self_attributes(cls: ast.ClassDef) -> set[str]:
    return {
        node.attr
        for node in ast.walk(cls)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def test_only_pytests_public_api() -> None:
    """pytest's and pytest-xdist's public API only, in the package, the built-in methods and
    suites and the benchmarks: a release may change their internals (``_pytest``, the
    reporter's ``_tw``, a scheduler's ``_split_scope``) without notice. (The tests may reach
    in, to check what pytest does.)"""
    trees = {
        module: ast.parse(path.read_text(encoding="utf-8")) for module, path in MODULES.items()
    }
    own = set().union(*(defined_privates(tree, theirs=True) for tree in trees.values()))
    uses = {
        module: found for module, tree in trees.items() if (found := private_pytest_uses(tree, own))
    }
    assert uses == {}


def test_pytests_private_names_are_read_from_its_sources() -> None:
    names = pytests_privates()
    assert {"_tw", "_fixturemanager", "_split_scope", "_obj"} <= names
    assert not {"__init__", "_", "Item", "nodeid"} & names


def test_the_private_api_check_sees_each_form() -> None:
    """The check above is no formality: each way in is caught, and a name like a helper
    called ``_pytest`` is not (only an import or a string naming the package is), nor a
    private name the project defines itself."""
    code = (
        "import _pytest._io\n"
        "from _pytest.config.findpaths import locate_config\n"
        "from xdist._path import visit_path\n"
        "from pytest import _fillfuncargs\n"
        "import pytest\n"
        "width = tr._tw.fullwidth\n"
        "writer = getattr(tr, '_tw')\n"
        "fixtures = session._fixturemanager\n"
        "def _pytest(args): return args\n"
        "_pytest([])\n"
        "lm._store.clear()\n"
        "from xdist.scheduler import LoadScopeScheduling\n"
        "class Groups(LoadScopeScheduling):\n"
        "    def _split_scope(self, nodeid): return self._own(nodeid)\n"
        "    def _own(self, nodeid): return nodeid\n"
        "class Host(pytest.Item):\n"
        "    def runtest(self): return self._obj\n"
        "class Plain:\n"
        "    def _split_scope(self, nodeid): return self._obj\n"
    )
    found = private_pytest_uses(ast.parse(code), own={"_store"})
    assert [line.split(": ", 1)[1] for line in found] == [
        "import _pytest._io",
        "from _pytest.config.findpaths import ...",
        "from xdist._path import ...",
        "from pytest import _fillfuncargs",
        "._tw",
        "'_tw'",
        "._fixturemanager",
        "Groups overrides _split_scope",
        "Host uses self._obj",
    ]


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(args: list[str]) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install pytest-prefalign[dev])")
    out = subprocess.run([ruff, *args, "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow  # a minute of type checking; the minimum versions' stubs differ
def test_mypy_is_clean(tmp_path: Path) -> None:
    """The package type-checks as ``pyproject.toml``'s ``[tool.mypy]`` sets it: a record read
    or written by the wrong type, or a figure that may be None used as a number, fails here."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install pytest-prefalign[dev])")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "pytest_prefalign", "--cache-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
