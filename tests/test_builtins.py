"""The built-ins are a list of ``"module:attr"`` targets in the registry (``registry.BUILTINS``),
found without installed metadata: each line names what it registers, a target is imported when
its entry is first used, and a new built-in is its module and one line, with no reinstall."""

from __future__ import annotations

import sys
import textwrap

import pytest
import test_plugin as toy_project
from test_plugin import imported_heavy, run

from pytest_prefalign import hookspec, registry
from pytest_prefalign.api import INDEPENDENT_JUDGE, Decoder, RewardMethod
from pytest_prefalign.registry import BUILTINS, Registry, Target, add_builtins

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy


def test_every_line_registers_what_it_names():
    found = Registry()
    add_builtins(found)
    tables = {"decoder": found.decoders, "reward": found.rewards, "suite": found.suites}
    tables["judge"] = found.judges
    assert sum(map(len, tables.values())) == len(BUILTINS)  # no name twice
    for kind, name, target in BUILTINS:
        entry = tables[kind][name]
        assert entry.builtin and entry.origin == target.partition(":")[0]
        assert entry.package == registry.DISTRIBUTION
        obj = entry.obj
        if kind == "decoder":
            assert issubclass(obj, Decoder) and obj.name == name
        elif kind == "reward":
            assert issubclass(obj, RewardMethod) and obj.name == name
        elif kind == "suite":
            assert obj.name == name and entry.obj is obj  # made once
        else:
            assert name == INDEPENDENT_JUDGE and callable(obj.fit)
    with pytest.raises(registry.UnknownName, match="no built-in named nothing"):
        add_builtins(Registry(), "nothing")


def test_a_target_is_imported_when_first_used(tmp_path, monkeypatch):
    tmp_path.joinpath("late_method.py").write_text(
        textwrap.dedent("""
        class Late:
            name = "late"
            capabilities = frozenset()


        class LateSuite:
            name = "late_suite"
        """)
    )
    monkeypatch.syspath_prepend(tmp_path)
    found = Registry()
    found.add_reward("late", "late_method:Late")
    found.add_suite("late_method:LateSuite", "late_suite")
    entry = found.reward("late")
    assert entry.origin == "late_method" and "late_method" not in sys.modules
    assert entry.obj.__name__ == "Late" and "late_method" in sys.modules
    suite = found.suite("late_suite")  # a suite's class is made once
    assert type(suite).__name__ == "LateSuite" and found.suite("late_suite") is suite
    monkeypatch.delitem(sys.modules, "late_method")
    found.add_decoder("gone", "late_method:Gone")  # a target that cannot be resolved
    with pytest.raises(registry.UnknownName, match="'gone' is not available: its target "):
        _ = found.decoder("gone").obj
    with pytest.raises(ValueError, match="expected 'module:attr'"):
        Target("late_method.Late")
    with pytest.raises(ValueError, match="a target needs the suite's name"):
        found.add_suite("late_method:LateSuite")


def test_listing_imports_no_suite(tmp_path):
    # a suite is read only when collected: its entry's target is not imported to list it
    code = (
        "import sys; from pytest_prefalign import cli; assert cli.main(['list']) == 0; "
        "assert not [m for m in sys.modules if m.startswith('prefalign_suites.pref_lamp')]"
    )
    assert imported_heavy(code, tmp_path) == []


ECHO = '''
"""A decoder that writes each item's input back: the new built-in of the test."""

from pytest_prefalign.api import Decoder


class EchoDecoder(Decoder):
    name = "echo"
    policy = False  # writes without a model: no policy accuracy

    def generate(self, ctx, items):
        return [it.input for it in items]
'''


def test_a_new_built_in_decoder_is_one_file_and_one_line(toy, monkeypatch):
    toy.makepyfile(echo_decoder=ECHO)  # the file
    line = ("decoder", "echo", "echo_decoder:EchoDecoder")  # the line of BUILTINS
    monkeypatch.setattr(registry, "BUILTINS", (*registry.BUILTINS, line))
    monkeypatch.syspath_prepend(toy.path)
    assert not list(toy.path.rglob("*.dist-info"))  # nothing installed, no metadata read
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base,echo")
    result.assert_outcomes(passed=2)
    leaderboard = result.stdout.str().split("prefalign leaderboard")[1]
    assert any(row.split()[1:2] == ["echo"] for row in leaderboard.splitlines() if row.strip())


def test_entry_points_of_an_install_from_before_the_list_are_left_to_it(monkeypatch):
    # metadata written before the built-ins left setup.cfg still names their modules: the list
    # registers them, and such an entry point is neither loaded again nor a failure
    from importlib.metadata import EntryPoint

    stale = EntryPoint("base", "prefalign_methods.decoders.base", registry.GROUP)
    monkeypatch.setattr(registry.metadata, "entry_points", lambda group: [stale])
    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    found = registry.load(manager)
    assert found.failures == [] and found.conflicts == [] and found.overrides == []
    assert found.decoder("base").builtin
    assert not [name for name, _ in manager.list_name_plugin() if name.startswith("prefalign-")]
