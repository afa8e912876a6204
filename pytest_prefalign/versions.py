"""Versions of code and libraries, for cache keys: a value computed by code is keyed by the code
that computed it (docs/usage.md, "The cache").

``code_version`` hashes the syntax tree of a module and of every first-party module it imports
(type-checking imports left out; comments, docstrings and layout do not count), with the
installed versions of the third-party distributions those modules import: editing code, or
upgrading a library the code imports, changes it. ``function_version`` does the same for one
function. No heavy imports here.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import os
import sys
import textwrap
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from pytest_prefalign import storage
from pytest_prefalign.cache import PROCESS, Slot

FIRST_PARTY = ("pytest_prefalign", "prefalign_methods", "prefalign_suites")
# the key layout (cache) and this module's own workings are versioned by cache.SCHEMA
NOT_FOLLOWED = ("pytest_prefalign.cache", __name__)


# parsed syntax trees by (module, sha256 of its file), and import names -> distributions
_TREES = Slot("parsed code", dict[tuple[str, str], tuple[str, tuple[str, ...], tuple[str, ...]]])
_DISTRIBUTIONS = Slot("distributions", lambda: _distributions())
# installed distributions' versions by name, read once in the process (``library_versions``)
_INSTALLED = Slot("installed versions", dict[str, "str | None"])
# the same, as the last runs left them on disk, by (module, sha256, whether a package): a rerun
# parses none of the files it versions (68 parses took a seventh of a warm run's time)
_STORED = Slot("parsed code on disk", lambda: _read_stored())
# CPython 3.11's parser is not safe to run from two threads at once (``ast.parse``, which
# ``inspect.getsource`` also calls, can fail with "AST constructor recursion depth mismatch":
# python/cpython#106905), and loaders may version code from threads: one parse at a time
_PARSING = threading.Lock()


def code_version(obj: Any, *, extra_roots: Iterable[str] = ()) -> str:
    """A hash of the code behind ``obj`` (a class, function, instance or module): the syntax
    tree of its module and of every module it imports from the project's packages or from its
    own top-level package (type-checking imports left out), with the installed versions of the
    third-party distributions those modules import. Editing a comment or a docstring keeps the
    version; editing code, or upgrading a library the code imports, changes it."""
    name = _module_name(obj)
    roots = {*FIRST_PARTY, name.split(".")[0], *extra_roots}
    return _walk(name, _defining_file(obj) or _module_file(name, obj), roots)


def module_version(name: str) -> str:
    """``code_version`` of the module ``name``, found and read without importing it: a key
    computed before the code it names is needed (a model's fingerprint, before the model
    loads) does not pay for importing that code and its libraries."""
    path = _find_file(name)
    if path is None:
        raise ValueError(f"module_version: no Python source for the module {name!r}")
    return _walk(name, path, {*FIRST_PARTY, name.split(".")[0]})


def module_trees(*names: str) -> dict[str, str]:
    """The digest of the syntax tree of each module that ``module_version`` of ``names`` hashes
    (each of them and every first-party module they import), by module name: what tells which
    modules changed between two checkouts, where ``module_version`` says only that one did."""
    found: dict[str, str] = {}
    for name in names:
        path = _find_file(name)
        if path is None:
            raise ValueError(f"module_trees: no Python source for the module {name!r}")
        trees, _ = _reach(name, path, {*FIRST_PARTY, name.split(".")[0]})
        found.update(trees)
    return dict(sorted(found.items()))


def _walk(name: str, path: Path | None, roots: set[str]) -> str:
    """The hash of ``name``'s syntax tree (its file ``path``) and of every module it imports
    from ``roots``, with the versions of the third-party distributions they import."""
    trees, libraries = _reach(name, path, roots)
    versions = sorted(_versions(libraries))
    return storage.content_key("code", sorted(trees.items()), versions)


def _reach(name: str, path: Path | None, roots: set[str]) -> tuple[dict[str, str], set[str]]:
    """The digests of ``name``'s syntax tree and of every module it imports from ``roots``, by
    module, and the third-party top-level names they import."""
    trees: dict[str, str] = {}
    libraries: set[str] = set()
    todo = [(name, path)]
    while todo:
        name, path = todo.pop()
        if name in trees or path is None:
            continue
        digest, imported, third_party = _tree(path, name)
        trees[name] = digest
        libraries.update(third_party)
        for dep in imported:
            if dep.split(".")[0] in roots and dep not in trees and dep not in NOT_FOLLOWED:
                todo.append((dep, _find_file(dep)))
    return trees, libraries


def function_version(fn: Callable[..., Any]) -> str:
    """A hash of one function's syntax tree (docstring and comments left out): for a value that
    depends on a single function rather than on a whole module."""
    # a callable object (a test's stand-in converter, say) is versioned by its class
    target = fn if inspect.isfunction(fn) or inspect.isclass(fn) else type(fn)
    with _PARSING:
        tree = ast.parse(textwrap.dedent(inspect.getsource(target)))
    return storage.content_key("function", _dump(tree))


def library_versions(*names: str) -> dict[str, str | None]:
    """Installed versions of these distributions (None where one is missing), each read once
    in the process (``importlib.metadata.version`` parses the distribution's metadata file on
    every call: 1,131 calls, most of the keys' time in a warm rerun of the main job)."""
    known = PROCESS[_INSTALLED]
    for name in names:
        if name not in known:
            try:
                known[name] = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                known[name] = None
    return {name: known[name] for name in names}


def _module_name(obj: Any) -> str:
    if isinstance(obj, ModuleType):
        return obj.__name__
    return getattr(obj, "__module__", None) or type(obj).__module__


def _module_file(name: str, obj: Any) -> Path | None:
    """The source file of the module ``name``: the imported module's, or, where the module
    has left ``sys.modules`` while its classes live on (pytester's in-process runs restore
    ``sys.modules`` afterwards, keeping the attribute on the parent package), found without
    importing it."""
    module = obj if isinstance(obj, ModuleType) else sys.modules.get(name)
    if module is not None:
        return _file_of(module)
    path = _find_file(name)
    if path is None:
        raise ValueError(f"code_version: no source found for the module {name!r} of {obj!r}")
    return path


def _defining_file(obj: Any) -> Path | None:
    """The file that defines ``obj``, from its functions' code rather than from
    ``sys.modules[obj.__module__]``: every conftest outside a package is a module named
    ``conftest``, and ``sys.modules`` keeps only the last one pytest imported, so a method
    written in one conftest would be versioned by another. None for a module, or a class
    without a function of its own (its module's file is used)."""
    if isinstance(obj, ModuleType):
        return None
    target = obj if inspect.isfunction(obj) or inspect.isclass(obj) else type(obj)
    if inspect.isfunction(target):
        functions = [target]
    else:
        members = vars(target).values()
        functions = [getattr(m, "__func__", getattr(m, "fget", m)) for m in members]
    for member in functions:
        own = getattr(member, "__qualname__", "").startswith(f"{target.__qualname__}.")
        fn = inspect.unwrap(member) if inspect.isfunction(member) else member
        code = getattr(fn, "__code__", None)  # a decorated function's, its original's
        if code is not None and (own or member is target) and code.co_filename.endswith(".py"):
            return Path(code.co_filename)
    return None


def _file_of(module: ModuleType) -> Path | None:
    path = getattr(module, "__file__", None)
    return Path(path) if path and path.endswith(".py") else None


def _find_file(name: str) -> Path | None:
    module = sys.modules.get(name)
    if module is not None:
        return _file_of(module)
    spec = _spec(name)
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module ``name``, found without importing it or its parents:
    ``importlib.util.find_spec`` imports a dotted name's parent, and ``from a.b import c``
    names ``a.b.c``, which may be a function of ``a.b`` (``_imports``): looking it up would
    import ``a.b``, however heavy, only to find no module there."""
    module = sys.modules.get(name)
    if module is not None:
        return getattr(module, "__spec__", None)
    parent = name.rpartition(".")[0]
    try:
        if not parent:
            return importlib.util.find_spec(name)  # a top-level name: nothing to import
        owner = _spec(parent)
        locations = owner.submodule_search_locations if owner is not None else None
        if not locations:  # not a package: ``name`` is one of its attributes
            return None
        return importlib.machinery.PathFinder.find_spec(name, list(locations))
    except (ImportError, ValueError):
        return None


def _tree(path: Path, name: str) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """(digest of the syntax tree, modules it imports, third-party top-level names), memoised
    by the file's content, in the process and on disk (``_stored``)."""
    source = path.read_bytes()
    memo_key = (name, hashlib.sha256(source).hexdigest())
    trees = PROCESS[_TREES]
    if memo_key not in trees:
        is_package = path.name == "__init__.py"
        stored_key = f"{name}|{memo_key[1]}|{int(is_package)}"
        stored: Any = PROCESS[_STORED].get(stored_key)
        if _readable(stored):
            digest, imported, third_party = stored
            trees[memo_key] = (digest, tuple(imported), tuple(third_party))
            return trees[memo_key]
        with _PARSING:
            tree = ast.parse(source, filename=str(path))
        imported = tuple(sorted(set(_imports(tree, name, is_package))))
        stdlib = sys.stdlib_module_names
        third_party = tuple(
            sorted(
                {m.split(".")[0] for m in imported}
                - set(stdlib)
                - set(FIRST_PARTY)
                - {name.split(".")[0]}
            )
        )
        trees[memo_key] = (storage.content_key(_dump(tree)), imported, third_party)
        _store(stored_key, trees[memo_key])
    return trees[memo_key]


def _stored_path() -> Path:
    """The file of parsed trees kept on disk, one per parser: Python's version (its syntax
    trees differ) and this module's code (what a tree is reduced to)."""
    this = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    parser = storage.content_key(list(sys.version_info[:2]), this)
    return storage.cache_dir("code") / f"trees-{parser}.json"


def _read_stored() -> dict[str, Any]:
    try:
        found = storage.read_json(_stored_path())
    except (OSError, ValueError):  # none yet, or a file that cannot be read: parse again
        return {}
    return found if isinstance(found, dict) else {}


def _readable(entry: Any) -> bool:
    return (
        isinstance(entry, list)
        and len(entry) == 3
        and isinstance(entry[0], str)
        and all(_names(part) for part in entry[1:])
    )


def _names(part: Any) -> bool:
    return isinstance(part, list) and all(isinstance(m, str) for m in part)


def _store(key: str, tree: tuple[str, tuple[str, ...], tuple[str, ...]]) -> None:
    """Add a parsed tree to the file on disk (under its lock: xdist workers share it)."""
    entry = [tree[0], list(tree[1]), list(tree[2])]
    PROCESS[_STORED][key] = entry
    path = _stored_path()
    try:
        with storage.locked(path):
            known = _read_stored()
            known[key] = entry
            storage.atomic_write_json(path, known)
    except OSError:  # a cache that cannot be written: the process's memo still has it
        pass


def _dump(tree: ast.AST) -> str:
    """The tree without docstrings and without positions: what the code does, not how it is
    laid out or documented."""
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _imports(tree: ast.AST, name: str, is_package: bool) -> Iterator[str]:
    """Every module ``import`` names, anywhere in the file (imports inside functions run too),
    except under ``if TYPE_CHECKING:``; ``from a import b`` gives ``a`` and ``a.b``."""
    package = name if is_package else name.rpartition(".")[0]
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _runtime_nodes(node: ast.AST) -> Iterator[ast.AST]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child.test):
            yield from (n for stmt in child.orelse for n in [stmt, *_runtime_nodes(stmt)])
            continue
        yield child
        yield from _runtime_nodes(child)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _versions(top_level: Iterable[str]) -> Iterator[tuple[str, str | None]]:
    distributions = PROCESS[_DISTRIBUTIONS]
    for name in top_level:
        for dist in distributions.get(name, []):
            yield from library_versions(dist).items()


def _distributions() -> dict[str, list[str]]:
    """``importlib.metadata.packages_distributions()`` (import names -> the distributions that
    provide them), kept on disk under a key of every distribution installed on ``sys.path`` (the
    names of their metadata folders, versions included): reading every installed
    distribution's files took a tenth of a warm rerun."""
    installed = sorted(
        str(Path(entry) / name)
        for entry in sys.path
        if entry and Path(entry).is_dir()
        for name in _listing(Path(entry))
        if name.endswith((".dist-info", ".egg-info"))
    )
    path = storage.cache_dir("code") / f"distributions-{storage.content_key(installed)}.json"
    return storage.kept_json(
        path,
        lambda: {k: list(v) for k, v in importlib.metadata.packages_distributions().items()},
        lambda found: isinstance(found, dict) and all(_names(v) for v in found.values()),
    )


def _listing(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []
