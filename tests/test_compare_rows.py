"""``prefalign compare RUN --rows A,B``: two rows of one run, paired over their users, on a
hand-built run file whose answers are worked out by hand: the difference, its interval, the exact
sign-flip p-value (2 / 2^n when every user moved the same way) and the verdict; unknown rows are
named with the run's rows; the two forms of ``compare`` do not mix."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from pytest_prefalign import cli
from pytest_prefalign.analysis import selection, stats
from pytest_prefalign.runs import records
from pytest_prefalign.runs.records import CaseResult, RunFile

USERS = [f"u{i}" for i in range(8)]


def result(method: str, per_user: dict[str, list[float]], users: list[str] = USERS) -> CaseResult:
    figures = {m: dict(zip(users, v, strict=True)) for m, v in per_user.items()}
    decoder, _, reward = method.partition("[")
    return CaseResult(
        suite="s",
        method=method,
        size="135m",
        decoder=decoder,
        reward=reward.rstrip("]") or None,
        n_users=len(users),
        metrics={m: float(np.mean(v)) for m, v in per_user.items()},
        per_user=figures,
    )


# B's figures; A is B moved the same way for every user on policy accuracy (+0.10), the other
# way for every user on RM accuracy (-0.20), and both ways in turn on ROUGE-1 (mean 0)
B = {
    "policy_acc": [0.40, 0.50, 0.55, 0.60, 0.45, 0.50, 0.35, 0.65],
    "rm_acc": [0.90, 0.85, 0.95, 0.80, 0.90, 0.85, 0.90, 0.95],
    "rouge1": [0.20, 0.25, 0.30, 0.22, 0.18, 0.26, 0.24, 0.21],
}
SHIFT = {
    "policy_acc": [0.10] * 8,
    "rm_acc": [-0.20] * 8,
    "rouge1": [0.05, -0.05, 0.02, -0.02, 0.04, -0.04, 0.01, -0.01],
}
A = {m: [b + s for b, s in zip(B[m], SHIFT[m], strict=True)] for m in B}


@pytest.fixture
def run_path(tmp_path: Path) -> Path:
    path = tmp_path / "run.json"
    rows = [
        result("args[a]", A),
        result("args[b]", B),
        result("base", {"policy_acc": B["policy_acc"]}),
    ]
    records.write(RunFile(rows), path)
    return path


def by_metric(found: list[dict]) -> dict[str, dict]:
    return {f.metric: f for f in found}


def test_known_answers(run_path: Path) -> None:
    run = records.read(run_path)
    got = by_metric(selection.compare_rows(run.results, "args[a]", "args[b]"))
    assert sorted(got) == ["policy_acc", "rm_acc", "rouge1"]  # the metrics with per-user figures
    policy, rm, rouge = got["policy_acc"], got["rm_acc"], got["rouge1"]
    # every user moved the same way: the exact sign-flip p is 2 / 2^8, the interval one point
    assert policy.diff == pytest.approx(0.10) and policy.n_users == 8
    assert policy.p_value == pytest.approx(2 / 256)
    assert policy.test == "exact sign flip over users"
    # the command's three comparisons are one family: Holm multiplies the smallest p by 3
    assert policy.p_holm == pytest.approx(3 * 2 / 256) and rouge.p_holm == 1.0
    assert policy.ci == pytest.approx([0.10, 0.10])
    assert policy.verdict == "args[a] better"
    assert rm.diff == pytest.approx(-0.20) and rm.p_value == pytest.approx(2 / 256)
    assert rm.verdict == "args[b] better"
    # both ways in turn: the mean difference is 0 and every sign pattern is as far from 0
    assert rouge.diff == pytest.approx(0.0, abs=1e-12) and rouge.p_value == 1.0
    assert rouge.ci[0] < 0 < rouge.ci[1]
    assert rouge.verdict == "no significant difference"


def test_the_p_value_is_the_share_of_sign_patterns_as_far_from_zero() -> None:
    d = np.array([0.3, 0.1, -0.2, 0.25, 0.05, 0.15])
    observed = abs(d.mean())
    patterns = [
        abs((d * s).mean()) >= observed - 1e-12 for s in itertools.product((1, -1), repeat=6)
    ]
    p, exact = stats.sign_flip(d)
    assert exact and p == pytest.approx(np.mean(patterns)) == pytest.approx(14 / 64)
    # weights: a micro figure weighs each user by its observations
    w = np.array([1, 1, 1, 5, 1, 1])
    weighted = [
        abs((d * s) @ w) >= abs(d @ w) - 1e-12 for s in itertools.product((1, -1), repeat=6)
    ]
    assert stats.sign_flip(d, w)[0] == pytest.approx(np.mean(weighted))
    assert stats.sign_flip([0.0, 0.0, 0.0]) == (1.0, True)
    with pytest.raises(ValueError, match="finite"):
        stats.sign_flip([0.1, float("nan")])


def test_too_few_users_is_not_enough_evidence() -> None:
    users = USERS[:5]
    a = result("args[a]", {"policy_acc": [0.9] * 5}, users)
    b = result("args[b]", {"policy_acc": [0.1] * 5}, users)
    (found,) = selection.compare_rows([a, b], "args[a]", "args[b]")
    # every user moved the same way, yet 2 / 2^5 = 0.0625: no five users can be significant
    assert found.p_value == pytest.approx(0.0625) and found.ci == pytest.approx([0.8, 0.8])
    assert found.verdict == (
        "not enough evidence: 5 users: p >= 0.062 even if every user moved one way"
    )


def test_the_command_prints_each_metric(run_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["compare", str(run_path), "--rows", "args[a],args[b]"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A = args[a], B = args[b]: A - B over the users both have")
    lines = {line.split()[3]: line.split() for line in out.splitlines() if line.startswith("s ·")}
    assert lines["policy_acc"][4:] == [
        "0.600", "0.500", "+0.100", "[+0.100,", "+0.100]", "0.00781", "0.0234", "8", "args[a]",
        "better",
    ]  # fmt: skip
    assert lines["rm_acc"][6:9] == ["-0.200", "[-0.200,", "-0.200]"]
    assert lines["rm_acc"][-2:] == ["args[b]", "better"]
    assert lines["rouge1"][-6:] == ["1", "1", "8", "no", "significant", "difference"]
    # a row without a reward has what it has: base and args[a] share policy accuracy only
    assert cli.main(["compare", str(run_path), "--rows", "base,args[a]"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[3] for line in out.splitlines() if line.startswith("s ·")] == [
        "policy_acc"
    ]


def test_unknown_rows_are_named_with_the_runs_rows(
    run_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert cli.main(["compare", str(run_path), "--rows", "icl,args[a]"]) == 2
    err = capsys.readouterr().err
    assert f"no row 'icl' in {run_path}; its rows: args[a], args[b], base" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rows", "args[a]"], "expected two different rows"),
        (["--rows", "args[a],args[a]"], "expected two different rows"),
        (["other.json", "--rows", "args[a],args[b]"], "a second run file does not go with it"),
        (["--rows", "args[a],args[b]", "--fail", "rouge1:1pp"], "--fail does not go with it"),
        ([], "give two run files (BASELINE CURRENT), or one with --rows A,B"),
    ],
)
def test_the_two_forms_do_not_mix(
    run_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    assert cli.main(["compare", str(run_path), *argv]) == 2
    assert message in capsys.readouterr().err
