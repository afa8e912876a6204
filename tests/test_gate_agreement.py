"""Every way a gate could pass by mistake fails loudly, or passes for a stated reason, and the
pytest gate and ``prefalign compare`` agree on each: another size, other data under the same
ids, another model, another environment, a version 1 baseline, a baseline test missing from the
run, an underpowered gate and a ROUGE gate over too few users. Same toy project as
tests/test_gating_plugin.py (4 users x 5 pairs, the tiny model)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import test_gating_plugin as toy_project
from test_gating_plugin import INI, baseline_file, edit, run, save

# the toy project's fixtures (tests/test_gating_plugin.py)
heavy_imports = toy_project.heavy_imports
shared_cache = toy_project.shared_cache
toy = toy_project.toy

GATE = ("--prefalign-compare", "main", "--prefalign-compare-fail", "policy_acc:2pp")
PREFALIGN = str(Path(sys.executable).with_name("prefalign"))


def latest_run(pytester: pytest.Pytester) -> Path:
    return max((pytester.path / ".prefalign" / "runs").glob("[0-9]*.json"))


def cli(pytester: pytest.Pytester, *args: str) -> subprocess.CompletedProcess[str]:
    """``prefalign compare main LATEST_RUN --fail policy_acc:2pp ARGS``."""
    return subprocess.run(
        [
            PREFALIGN,
            "compare",
            "main",
            str(latest_run(pytester)),
            "--fail",
            "policy_acc:2pp",
            *args,
        ],
        cwd=pytester.path,
        capture_output=True,
        text=True,
    )


def edit_baseline(pytester: pytest.Pytester, change: Callable[[dict[str, Any]], None]) -> None:
    path = baseline_file(pytester, "main")
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_identical_runs_pass_both(toy):
    save(toy)
    result = run(toy, *GATE)
    assert result.ret == pytest.ExitCode.OK
    out = cli(toy)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 regression(s); gates: policy_acc:2pp; alpha 0.05" in out.stdout


def test_another_model_size_compares_nothing_and_fails_both(toy):
    toy.makeini(
        INI.replace(
            "prefalign_models = tiny = tiny",
            "prefalign_models =\n    tiny = tiny\n    other = tiny",
        )
    )
    save(toy)
    result = run(toy, *GATE, "--prefalign-sizes", "other")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)  # the test itself is new; the run fails as a whole
    message = (
        "nothing was compared: the baseline and this run share no (suite, method, size); the "
        "baseline has base on toy (tiny), this run base on toy (other) (another model size: "
        "tiny in the baseline, other in this run)"
    )
    result.stdout.fnmatch_lines(
        ["no test was compared with the baseline", f"FAILED the comparison: {message}"]
    )
    out = cli(toy)
    assert out.returncode == 2
    assert f"prefalign compare: cannot compare: {message}" in out.stderr
    # stdout alone must not read as a pass
    assert "regression(s)" not in out.stdout and f"not compared: {message}" in out.stdout


def test_other_data_under_the_same_ids_fails_both_unless_allowed(toy):
    save(toy)
    # one author's titles edited: the same ids, other texts
    path = toy.path / "data" / "toy" / "records.json"
    records = json.loads(path.read_text())
    records[0]["tests"] = [[text, f"{good}!", bad] for text, good, bad in records[0]["tests"]]
    path.write_text(json.dumps(records))
    message = (
        "cannot compare with baseline 'main': base on toy (tiny): other data: 5 of 20 pairs have "
        "other contents under the same ids (e.g. 'ann/t0', 'ann/t1', 'ann/t2'), 1 of 4 items "
        "have other contents under the same ids (e.g. 'ann/t2')"
    )
    result = run(toy, *GATE)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*{message} (refresh the baseline, or allow the difference if it is intended: data)*"]
    )
    out = cli(toy)
    assert out.returncode == 2
    assert (
        message.replace("cannot compare with baseline 'main'", "prefalign compare: cannot compare")
        in out.stderr
    )
    # an intended change of the data: compared on the shared ids, and stated
    result = run(toy, *GATE, "--prefalign-compare-allow", "data")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["base on toy (tiny): allowed: other data: 5 of 20 pairs*"])
    out = cli(toy, "--allow", "data")
    assert out.returncode == 0, out.stderr
    assert "base on toy (tiny): allowed: other data: 5 of 20 pairs" in out.stdout


@pytest.mark.parametrize(
    ("change", "message", "kind"),
    [
        (
            lambda row: row["environment"].update(torch="2.0.0", device="cuda"),
            "another environment: torch 2.0.0 -> *, device cuda -> cpu",
            "environment",
        ),
        (
            lambda row: row["model"].update(weights="other-weights"),
            "another model: 'tiny-llama(seed=0)' with other weights or tokenizer (other-weights "
            "in the baseline, * now)",
            "model",
        ),
    ],
    ids=["environment", "model"],
)
def test_another_model_or_environment_fails_both(toy, change, message, kind):
    save(toy)
    edit_baseline(toy, lambda data: change(data["results"][0]))
    result = run(toy, *GATE)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [f"*cannot compare with baseline 'main': base on toy (tiny): {message}*"]
    )
    out = cli(toy)
    assert out.returncode == 2
    assert "base on toy (tiny): another" in out.stderr
    result = run(toy, *GATE, "--prefalign-compare-allow", kind)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"base on toy (tiny): allowed: {message}"])


def test_a_version_1_baseline_says_what_it_lacks_in_both(toy):
    save(toy)

    def to_version_1(data: dict[str, Any]) -> None:
        data["version"] = 1
        for row in data["results"]:
            for name in ("environment", "reward_fingerprint", "reward_package", "reward_version"):
                row.pop(name, None)
            row["data"].pop("fingerprint")
            row["model"].pop("weights")
        for record in data["pairs"] + data["items"]:
            record.pop("digest")

    edit_baseline(toy, to_version_1)
    result = run(toy, *GATE)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*base on toy (tiny): the baseline records no data fingerprint, so the data cannot be "
            "checked; *(run files before version 2 do not record it: save the baseline again "
            "with this version (--prefalign-save); or allow what cannot be checked: "
            "data,model,environment)*"
        ]
    )
    assert cli(toy).returncode == 2


def test_a_missing_baseline_test_fails_both(toy):
    save(toy, methods="base,icl")
    result = run(toy, *GATE)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["FAILED the comparison: in the baseline, not compared in this run: icl on toy (tiny)*"]
    )
    out = cli(toy)
    assert out.returncode == 2
    assert (
        "cannot compare: in the baseline, not compared in this run: icl on toy (tiny)" in out.stderr
    )
    assert "regression(s)" not in out.stdout
    assert "not compared: in the baseline, not compared in this run: icl on toy" in out.stdout


def test_an_underpowered_gate_warns_or_fails_in_both(toy):
    save(toy)
    result = run(toy, *GATE)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["*PrefalignWarning: underpowered gate: policy_acc of base*30.00 pp*"]
    )
    result = run(toy, *GATE, "--prefalign-compare-power", "fail")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["toy[[]base-tiny[]]: underpowered gate: policy_acc of base on toy (tiny): with 20 pairs*"]
    )
    out = cli(toy)
    assert out.returncode == 0 and "WARNING underpowered gate: policy_acc of base" in out.stdout
    out = cli(toy, "--power", "fail")
    assert out.returncode == 1 and "FAILED underpowered gate: policy_acc of base" in out.stdout
    # a tolerance the run can detect is not underpowered
    result = run(
        toy,
        "--prefalign-compare",
        "main",
        "--prefalign-compare-fail",
        "policy_acc:30pp",
        "--prefalign-compare-power",
        "fail",
    )
    assert result.ret == pytest.ExitCode.OK


def test_a_rouge_gate_over_too_few_users_is_refused_in_both(toy):
    save(toy)
    result = run(toy, "--prefalign-compare", "main", "--prefalign-compare-fail", "rouge1:1pp")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cannot compare with baseline 'main': base on toy (tiny): rouge1 cannot be tested: "
            "the sign-flip test over users needs at least 6 users at alpha 0.05*the runs share "
            "4 (more users: --prefalign-limit)*"
        ]
    )
    out = subprocess.run(
        [PREFALIGN, "compare", "main", str(latest_run(toy)), "--fail", "rouge1:1pp"],
        cwd=toy.path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "rouge1 cannot be tested" in out.stderr


CI_DOC = Path(__file__).resolve().parents[1] / "docs" / "ci-gating.md"


def quoted_block(heading: str, index: int = 0) -> list[str]:
    """The lines of fenced block ``index`` after ``heading`` in docs/ci-gating.md."""
    text = CI_DOC.read_text(encoding="utf-8").split(f"\n{heading}\n", 1)[1]
    bodies = re.findall(r"^```[a-z]*\n(.*?)^```$", text, flags=re.S | re.M)
    return [line.rstrip() for line in bodies[index].splitlines() if line.strip()]


def missing_lines(quoted: list[str], printed: str) -> list[str]:
    """Quoted lines not printed; ``/repo/...`` in a quoted line stands for the project's path."""
    lines = {line.rstrip() for line in printed.splitlines()}
    found = []
    for line in quoted:
        pattern = re.compile(".*".join(map(re.escape, line.split("/repo/"))))
        if not any(pattern.fullmatch(p) for p in lines):
            found.append(line)
    return found


def test_the_summary_docs_ci_gating_md_shows_is_printed(toy):
    saved = save(toy, methods="base,icl")
    edit(toy, saved, "main", won=lambda pair: pair["method"] == "base")
    result = run(toy, *GATE, methods="base,icl_rag")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    quoted = quoted_block("## The summary")
    assert len(quoted) == 11
    assert missing_lines(quoted, result.stdout.str()) == []


def test_the_standalone_output_docs_ci_gating_md_shows_is_printed(tmp_path: Path):
    from test_gate import flipped, make_run

    from pytest_prefalign.runs import records

    records.write(
        make_run([1.0] * 200, 20, rm=[1.0] * 200, rouge1=[0.30] * 200), tmp_path / "a.json"
    )
    changed = make_run(flipped(200, 50), 20, rm=flipped(200, 5), rouge1=[0.29] * 200)
    records.write(changed, tmp_path / "b.json")
    out = subprocess.run(
        [PREFALIGN, "compare", "a.json", "b.json", "--fail", "policy_acc:2pp,rouge1:0.5pp"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1, out.stderr
    quoted = quoted_block("## The standalone command", 1)
    assert len(quoted) == 11
    assert missing_lines(quoted, out.stdout) == []
