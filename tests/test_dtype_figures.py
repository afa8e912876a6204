"""benchmarks/dtype_figures.py: bf16's figures against fp32's intervals, worked out by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import benchmark_scripts
import pytest

from pytest_prefalign.runs import records
from pytest_prefalign.runs.records import CaseResult, RunFile


@pytest.fixture(scope="module")
def script():
    yield benchmark_scripts.load("dtype_figures")
    sys.modules.pop("dtype_figures", None)


def result(method: str, dtype: str, metrics: dict, outputs: list[str], w=None) -> CaseResult:
    guidance = None if w is None else {"strength": {"option": "w", "value": w, "how": "chosen"}}
    return CaseResult(
        suite="pref_lamp",
        method=method,
        size="135m",
        metrics={name: value for name, (value, _) in metrics.items()},
        ci={name: interval for name, (_, interval) in metrics.items() if interval},
        environment={"dtype": dtype},
        guidance=guidance,
        items=[
            {"item_id": f"u/{i}", "user": "u", "output": text} for i, text in enumerate(outputs)
        ],
    )


def write(tmp_path: Path, name: str, results: list[CaseResult]) -> Path:
    path = tmp_path / name
    records.write(RunFile(results), path)
    return path


def test_figures_inside_and_outside_and_identical_outputs(script, tmp_path, capsys):
    fp32 = write(tmp_path, "fp32.json", [
        result("base", "float32", {"policy_acc": (0.55, [0.5, 0.6]), "rouge1": (0.3, [0.2, 0.4])},
               ["a", "b", "c"]),
        result("args[x]", "float32",
               {"rm_acc": (0.6, [0.5, 0.7]), "policy_acc": (0.55, [0.5, 0.6])},
               ["a", "b", "c", "d"], w=0.5),
    ])  # fmt: skip
    bf16 = write(tmp_path, "bf16.json", [
        result("base", "bfloat16", {"policy_acc": (0.6, None), "rouge1": (0.25, None)},
               ["a", "b", "c"]),
        result("args[x]", "bfloat16", {"rm_acc": (0.7, None), "policy_acc": (0.62, None)},
               ["a", "B", "c", "D"], w=1.0),
    ])  # fmt: skip
    assert script.main([str(fp32), str(bf16)]) == 1  # policy acc 0.62 > 0.6: outside
    out = capsys.readouterr().out
    # base: 0.6 on the bound and 0.25 inside; args: 0.7 on the bound, 0.62 outside
    assert (
        "bf16 against fp32: 3 of 4 figures inside fp32's 95% interval (2 rows); outputs "
        "identical: 5 of 7 (71%); working points the same in 0 of 1 guided rows"
    ) in out
    assert "0.550 [0.500, 0.600] -> 0.620  OUTSIDE" in out
    assert "2/4" in out and "3/3" in out and "0.5 -> 1" in out


def test_all_inside_exits_0(script, tmp_path, capsys):
    fp32 = write(tmp_path, "a.json", [result("base", "float32", {"rouge1": (0.3, [0.2, 0.4])},
                                             ["x"])])  # fmt: skip
    bf16 = write(tmp_path, "b.json", [result("base", "bfloat16", {"rouge1": (0.31, None)},
                                             ["y"])])  # fmt: skip
    assert script.main([str(fp32), str(bf16)]) == 0
    assert "1 of 1 figures inside" in capsys.readouterr().out


def test_refuses_runs_that_cannot_be_compared(script, tmp_path, capsys):
    fp32 = write(tmp_path, "a.json", [result("base", "float32", {}, [])])
    other = write(tmp_path, "b.json", [result("icl", "bfloat16", {}, [])])
    same = write(tmp_path, "c.json", [result("base", "float32", {}, [])])
    assert script.main([str(fp32), str(other)]) == 2
    assert "not have the same rows" in capsys.readouterr().err
    assert script.main([str(fp32), str(same)]) == 2
    assert "expected a float32 run then a bfloat16 run" in capsys.readouterr().err
    assert script.main([str(fp32), str(tmp_path / "none.json")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_reads_a_bench_keep_folder(script, tmp_path):
    folder = tmp_path / "keep"
    folder.mkdir()
    write(folder, "cold.json", [result("base", "float32", {}, [])])
    assert script.read(folder).results[0].method == "base"


def test_a_missing_figure_is_outside_and_one_sided_items_and_strengths_are_shown(
    script, tmp_path, capsys
):
    fp32 = write(tmp_path, "a.json", [
        result("args[x]", "float32", {"rm_acc": (0.6, [0.5, 0.7]), "rouge1": (0.3, [0.2, 0.4])},
               ["a", "b", "c"], w=0.5),
    ])  # fmt: skip
    bf16 = write(tmp_path, "b.json", [
        result("args[x]", "bfloat16", {"rouge1": (0.3, None)}, ["a", "b"]),  # no RM acc, no w
    ])  # fmt: skip
    assert script.main([str(fp32), str(bf16), "--json", str(tmp_path / "out.json")]) == 1
    out = capsys.readouterr().out
    assert "0.600 [0.500, 0.700] -> missing" in out and "0.5 -> -" in out
    assert (
        "1 of 2 figures inside fp32's 95% interval (1 rows); outputs identical: 2 of 2 (100%); "
        "working points the same in 0 of 1 guided rows; 1 items in one run only"
    ) in out
    (row,) = json.loads((tmp_path / "out.json").read_text())
    assert row["figures"][0]["bf16"] is None and row["unmatched"] == 1
