"""The main job on real parts: the embedded SmolLM2-135M and the real Pref-LaMP data (two
users), through a real ``pytest --prefalign`` run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_pref_lamp_on_the_real_model_and_data(pytester: pytest.Pytester):
    pytester.mkdir("suites")
    shutil.copytree(ROOT / "suites" / "pref_lamp", pytester.path / "suites" / "pref_lamp",
                    ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    result = pytester.runpytest_subprocess(
        "--prefalign", "suites/pref_lamp", "--prefalign-data", str(DATA),
        "--prefalign-limit", "2", "--prefalign-methods", "base", "--prefalign-json", "run.json",
        "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*prefalign leaderboard*",
        "pref_lamp · 135m · SmolLM2-135M-Instruct*",
        "*acl-anthology* · 2 users · * items · * pairs*",
        "1 * base *",
    ])
    run = json.loads((pytester.path / "run.json").read_text())
    (row,) = run["results"]
    assert row["n_users"] == 2 and row["n_items"] >= 2 and row["n_pairs"] >= 2
    items = [json.loads(line) for line in
             (pytester.path / "run.items.jsonl").read_text().splitlines()]
    # real generations: non-empty text, scored against the authors' real titles
    assert all(r["output"] and r["reference"] for r in items)
    from pytest_prefalign.metrics import rouge

    r1, _ = rouge([r["output"] for r in items], [r["reference"] for r in items])
    assert row["metrics"]["rouge1"] == pytest.approx(float(r1.mean()))
    assert 0.0 <= row["metrics"]["policy_acc"] <= 1.0
