"""The plugin contract, declared once (``pytest_prefalign/api.py``): every optional attribute of
a suite, a decoder or a reward method with its type, its default and a comment saying what it
means; read through ``api.declared`` alone, so that a plugin that does not subclass gets the same
defaults; docs/plugins.md's table of declarations generated from it; the policy score's rule
(``scored_by``); and the hooks typed.

The table of docs/plugins.md ("Every declaration, in one table") must be the one ``table()``
builds from api.py: a declaration added without its row fails here, and the message gives the
rows to paste.
"""

from __future__ import annotations

import ast
import re
import typing
from pathlib import Path

import numpy as np
import pytest

from pytest_prefalign import api, hookspec
from pytest_prefalign.api import Batch, CaseContext, Decoder, SuiteData, declared, policy_scores

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "pytest_prefalign" / "api.py"
PLUGINS_DOC = ROOT / "docs" / "plugins.md"
MARKER = "<!-- declarations: generated from pytest_prefalign/api.py"
# each declaring class of api.py, and the kind of plugin it declares for, as the docs name it
KINDS = {"SuiteDeclarations": "suite", "Decoder": "decoder", "RewardMethod": "reward method"}
PACKAGES = ("pytest_prefalign", "methods", "suites")


def declarations() -> list[tuple[str, str, str, str, str]]:
    """``(kind, attribute, type, default, meaning)`` of each optional attribute, in api.py's
    order, read from its source: the annotation without ``ClassVar``, the default as written,
    and the comment lines just above it."""
    source = API.read_text(encoding="utf-8")
    lines = source.splitlines()
    found = []
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.ClassDef) and node.name in KINDS):
            continue
        for statement in node.body:
            if not isinstance(statement, ast.AnnAssign) or statement.value is None:
                continue
            name = ast.get_source_segment(source, statement.target) or ""
            if name == "name":  # required of every plugin, not optional
                continue
            kind = ast.get_source_segment(source, statement.annotation) or ""
            kind = re.sub(r"^ClassVar\[(.*)\]$", r"\1", kind)
            default = ast.get_source_segment(source, statement.value) or ""
            comment: list[str] = []
            above = statement.lineno - 2
            while above >= 0 and lines[above].strip().startswith("#"):
                comment.insert(0, lines[above].strip().removeprefix("#").strip())
                above -= 1
            found.append((KINDS[node.name], name, kind, default, " ".join(comment)))
    return found


def cell(text: str) -> str:
    return text.replace("|", r"\|")


def table() -> list[str]:
    """docs/plugins.md's table of declarations, as api.py declares them."""
    rows = [
        "| kind | attribute | type | default | what it declares |",
        "|---|---|---|---|---|",
    ]
    for kind, name, annotation, default, meaning in declarations():
        meaning = cell(meaning.replace("``", "`"))
        rows.append(f"| {kind} | `{name}` | `{cell(annotation)}` | `{cell(default)}` | {meaning} |")
    return rows


def documented() -> list[str]:
    """The table under the marker in docs/plugins.md."""
    text = PLUGINS_DOC.read_text(encoding="utf-8")
    assert MARKER in text, f"docs/plugins.md has no line starting {MARKER!r}"
    after = text.split(MARKER, 1)[1].splitlines()[1:]
    return [line for line in after if line.startswith("|")]


def test_the_docs_table_is_generated_from_the_declarations():
    expected = table()
    assert documented() == expected, (
        "docs/plugins.md's table of declarations is not api.py's; the rows to paste under "
        "its marker:\n" + "\n".join(expected)
    )


def test_every_declaration_has_a_type_a_default_and_a_meaning():
    found = declarations()
    assert len(found) >= 20
    for kind, name, annotation, default, meaning in found:
        assert annotation and default, (kind, name)
        assert len(meaning.split()) >= 4, f"{kind} {name}: no comment above it says what it is"


def test_the_readers_table_is_the_sources():
    """``api.DECLARED``, what ``declared`` looks defaults up in, holds exactly the attributes
    the source declares, each with its declaring class's default."""
    found = {name: kind for kind, name, *_ in declarations()}
    assert set(api.DECLARED) == set(found)
    for name, owner in api.DECLARED.items():
        assert KINDS[owner.__name__] == found[name]


def test_a_plain_class_gets_every_declared_default():
    class Plain:
        pass

    class Own:
        order = 3
        in_default_methods = False

    for name, owner in api.DECLARED.items():
        assert declared(Plain, name) == vars(owner)[name], name
        assert declared(Plain(), name) == vars(owner)[name], name
    assert declared(Own, "order") == 3 and declared(Own, "in_default_methods") is False
    assert declared(Own, "default_reward") is None and declared(Own, "needs") == frozenset()
    with pytest.raises(KeyError, match="'ordre' is not an optional attribute declared in api.py"):
        declared(Own, "ordre")


def test_a_plain_suite_needs_a_data_folder_by_default():
    class Plain:
        pass

    class Maybe:
        @staticmethod
        def requires_data_dir(options):
            return options.get("source") != "hub"

    assert api.requires_data_dir(Plain(), {}) is True
    assert api.requires_data_dir(Maybe(), {"source": "hub"}) is False
    assert api.requires_data_dir(Maybe(), {}) is True


READ = re.compile(r"\b(?:getattr|hasattr)\(\s*[^,()]+,\s*[\"'](\w+)[\"']")
# reads of a namesake that is no plugin's attribute: the suite option ``writer`` of a
# ``suite.toml`` (the model the run's memory estimate counts), not the suite's ``writer`` method
NAMESAKES = {"pytest_prefalign/plumbing/preflight.py": ['getattr(typed, "writer"']}


def test_no_reader_goes_around_declared():
    """A declared attribute is read through ``api.declared``, never by a ``getattr`` (or a
    ``hasattr``) of its own that could hold another default."""
    bypasses = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for match in READ.finditer(text):
                where = path.relative_to(ROOT).as_posix()
                if match.group(1) in api.DECLARED and match.group(0) not in NAMESAKES.get(
                    where, []
                ):
                    line = text.count("\n", 0, match.start()) + 1
                    bypasses.append(f"{where}:{line}: {match.group(0)}")
    assert bypasses == []


def test_the_readers_pattern_sees_each_form():
    # the check above is only as good as its pattern
    for code in ('getattr(suite, "fetcher", None)', "getattr(e.obj, 'order', 100)"):
        assert READ.search(code)
    assert not READ.search("declared(suite, 'fetcher')")


# --------------------------------------------------------------------------------------------
# The policy score: loglik or logliks, by scored_by
# --------------------------------------------------------------------------------------------


def context(reduce: str = "sum") -> CaseContext:
    data = SuiteData("toy", "test", profiles={}, items=[])
    return CaseContext(lm=None, suite=None, data=data, reward=None, reduce=reduce)  # type: ignore[arg-type]


BATCH = Batch(["ann"], ["Write a title"], ["Cats"])
FIGURES = {"sum": np.array([-6.0]), "mean": np.array([-2.0])}


class Both(Decoder):
    name = "both"

    def loglik(self, ctx, batch):
        return FIGURES[ctx.reduce] - 100.0  # not the figures logliks gives: told apart

    def logliks(self, ctx, batch):
        return dict(FIGURES)


class OnlyLoglik(Decoder):
    name = "only_loglik"

    def loglik(self, ctx, batch):
        return FIGURES[ctx.reduce]


class Shifted(Both):
    """Redefines only ``loglik``: scored by it, not by its parent's ``logliks``."""

    name = "shifted"

    def loglik(self, ctx, batch):
        return FIGURES[ctx.reduce] + 1.0


class Inherits(Shifted):
    name = "inherits"


class Declares(Both):
    name = "declares"
    scored_by = "loglik"

    def logliks(self, ctx, batch):
        raise AssertionError("it declared loglik")


def test_scored_by_is_set_from_what_the_class_defines_itself():
    assert Decoder.scored_by is None
    assert Both.scored_by == "logliks"  # both defined in one class: logliks
    assert OnlyLoglik.scored_by == "loglik"
    assert Shifted.scored_by == "loglik" and Inherits.scored_by == "loglik"
    assert Declares.scored_by == "loglik"  # declared by hand: kept


@pytest.mark.parametrize(
    ("decoder", "shift"),
    [(Both(), 0.0), (OnlyLoglik(), 0.0), (Shifted(), 1.0), (Inherits(), 1.0), (Declares(), -100.0)],
)
def test_the_policy_score_comes_from_the_method_scored_by_names(decoder, shift):
    got = policy_scores(decoder, context(), BATCH)
    assert set(got) == set(api.REDUCTIONS)
    for how in api.REDUCTIONS:
        np.testing.assert_array_equal(got[how], FIGURES[how] + shift)


def test_the_default_loglik_and_logliks_defer_to_each_other():
    class FromLogliks(Decoder):
        name = "from_logliks"

        def logliks(self, ctx, batch):
            return dict(FIGURES)

    np.testing.assert_array_equal(FromLogliks().loglik(context("mean"), BATCH), FIGURES["mean"])
    both = OnlyLoglik().logliks(context(), BATCH)
    assert {how: list(v) for how, v in both.items()} == {"sum": [-6.0], "mean": [-2.0]}


def test_a_plain_decoder_names_the_method_it_defines():
    class Plain:
        name = "plain"
        scored_by = "loglik"

        def loglik(self, ctx, batch):
            return FIGURES[ctx.reduce]

    class Silent:
        name = "silent"

        def loglik(self, ctx, batch):
            return FIGURES[ctx.reduce]

    np.testing.assert_array_equal(policy_scores(Plain(), context(), BATCH)["mean"], [-2.0])  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="'silent' defines neither.*names the one it"):
        policy_scores(Silent(), context(), BATCH)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# The hooks
# --------------------------------------------------------------------------------------------

HOOKS = [name for name in vars(hookspec) if name.startswith("pytest_prefalign_")]


@pytest.mark.parametrize("hook", HOOKS)
def test_every_hook_is_typed_with_the_projects_own_types(hook):
    """No ``Any`` in a hook's signature, and every name in it resolves to a real type (those
    imported under ``TYPE_CHECKING`` too)."""
    from pytest_prefalign.analysis.catalogue import Metric
    from pytest_prefalign.registry import Registry
    from pytest_prefalign.runs.records import CaseResult, RunFile

    function = vars(hookspec)[hook]
    assert "Any" not in " ".join(map(str, function.__annotations__.values()))
    names = {"CaseResult": CaseResult, "RunFile": RunFile, "Metric": Metric, "Registry": Registry}
    hints = typing.get_type_hints(function, localns=names)
    assert set(hints) == set(function.__annotations__)
    assert len(HOOKS) == 5
