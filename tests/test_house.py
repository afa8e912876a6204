"""The shape of the code, checked from its own imports and files: no import circle, no import
that runs back up the layers, no module over 400 lines, ruff's lint and format clean, and
comments that cite the project's own docs.

The layers, lowest first (a module may import its own layer and the ones below):

0. foundation: errors, storage, cache, versions, events, bm25
1. the model runtime: runtime/
2. the interfaces plugins implement: api
3. names and places: registry, method options, hook specifications, data folders, fetching
4. run files: runs/
5. the analysis: analysis/ (metrics, statistics, catalogue, crisis, comparison, rendering)
6. the methods and suites: prefalign_methods, prefalign_suites
7. the evaluation of a case: evaluation/
8. the pytest plumbing: plumbing/
9. the entry points: plugin, cli
"""

from __future__ import annotations

import ast
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
}
LAYERS = [
    (
        "pytest_prefalign",
        "pytest_prefalign.errors",
        "pytest_prefalign.storage",
        "pytest_prefalign.cache",
        "pytest_prefalign.versions",
        "pytest_prefalign.bm25",
    ),
    ("pytest_prefalign.runtime",),
    ("pytest_prefalign.api",),
    (
        "pytest_prefalign.registry",
        "pytest_prefalign.method_options",
        "pytest_prefalign.hookspec",
        "pytest_prefalign.datadir",
        "pytest_prefalign.fetch",
        "pytest_prefalign.manifest",
    ),
    ("pytest_prefalign.runs",),
    ("pytest_prefalign.analysis",),
    ("prefalign_methods", "prefalign_suites"),
    ("pytest_prefalign.evaluation",),
    ("pytest_prefalign.plumbing",),
    ("pytest_prefalign.plugin", "pytest_prefalign.cli"),
]
MAX_LINES = 400


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


def layer(module: str) -> int:
    """The layer of a module: the longest prefix listed."""
    best, depth = -1, -1
    for n, names in enumerate(LAYERS):
        for name in names:
            if (module == name or module.startswith(name + ".")) and len(name) > depth:
                best, depth = n, len(name)
    if best < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return best


def resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str, path: Path) -> set[str]:
    """Every project module ``module`` imports, anywhere in the file (inside functions and
    under TYPE_CHECKING too: each is a dependency a reader must follow)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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
            target = resolve(name)
            if target and target != module and not module.startswith(target + "."):
                out.add(target)
    return out


GRAPH = {module: imports(module, path) for module, path in MODULES.items()}


def test_no_import_runs_back_up_the_layers() -> None:
    upward = sorted(
        f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
        for a, targets in GRAPH.items()
        for b in targets
        if layer(b) > layer(a)
    )
    assert upward == []


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


def test_no_module_over_the_size_limit() -> None:
    big = {
        module: n
        for module, path in MODULES.items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert big == {}


def test_comments_cite_the_projects_own_docs() -> None:
    """Nothing cites a file outside the repository (SPEC.md lives beside it, not in it)."""
    cited = [
        f"{module}"
        for module, path in MODULES.items()
        if "SPEC section" in path.read_text(encoding="utf-8")
        or "SPEC.md" in path.read_text(encoding="utf-8")
    ]
    assert cited == []


@pytest.mark.parametrize("args", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff_is_clean(args: list[str]) -> None:
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (pip install pytest-prefalign[dev])")
    out = subprocess.run([ruff, *args, "."], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
