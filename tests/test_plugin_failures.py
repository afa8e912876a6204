"""Third-party plugins never fail silently: an entry point that cannot be imported is a warning
(or, with --prefalign-strict-plugins, a usage error) and its import error is the answer when
its method is asked for; two packages registering one name is a usage error naming both; and
each row of the run file records the reward method's fingerprint, package and version. The
installed packages are fake distributions (a ``*.dist-info`` folder and a module) on a folder
put on ``sys.path``; the toy project is tests/test_plugin.py's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import test_plugin as toy_project
from test_plugin import run

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy

SCORE_ONLY = """
import numpy as np
from pytest_prefalign.api import RewardMethod


class {cls}(RewardMethod):
    name = "{name}"
    capabilities = frozenset()

    def fingerprint(self):
        return "{name}-v3"

    def fit(self, lm, pairs, cache_dir):
        pass

    def score(self, lm, batch):
        return np.array([-float(len(r)) for r in batch.responses])


def pytest_prefalign_register(registry):
    registry.add_reward("{name}", {cls})
"""


def install(site: Path, dist: str, version: str, module: str, source: str, ep: str = "") -> None:
    """A distribution ``dist`` ``version`` with a ``prefalign`` entry point ``ep`` (default:
    the module's name) pointing at ``module``, whose code is ``source``."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    )
    info.joinpath("entry_points.txt").write_text(f"[prefalign]\n{ep or module} = {module}\n")
    info.joinpath("top_level.txt").write_text(f"{module}\n")
    site.joinpath(f"{module}.py").write_text(textwrap.dedent(source))


BROKEN = """
import numpy as np
import a_dependency_that_is_not_installed  # the plugin's own bug

def pytest_prefalign_register(registry):
    pass
"""


@pytest.fixture
def broken(toy: pytest.Pytester) -> pytest.Pytester:
    """A package ``brokenrm`` 0.1 whose entry point fails to import."""
    install(toy.path / "site", "brokenrm", "0.1", "brokenrm", BROKEN)
    toy.syspathinsert(toy.path / "site")
    return toy


def test_a_plugin_that_fails_to_import_is_a_warning(broken):
    result = run(broken, "--prefalign", "toy", "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "*PrefalignWarning: prefalign: could not load entry point 'brokenrm' (brokenrm, from "
            "brokenrm): ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'",
            "*prefalign: could not load entry point 'brokenrm'*",
            "*1 passed, * warning*",
        ]
    )


def test_asking_for_its_method_shows_the_import_error(broken):
    result = run(broken, "--prefalign", "toy", "--prefalign-methods", "bon[brokenrm]")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--prefalign-methods: reward method 'brokenrm' is not available: its plugin failed "
            "to load: entry point 'brokenrm' (brokenrm, from brokenrm): ModuleNotFoundError: No "
            "module named 'a_dependency_that_is_not_installed'",
            "Traceback (most recent call last):",
            '*site/brokenrm.py", line 3, in <module>',
            "*import a_dependency_that_is_not_installed*",
            "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'",
            "(available: arm, global_bt, global_bt_minilm, hier_bt, history_bt, lore, oracle, "
            "oracle_negated, oracle_noise1, oracle_noise4, oracle_noise8, oracle_noisy, pal, "
            "per_user_bt, per_user_bt_minilm, pref, profile_bm25, profile_impostors, "
            "profile_minilm, profile_overlap, vpl)",
        ]
    )


def test_strict_plugins_stop_the_run(broken):
    result = run(broken, "--prefalign", "toy", "--prefalign-strict-plugins")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*prefalign: a plugin failed to load (--prefalign-strict-plugins):",
            "entry point 'brokenrm' (brokenrm, from brokenrm): ModuleNotFoundError*",
            "Traceback (most recent call last):",
        ]
    )
    ini = (broken.path / "tox.ini").read_text()  # pytester strips the final newline
    broken.makeini(ini + "\nprefalign_strict_plugins = true\n")
    assert run(broken, "--prefalign", "toy").ret == pytest.ExitCode.USAGE_ERROR


def test_two_packages_registering_one_name_is_a_usage_error(toy):
    site = toy.path / "site"
    install(site, "pkg-a", "0.1", "pkga", SCORE_ONLY.format(cls="A", name="myrm"))
    install(site, "pkg-b", "2.0", "pkgb", SCORE_ONLY.format(cls="B", name="myrm"))
    toy.syspathinsert(site)
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*prefalign: reward method 'myrm' is registered twice: by pkg-a 0.1 (pkga) and by "
            "pkg-b 2.0 (pkgb); uninstall one, or register one under another name"
        ]
    )


def test_overriding_a_built_in_is_allowed(toy):
    install(toy.path / "site", "my-lore", "1.0", "mylore", SCORE_ONLY.format(cls="L", name="lore"))
    toy.syspathinsert(toy.path / "site")
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "bon[lore]")
    result.assert_outcomes(passed=1)


def test_the_run_file_records_the_reward_methods_provenance(toy):
    install(toy.path / "site", "goodrm", "0.3", "goodrm", SCORE_ONLY.format(cls="G", name="goodrm"))
    toy.syspathinsert(toy.path / "site")
    toy.makepyfile(localrm=SCORE_ONLY.format(cls="Local", name="localrm"))
    toy.syspathinsert()
    methods = "base,bon[goodrm],bon[localrm]"
    result = run(
        toy, "--prefalign", "toy", "-p", "localrm", "--prefalign-methods", methods,
        "--prefalign-json", "out.json",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    run_file = json.loads((toy.path / "out.json").read_text())
    assert run_file["version"] == 3
    rows = {r["method"]: r for r in run_file["results"]}
    provenance = {
        m: (r["reward_fingerprint"], r["reward_package"], r["reward_version"])
        for m, r in rows.items()
    }
    assert provenance == {
        "base": (None, None, None),
        "bon[goodrm]": ("goodrm-v3", "goodrm", "0.3"),
        "bon[localrm]": ("localrm-v3", None, None),  # a -p module of no package
    }
    base = rows["base"]
    assert set(base["environment"]) == {
        "pytest-prefalign", "python", "torch", "transformers", "device", "dtype", "linear"
    }  # fmt: skip
    assert (base["environment"]["device"], base["environment"]["dtype"]) == ("cpu", "float32")
    from pytest_prefalign.runtime import kernels, packed

    dense = os.environ.get(packed.ENV, "").strip() == "0" or not kernels.available()
    kernel = packed.DENSE if dense else packed.ONEDNN
    assert base["environment"]["linear"] == kernel
    assert set(base["data"]["fingerprint"]) == {
        "all", "test_pairs", "items", "train_pairs", "profiles"
    }  # fmt: skip
    assert base["model"]["weights"] and base["model"]["fingerprint"]
    # every row of a (suite, size) was computed on the same data; each record has its digest
    assert len({json.dumps(r["data"]["fingerprint"]) for r in rows.values()}) == 1
    assert all(p["digest"] for p in run_file["pairs"] + run_file["items"])


def test_prefalign_list_names_each_package_and_the_failures(toy):
    site = toy.path / "site"
    install(site, "goodrm", "0.3", "goodrm", SCORE_ONLY.format(cls="G", name="goodrm"))
    install(site, "brokenrm", "0.1", "brokenrm", BROKEN)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
    }
    prefalign = str(Path(sys.executable).with_name("prefalign"))
    out = subprocess.run([prefalign, "list"], env=env, capture_output=True, text=True)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    words = [" ".join(line.split()) for line in lines]  # the columns' padding aside
    assert "goodrm goodrm 0.3 (goodrm); capabilities: -" in words
    assert any(line.startswith("lore pytest-prefalign ") for line in words)
    assert any(line.startswith("bon pytest-prefalign ") for line in words)
    assert any(line.startswith("pref_lamp pytest-prefalign") for line in words)
    assert any(line.startswith("135m embedded:smollm2-135m") for line in words)
    # one column for the names, however long (oracle_negated has 14 characters)
    listing = lines[: next(n for n, line in enumerate(lines) if line.startswith("could not"))]
    rows = [line for line in listing if line.startswith("  ")]
    starts = {len(line) - len(line[2:].split(" ", 1)[1].lstrip()) for line in rows}
    assert len(starts) == 1 and starts.pop() > len("  oracle_negated "), rows
    assert (
        "could not load entry point 'brokenrm' (brokenrm, from brokenrm): ModuleNotFoundError: "
        "No module named 'a_dependency_that_is_not_installed'"
    ) in lines


def test_two_conftests_registering_one_name_is_a_usage_error(toy):
    # the toy's conftest registers the suite "toy"; a second conftest, below, registers it too
    sub = toy.mkdir("again")
    sub.joinpath("conftest.py").write_text(
        toy.path.joinpath("conftest.py").read_text(), encoding="utf-8"
    )
    sub.joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    result = run(toy, "--prefalign", "again", "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*prefalign: suite 'toy' is registered twice: by module */again/conftest.py (not from "
            "an installed package) and by module */conftest.py (not from an installed package)*"
        ]
    )


@pytest.mark.parametrize(
    ("target", "registered"),
    [("myrm:pytest_prefalign_register", True), ("myrm:MyRM", False)],
    ids=["the hook function", "another object"],
)
def test_an_entry_point_naming_an_object_is_its_module_or_a_failure(toy, target, registered):
    # the module:function form names the hook itself: its module is the plugin; an object
    # without the hook would register nothing, silently: it is a load failure
    site = toy.path / "site"
    install(site, "myrm", "0.1", "myrm", SCORE_ONLY.format(cls="MyRM", name="myrm"))
    site.joinpath("myrm-0.1.dist-info", "entry_points.txt").write_text(
        f"[prefalign]\nmyrm = {target}\n"
    )
    toy.syspathinsert(site)
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "bon[myrm]")
    if registered:
        result.assert_outcomes(passed=1)
        return
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*reward method 'myrm' is not available: its plugin failed to load: entry point "
            "'myrm' (myrm:MyRM, from myrm): LookupError: myrm:MyRM defines no "
            "pytest_prefalign_register(registry) function, so it would register nothing: point "
            "the entry point at the module that defines it"
        ]
    )
