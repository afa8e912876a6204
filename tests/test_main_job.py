"""The main job on real parts: the embedded SmolLM2-135M and the real Pref-LaMP data (two
users), through a real ``pytest --prefalign`` run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from run_figures import same_figures

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module", autouse=True)
def heavy_modules_imported_once():
    """pytester restores sys.modules after each test; numpy's and scipy's extension modules
    cannot be imported twice in one process, so they are imported before the first snapshot."""
    import rouge_score.rouge_scorer  # noqa: F401
    import scipy.linalg  # noqa: F401

    import pytest_prefalign.analysis.metrics  # noqa: F401


DATA = ROOT.parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_pref_lamp_on_the_real_model_and_data(pytester: pytest.Pytester):
    pytester.makeini("[pytest]\n")  # the rootdir, where run files go
    pytester.mkdir("suites")
    shutil.copytree(
        ROOT / "suites" / "pref_lamp",
        pytester.path / "suites" / "pref_lamp",
        ignore=shutil.ignore_patterns("*.py", "__pycache__"),
    )
    result = pytester.runpytest_subprocess(
        "--prefalign",
        "suites/pref_lamp",
        "--prefalign-data",
        str(DATA),
        "--prefalign-limit",
        "2",
        "--prefalign-methods",
        "base",
        "--prefalign-json",
        "run.json",
        "-p",
        "no:cacheprovider",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*prefalign leaderboard*",
            "pref_lamp · 135m · SmolLM2-135M-Instruct*",
            "*acl-anthology* · 2 users · * items · * pairs*",
            "1 * base *",
        ]
    )
    run = json.loads((pytester.path / "run.json").read_text())
    (row,) = run["results"]
    assert row["n_users"] == 2 and row["n_items"] >= 2 and row["n_pairs"] >= 2
    items = [
        json.loads(line) for line in (pytester.path / "run.items.jsonl").read_text().splitlines()
    ]
    # real generations: non-empty text, scored against the authors' real titles
    assert all(r["output"] and r["reference"] for r in items)
    from pytest_prefalign.analysis.metrics import rouge

    r1, _ = rouge([r["output"] for r in items], [r["reference"] for r in items])
    assert row["metrics"]["rouge1"] == pytest.approx(float(r1.mean()))
    assert 0.0 <= row["metrics"]["policy_acc"] <= 1.0


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_cached_reruns_equal_no_cache_runs_on_real_data(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
):
    """The stale-cache sequence on the real model and data: the default design written by one
    writer (the tiny model), then by another (the embedded 135M) in the same cache (the pairs
    are written again, the reward method is retrained on them, and what it guides is generated
    again), against a ``--prefalign-no-cache`` run of the second."""
    from pytest_prefalign import storage

    pytester.makeini("[pytest]\n")  # the rootdir, where run files go
    pytester.mkdir("suites")
    shutil.copytree(
        ROOT / "suites" / "pref_lamp",
        pytester.path / "suites" / "pref_lamp",
        ignore=shutil.ignore_patterns("*.py", "__pycache__"),
    )
    suite_toml = pytester.path / "suites" / "pref_lamp" / "suite.toml"
    cache = pytester.path / "cache"
    cache.mkdir()
    converted = storage.cache_root() / "models"  # converting again would take a minute
    if converted.is_dir():
        (cache / "models").symlink_to(converted, target_is_directory=True)
    monkeypatch.setenv("PREFALIGN_CACHE", str(cache))

    def run(writer: str, *args: str) -> dict:
        suite_toml.write_text(
            f'[suite]\nname = "pref_lamp"\n[options]\nnegatives = "style"\nwriter = "{writer}"\n'
        )
        out = f"run-{len(list(pytester.path.glob('run-*.json')))}.json"
        result = pytester.runpytest_subprocess(
            "--prefalign",
            "suites/pref_lamp",
            "--prefalign-data",
            str(DATA),
            "--prefalign-limit",
            "1",  # one author: the 135M writes the pairs twice (in the cache, and cold)
            "--prefalign-methods",
            "base,args[lore]",
            "--prefalign-json",
            out,
            "-p",
            "no:cacheprovider",
            *args,
        )
        result.assert_outcomes(passed=2)
        return json.loads((pytester.path / out).read_text())

    def hits(run: dict) -> dict:
        return {
            (r["method"], u["artifact"], u["inputs"].get("method", "")): u["hit"]
            for r in run["results"]
            for u in r["cache"]
            if u["artifact"] != "features"
        }

    first = run("tiny")  # a writer that costs nothing (the main job's test has Gemma write)
    assert first["results"][0]["data"]["provenance"]["writer_source"] == "tiny"
    other = run("embedded:smollm2-135m")
    assert other["results"][0]["data"]["provenance"]["writer"] == "SmolLM2-135M-Instruct"
    # written again by the other writer, retrained on the new pairs, and what it guides
    # generated again; base's outputs reused
    assert hits(other)[("args[lore]", "written_titles", "")] is False
    assert hits(other)[("args[lore]", "rewards", "lore")] is False
    assert hits(other)[("args[lore]", "generations", "args[lore]")] is False
    assert hits(other)[("base", "generations", "base")] is True
    fresh = run("embedded:smollm2-135m", "--prefalign-no-cache")
    # nothing read from the cache but the converted models (the models, not a result)
    assert not any(hit for (_, kind, _), hit in hits(fresh).items() if kind != "models")
    assert same_figures(other, fresh)
    again = run("tiny")
    assert all(hits(again).values()) and same_figures(again, first)
