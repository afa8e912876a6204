"""The third-party path end to end: the example package in ``examples/prefalign-example-rm``
is installed with pip (into a folder of its own, put on ``PYTHONPATH``: a ``--system-site-packages``
venv would see the base interpreter's packages, not this project's venv), found through its
``prefalign`` entry point, and run as ``bon[length_prior]`` by ``pytest --prefalign`` in a small
project with a toy suite and the tiny model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "prefalign-example-rm"

# Like the toy suite of tests/test_plugin.py, with training pairs: each user's profile titles
# (chosen) against a title of another length (rejected). Ann writes short titles, Bob long ones.
TOY_SUITE = """
import json
from pathlib import Path

from pytest_prefalign.api import Item, Pair, ProfileEntry, SuiteData


class Toy:
    name = "toy"
    description = "two users: one writes short titles, the other long ones"
    licence = "CC0"
    source = "toy"

    def instruction(self, input):
        return f"Write a title for: {input}"

    def example(self, entry):
        return f"Text: {entry.input}\\nTitle: {entry.output}"

    def load(self, data_dir, *, limit, options):
        path = Path(data_dir) / "records.json"
        profiles, items, train, test = {}, [], [], []
        for rec in json.loads(path.read_text())[: limit or None]:
            user = rec["user"]
            profiles[user] = [ProfileEntry(f"{user}/p{i}", t, o)
                              for i, (t, o, _) in enumerate(rec["profile"])]
            for i, (text, title, other) in enumerate(rec["profile"]):
                train.append(Pair(f"{user}/p{i}", user, self.instruction(text), title, other))
            for i, (text, title, other) in enumerate(rec["tests"]):
                prompt = self.instruction(text)
                items.append(Item(f"{user}/t{i}", user, text, prompt, title))
                test.append(Pair(f"{user}/t{i}", user, prompt, title, other))
        return SuiteData("toy", str(path), profiles, items, train_pairs=train, test_pairs=test)

    def build_pairs(self, data, reference, cache_dir):
        raise AssertionError("toy pairs come with the data")


def pytest_prefalign_register(registry):
    registry.add_suite(Toy())
"""

SHORT, LONG = "Cats", "A very long title about cats and dogs and more"
RECORDS = [
    {
        "user": "ann",
        "profile": [["cats sleep", "Sleepy cats", LONG], ["cats purr", "Purr", LONG]],
        "tests": [["a cat on a mat", "Mat cat", LONG], ["cats and milk", "Milk", LONG]],
    },
    {
        "user": "bob",
        "profile": [
            ["dogs bark", "Dogs that bark loudly at night in the park", SHORT],
            ["dogs fetch", "How dogs learn to fetch sticks and balls", SHORT],
        ],
        "tests": [["a dog in a park", "A dog in the park on a sunny day in May", SHORT]],
    },
]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example package installed with pip into its own folder (offline: no index, no
    build isolation; setuptools comes from this venv). The source is copied first so that the
    build leaves nothing in the repository."""
    work = tmp_path_factory.mktemp("example")
    source = work / "src"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    target = work / "site"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--quiet",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    return target


def with_path(target: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(target), env.get("PYTHONPATH")]))
    return env


def test_entry_point_registers_length_prior(installed: Path):
    code = textwrap.dedent("""
        import pytest
        from pytest_prefalign import hookspec, registry
        pm = pytest.PytestPluginManager()  # knows pytest_* functions as hook specifications
        pm.add_hookspecs(hookspec)
        reg = registry.load(pm)
        entry = reg.reward("length_prior")
        print(entry.origin, entry.builtin, sorted(entry.obj.capabilities), reg.failures)
    """)
    out = subprocess.run(
        [sys.executable, "-c", code], env=with_path(installed), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["prefalign_example_rm", "False", "[]", "[]"]


def test_prefalign_list_names_the_example_and_its_package(installed: Path):
    prefalign = str(Path(sys.executable).with_name("prefalign"))
    out = subprocess.run(
        [prefalign, "list"], env=with_path(installed), capture_output=True, text=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "length_prior prefalign-example-rm 0.1.0 (prefalign_example_rm); capabilities: -" in [
        " ".join(line.split()) for line in out.stdout.splitlines()
    ]


@pytest.mark.slow  # a pytest subprocess imports torch and samples 8 titles per item
def test_length_prior_runs_as_bon(
    installed: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    conftest = TOY_SUITE
    pytester.makeconftest(conftest)
    pytester.makeini(
        textwrap.dedent("""
        [pytest]
        prefalign_models = tiny = tiny
        prefalign_sizes = tiny
        prefalign_data = data
    """)
    )
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(RECORDS))
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # toy-sized matmuls: see tests/conftest.py
    monkeypatch.setenv("PYTHONPATH", with_path(installed)["PYTHONPATH"])
    result = pytester.runpytest_subprocess(
        "--prefalign",
        "toy",
        "-v",
        "-p",
        "no:cacheprovider",
        "--prefalign-methods",
        "bon[length_prior]",
        "--prefalign-json",
        "out.json",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*toy?bon?length_prior?-tiny? PASSED*"])
    (row,) = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["reward"] == "length_prior"
    # which code produced the row: the method's fingerprint, its package and version
    assert row["reward_fingerprint"].startswith("length_prior-v1-")
    assert (row["reward_package"], row["reward_version"]) == ("prefalign-example-rm", "0.1.0")
    # every test pair's chosen title is nearer its author's usual length than the rejected one
    assert row["metrics"]["rm_acc"] == 1.0
    # trained in the folder of the reward's key, which the run file names
    (use,) = [u for u in row["cache"] if u["artifact"] == "rewards"]
    assert use["hit"] is False and use["inputs"]["method"] == "length_prior"
    folder = pytester.path / "cache" / "rewards" / "length_prior" / use["key"]
    cached = list(folder.glob("*.json"))
    assert len(cached) == 1
    # chosen lengths: ann 2 and 1 words, bob 9 and 8, overall mean 5; two pseudo-pairs at 5
    targets = json.loads(cached[0].read_text())["targets"]
    assert targets == {"ann": pytest.approx((3 + 2 * 5) / 4), "bob": pytest.approx((17 + 10) / 4)}
