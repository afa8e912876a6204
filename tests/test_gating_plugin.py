"""Regression gating in a pytest run: ``--prefalign-save`` then ``--prefalign-compare`` in a small
project (pytester), with a toy suite from the project's conftest and the tiny model.

The toy pairs are built so that the tiny random model's outcome is known: with the sum of token
log-likelihoods, a response many tokens longer is far less likely, so each user's two pairs whose
preferred response is the long one are lost (outcome 0) and the other three are won. That gives
policy accuracy 3/5 for each of the 4 users (0.600), and baselines edited from a saved run give
drops whose McNemar p-values are worked out by hand below.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TOY_SUITE = """
import json
import os
from pathlib import Path

import pytest
from pytest_prefalign.api import Item, Pair, ProfileEntry, SuiteData


class Toy:
    name = "toy"
    description = "users whose preferred title is sometimes the long one"
    licence = "CC0"
    source = "toy"

    def instruction(self, input):
        return f"Write a title for: {input}"

    def example(self, entry):
        return f"Text: {entry.input}\\nTitle: {entry.output}"

    def load(self, data_dir, *, limit, options):
        path = Path(data_dir) / "records.json"
        records = json.loads(path.read_text())
        profiles, items, pairs = {}, [], []
        for rec in records[: limit or None]:
            user = rec["user"]
            profiles[user] = [ProfileEntry(f"{user}/p{i}", t, o)
                              for i, (t, o) in enumerate(rec["profile"])]
            for i, (text, title, bad) in enumerate(rec["tests"]):
                prompt = self.instruction(text)
                if i == 2:  # one generation item per user keeps the runs short
                    items.append(Item(f"{user}/t{i}", user, text, prompt, title))
                pairs.append(Pair(f"{user}/t{i}", user, prompt, title, bad))
        return SuiteData("toy", str(path), profiles, items, test_pairs=pairs)

    def build_pairs(self, data, reference, cache_dir):
        raise AssertionError("toy pairs come with the data")


def pytest_prefalign_register(registry):
    registry.add_suite(Toy())


def pytest_collection_modifyitems(items):
    # suite.toml tests cannot carry markers in code: a conftest adds them (docs/ci-gating.md)
    tolerance = os.environ.get("TOY_TOLERANCE")
    for item in items:
        if tolerance and "[base-" in item.nodeid:
            item.add_marker(pytest.mark.prefalign_tolerance(policy_acc=tolerance))
"""

INI = """
[pytest]
prefalign_models = tiny = tiny
prefalign_sizes = tiny
prefalign_limit = 4
prefalign_data = data
prefalign_reduce = sum
"""  # the known outcomes below were worked out for the sum of token log-likelihoods
LONG = "A long and winding title about {} that goes on and on for many more words than needed"
USERS = ["ann", "bob", "cy", "dee"]
TOPICS = ["cats", "dogs", "rain", "tea", "maps"]
LOST = (0, 1)  # per user, the tests whose preferred title is the long one


def toy_records() -> list[dict[str, Any]]:
    """4 users x 5 tests; in tests 0 and 1 the preferred title is the long one."""
    records = []
    for user in USERS:
        tests = []
        for i, topic in enumerate(TOPICS):
            short, long = topic.title(), LONG.format(topic)
            tests.append(
                [f"{user} writes about {topic}", long, short]
                if i in LOST
                else [f"{user} writes about {topic}", short, long]
            )
        records.append(
            {
                "user": user,
                "profile": [[f"{user} likes {t}", t.title()] for t in TOPICS[:2]],
                "tests": tests,
            }
        )
    return records


@pytest.fixture(scope="module")
def heavy_imports() -> None:
    """Import torch and what imports it before the in-process runs: pytester drops the modules
    a run imported when the run ends, and torch cannot be imported a second time."""
    from importlib import import_module

    from pytest_prefalign.registry import BUILTINS

    for module in (
        "torch",
        "transformers",
        "pytest_prefalign.evaluation.case",
        "pytest_prefalign.runtime.tiny",
        "pytest_prefalign.runtime.models",
        "pytest_prefalign.analysis.compare",
    ):
        import_module(module)
    for _, _, target in BUILTINS:
        import_module(target.partition(":")[0])


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One prefalign cache for the module: generations are cached by content (model, prompts,
    options), so the tests reuse them instead of generating again."""
    return tmp_path_factory.mktemp("prefalign-cache")


@pytest.fixture
def toy(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    heavy_imports: None,
    shared_cache: Path,
) -> pytest.Pytester:
    pytester.makeconftest(TOY_SUITE)
    pytester.makeini(INI)
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(toy_records()))
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(shared_cache))
    monkeypatch.delenv("TOY_TOLERANCE", raising=False)
    return pytester


def run(pytester: pytest.Pytester, *args: str, methods: str = "base") -> pytest.RunResult:
    """``pytest --prefalign toy`` in process (torch is imported once for all the tests); the
    test path comes first so that a bare ``--prefalign-compare`` does not swallow it."""
    return pytester.runpytest(
        "--prefalign", "toy", "--prefalign-methods", methods, "-p", "no:cacheprovider", *args
    )


def baseline_file(pytester: pytest.Pytester, name: str) -> Path:
    return pytester.path / ".prefalign" / "baselines" / f"{name}.json"


def save(
    pytester: pytest.Pytester, name: str = "main", *args: str, methods: str = "base"
) -> dict[str, Any]:
    """Run, store the run as baseline ``name`` and return it."""
    result = run(pytester, "--prefalign-save", name, *args, methods=methods)
    result.assert_outcomes(passed=len(methods.split(",")))
    result.stdout.fnmatch_lines([f"baseline '{name}' saved: *.prefalign/baselines/{name}.json"])
    return json.loads(baseline_file(pytester, name).read_text())


def edit(
    pytester: pytest.Pytester,
    run_file: dict[str, Any],
    name: str,
    won: Callable[[dict[str, Any]], bool],
) -> dict[str, Any]:
    """Store as ``name`` a copy of ``run_file`` in which the pairs ``won`` selects had outcome 1,
    with policy_acc (mean over users of each user's mean) and its micro form recomputed."""
    run_file = json.loads(json.dumps(run_file))
    for pair in run_file["pairs"]:
        if won(pair):
            pair["policy_correct"] = 1.0
    for row in run_file["results"]:
        mine = [p for p in run_file["pairs"] if p["method"] == row["method"]]
        by_user: dict[str, list[float]] = {}
        for pair in mine:
            by_user.setdefault(pair["user"], []).append(pair["policy_correct"])
        row["metrics"]["policy_acc"] = sum(sum(v) / len(v) for v in by_user.values()) / len(by_user)
        row["metrics"]["policy_acc_micro"] = sum(p["policy_correct"] for p in mine) / len(mine)
    baseline_file(pytester, name).write_text(json.dumps(run_file))
    return run_file


def lost(run_file: dict[str, Any]) -> list[str]:
    return sorted(p["pair_id"] for p in run_file["pairs"] if p["policy_correct"] == 0.0)


def check_known_outcomes(run_file: dict[str, Any]) -> None:
    """The premise of the known answers: the model lost exactly the long-preferred pairs."""
    assert lost(run_file) == sorted(f"{u}/t{i}" for u in USERS for i in LOST)
    assert {p["policy_correct"] for p in run_file["pairs"]} == {0.0, 1.0}  # no ties


def test_gating_module_is_light():
    code = (
        "import sys, pytest_prefalign.plumbing.gating; "
        "print(sorted(m for m in ('numpy', 'scipy', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_save_then_identical_rerun_passes(toy):
    saved = save(toy)
    check_known_outcomes(saved)
    assert saved["results"][0]["metrics"]["policy_acc"] == pytest.approx(0.6)
    result = run(toy, "--prefalign-compare-fail", "policy_acc:0pp", "--prefalign-compare")
    assert result.ret == pytest.ExitCode.OK
    result.assert_outcomes(passed=1)
    # 4 users x 5 pairs: McNemar needs 6 pairs lost, each 1/20 of policy_acc, so the gate
    # cannot find a drop under 30 pp significant, and says so (a warning, not a failure)
    result.stdout.fnmatch_lines(
        [
            "*prefalign:0: PrefalignWarning: underpowered gate: policy_acc of base on toy (tiny): "
            "with 20 pairs of 4 users at alpha 0.05, a drop smaller than 30.00 pp cannot be "
            "significant (McNemar's exact test needs at least 6 pairs that changed, all one "
            "way); the tolerance is 0 pp*",
            "*= prefalign comparison with baseline main =*",
            "suite*method*size*metric*old*new*diff*CI*p*n*tolerance*detectable*status",
            "toy*base*tiny*rouge1*nan*4*too few users to test (4 < 6)",
            "toy*base*tiny*policy_acc*0.600*0.600*+0.000*[[]+0.000, +0.000]*1*20*0 (0pp)*30.00pp*"
            "ok, underpowered",
            "0 regression(s); gates: policy_acc:0pp *; alpha 0.05; baseline file: *main.json",
            "underpowered gate: policy_acc of base on toy (tiny)*",
        ]
    )


def test_significant_drop_fails_with_the_figures(toy):
    edit(toy, save(toy), "main", won=lambda pair: True)
    result = run(toy, "--prefalign-compare", "main", "--prefalign-compare-fail", "policy_acc:2pp")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(failed=1)
    # 8 pairs lost that the baseline won, none the other way: McNemar p = 2 * 0.5**8 = 0.0078125
    result.stdout.fnmatch_lines(
        [
            "*regression against baseline 'main': policy_acc of base on toy (tiny) regressed: "
            "1.000 -> 0.600 (-0.400, 95% CI [[]*]); McNemar exact p = 0.00781 over 20 pairs "
            "of 4 users; tolerance 0.02 (2pp), alpha 0.05*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*= prefalign comparison with baseline main =*",
            "toy*base*tiny*policy_acc *1.000*0.600*-0.400*0.00781*20*0.02 (2pp)*REGRESSED",
            "toy*base*tiny*policy_acc_micro*1.000*0.600*-0.400*0.00781*20*30.00pp",
            "1 regression(s); gates: policy_acc:2pp*",
        ]
    )


def test_drop_not_significant_or_within_tolerance_passes(toy):
    saved = save(toy)
    # two pairs the baseline won: 0.7 -> 0.6 is beyond 2pp, but McNemar p = 2 * 0.5**2 = 0.5
    edit(toy, saved, "two", won=lambda pair: pair["pair_id"] in ("ann/t0", "bob/t0"))
    result = run(toy, "--prefalign-compare", "two", "--prefalign-compare-fail", "policy_acc:2pp")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "toy*base*tiny*policy_acc *0.700*0.600*-0.100*0.5*20*0.02 (2pp)*30.00pp*"
            "not significant, underpowered"
        ]
    )
    # a significant 40-point drop within a 40-point tolerance (equal is not larger)
    edit(toy, saved, "all", won=lambda pair: True)
    result = run(toy, "--prefalign-compare", "all", "--prefalign-compare-fail", "policy_acc:40pp")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["toy*base*tiny*policy_acc *1.000*0.600*-0.400*0.4 (40pp)*ok"])


def test_marker_loosens_the_gate_and_a_bad_marker_fails(toy, monkeypatch):
    edit(toy, save(toy), "main", won=lambda pair: True)
    monkeypatch.setenv("TOY_TOLERANCE", "45pp")
    result = run(toy, "--prefalign-compare", "main", "--prefalign-compare-fail", "policy_acc:2pp")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["toy*base*tiny*policy_acc *-0.400*0.45 (45pp)*ok"])
    monkeypatch.setenv("TOY_TOLERANCE", "45")
    result = run(toy, "--prefalign-compare", "main")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cannot compare with baseline 'main': marker prefalign_tolerance: invalid threshold "
            "'policy_acc:45' (no unit): give the tolerance in percentage points, policy_acc:45pp*"
        ]
    )


def test_mismatched_pairs_fail_with_a_clear_message(toy):
    save(toy, "main", "--prefalign-limit", "2")
    result = run(toy, "--prefalign-compare", "main")  # no gate: a mismatch still fails
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cannot compare with baseline 'main': base on toy (tiny): the runs were made on "
            "different pairs: 0 of the baseline's 10 pair ids are not in the current run and 10 of "
            "the current run's 20 are not in the baseline (e.g. 'cy/t0', 'cy/t1', 'cy/t2') "
            "(other data or another --prefalign-limit?)*",
            "*= prefalign comparison with baseline main =*",
            "no test was compared with the baseline",
            "*",
            "not compared, failed: cannot compare with baseline 'main': base on toy (tiny)*",
        ]
    )


def test_another_policy_reduction_is_refused_and_another_option_stated(toy):
    save(toy)  # the sum of token log-likelihoods (INI)
    gate = ("--prefalign-compare=", "--prefalign-compare-fail", "policy_acc:2pp")
    result = run(toy, *gate, "--prefalign-reduce", "mean")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*cannot compare with baseline 'main': base on toy (tiny): other settings: reduce "
         "sum -> mean (refresh the baseline, or allow the difference if it is intended: "
         "settings)*"]
    )  # fmt: skip
    result = run(toy, *gate, "--prefalign-option", "base.max_new_tokens=8")
    result.stdout.fnmatch_lines(["*base on toy (tiny): other options: max_new_tokens * -> 8*"])


def test_a_gate_on_a_metric_no_test_has_fails_the_run(toy):
    # base has no reward method, hence no RM accuracy: a gate on it checked nothing
    save(toy)
    args = ("--prefalign-compare=", "--prefalign-compare-fail", "policy_acc:2pp,rm_acc:2pp")
    result = run(toy, *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "toy*base*tiny*policy_acc *0.600*0.600*ok, underpowered",
            "FAILED the comparison: the gate rm_acc:2pp compared nothing: no test shared with "
            "the baseline has rm_acc in both runs",
        ]
    )
    assert "policy_acc:2pp compared nothing" not in result.stdout.str()


def test_a_baseline_test_missing_from_a_gated_run_fails_the_run(toy):
    # icl renamed to icl_rag, say: the gate would otherwise never see icl again
    save(toy, methods="base,icl")
    args = ("--prefalign-compare=", "--prefalign-compare-fail", "policy_acc:2pp")
    result = run(toy, *args, methods="base,icl_rag")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "toy*base*tiny*policy_acc *0.600*0.600*ok, underpowered",
            "new, not in the baseline: icl_rag on toy (tiny)",
            "FAILED the comparison: in the baseline, not compared in this run: icl on toy (tiny) "
            "(not run, deselected, renamed, or failed before a result)",
        ]
    )
    # an intended removal: allowed, and stated
    result = run(toy, *args, "--prefalign-compare-allow", "missing", methods="base,icl_rag")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        ["in the baseline, not compared in this run: icl on toy (tiny) (allowed: missing)"]
    )
    # without gates the comparison only shows: the missing test is listed, nothing fails
    result = run(toy, "--prefalign-compare=", methods="base,icl_rag")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["in the baseline, not compared in this run: icl on toy (tiny)"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--prefalign-compare", "main", "--prefalign-compare-fail", "policy_acc:2"],
            "*invalid threshold 'policy_acc:2' (no unit): give the tolerance in percentage points, "
            "policy_acc:2pp*",
        ),
        (
            ["--prefalign-compare", "main", "--prefalign-compare-fail", "bleu:2pp"],
            "*unknown metric 'bleu' in 'bleu:2pp': expected METRIC:Npp, e.g. policy_acc:2pp*",
        ),
        (
            [
                "--prefalign-compare",
                "main",
                "--prefalign-compare-fail",
                "policy_acc:2pp",
                "--prefalign-compare-fail",
                "policy_acc:3pp",
            ],
            "*policy_acc is given two thresholds*",
        ),
        (["--prefalign-compare-alpha", "5"], "*alpha must be a number between 0 and 1, got '5'*"),
        (["--prefalign-save", "../main"], "*invalid baseline name '../main'*"),
        (
            ["--prefalign-compare-fail", "policy_acc:2pp"],
            "*--prefalign-compare-fail needs --prefalign-compare*",
        ),
        (
            ["--prefalign-compare"],
            "*no baseline saved in *.prefalign/baselines: save one first with --prefalign-save*",
        ),
        (
            ["--prefalign-compare", "main"],
            "*no baseline named 'main' at *.prefalign/baselines/main.json (saved: none)*",
        ),
        (["--prefalign-compare", "runs/nope.json"], "*no run file at *runs/nope.json*"),
    ],
)
def test_usage_errors(toy, args, message):
    result = run(toy, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_bad_ini_gate_is_a_usage_error(toy):
    toy.makeini(INI + "prefalign_compare_fail = policy_acc:2%\n")
    save(toy)
    result = run(toy, "--prefalign-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini value prefalign_compare_fail: *unit '%'*policy_acc:2pp*"])


@pytest.mark.slow  # two workers import torch
def test_xdist_workers_compare_and_the_controller_summarises(toy):
    edit(toy, save(toy), "main", won=lambda pair: True)
    result = run(
        toy,
        "-n",
        "2",
        "--prefalign-compare",
        "main",
        "--prefalign-compare-fail",
        "policy_acc:2pp",
        methods="base,icl",
    )
    result.assert_outcomes(failed=1, passed=1)  # icl is new
    out = result.stdout.str()
    assert out.count("prefalign comparison with baseline main") == 1
    result.stdout.fnmatch_lines(
        [
            "*regression against baseline 'main': policy_acc of base on toy (tiny) regressed: "
            "1.000 -> 0.600*McNemar exact p = 0.00781*",
            "toy*base*tiny*policy_acc *1.000*0.600*REGRESSED",
            "1 regression(s)*",
            "new, not in the baseline: icl on toy (tiny)",
        ]
    )


def test_standalone_compare_exit_codes(toy):
    saved = save(toy)
    run_file = next((toy.path / ".prefalign" / "runs").glob("0001_*.json"))
    edit(toy, saved, "better", won=lambda pair: True)
    prefalign = str(Path(sys.executable).with_name("prefalign"))

    def compare(baseline: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [prefalign, "compare", baseline, str(run_file), "--fail", "policy_acc:2pp"],
            cwd=toy.path,
            capture_output=True,
            text=True,
        )

    same = compare("main")
    assert same.returncode == 0, same.stderr
    assert "0 regression(s); gates: policy_acc:2pp; alpha 0.05" in same.stdout
    worse = compare("better")
    assert worse.returncode == 1, worse.stderr
    assert (
        "FAILED policy_acc of base on toy (tiny) regressed: 1.000 -> 0.600 (-0.400, 95% CI"
        in worse.stdout
    )
