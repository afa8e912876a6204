"""``prefalign pool``: the run files of a cross-fitted suite's folds pooled into one run, each
row's figures made again from every fold's records, worked out by hand here; fold runs that are
not one design are refused naming what differs. End to end: two real fold runs of Pref-LaMP
(the tiny model writing the pairs) pooled by the command."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from pytest_prefalign import cli
from pytest_prefalign.analysis import comparable, table
from pytest_prefalign.analysis.folds import PoolError, per_fold, pool
from pytest_prefalign.runs import records
from pytest_prefalign.runs.header import RunOutcomes
from pytest_prefalign.runs.parts import Counts, Fingerprint, Strength
from pytest_prefalign.runs.records import CaseResult, RunFile

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def result(
    method: str, fold: int, pairs: list[tuple[str, str, float, float]], **data
) -> CaseResult:
    """A row of fold ``fold`` of 2 with pair records ``(pair id, user, policy, rm)``."""
    options = {"negatives": "style", "folds": "2", "fold": str(fold), **data}
    return CaseResult(
        suite="pref_lamp",
        method=method,
        size="135m",
        decoder=method.split("[")[0],
        reward=method[method.index("[") + 1 : -1] if "[" in method else None,
        model={"name": "m", "fingerprint": "f", "weights": "w"},
        data={
            "provenance": {
                "options": options,
                "cross_fit": {"folds": 2, "fold": fold, "test_briefs": len(pairs)},
            }
        },
        guidance={"strength": {"option": "w", "value": 0.5 + fold, "how": "chosen"}},
        options={"w": 0.5 + fold, "k": 10},
        judge={
            "n": len(pairs),
            "independent": "minilm",
            "counts": {"win_self": {"wins": 1, "ties": 0, "losses": fold}, "win_independent": None},
        },
        cache=[
            {
                "artifact": "results",
                "key": "k",
                "hit": False,
                "inputs": {"evaluation": "e1", "decoder": "d1"},
            }
        ],  # fmt: skip
        timings={"generate_s": 1.0 + fold},
        pairs=[
            {"pair_id": p, "user": u, "policy_correct": pc, "rm_correct": rm}
            for p, u, pc, rm in pairs
        ],
    )


FOLD0 = [("a/1", "ann", 1.0, 1.0), ("a/2", "ann", 0.0, 1.0), ("b/1", "bob", 1.0, 0.0)]
FOLD1 = [("a/3", "ann", 1.0, 0.0), ("b/2", "bob", 0.0, 0.0), ("b/3", "bob", 0.5, 1.0),
         ("c/1", "cat", 1.0, 1.0)]  # fmt: skip
METHODS = ["bon[global_bt]", "bon[pal]"]


def fold_run(fold: int, records, methods=METHODS, **config) -> RunFile:
    return RunFile(
        [result(m, fold, records) for m in methods],
        commit="c1",
        config={"methods": methods, "sizes": ["135m"], "seed": 0, **config},
    )


def test_each_row_is_pooled_over_every_fold_s_records_as_worked_out_by_hand():
    run, left_out = pool(
        [(Path("f1.json"), fold_run(1, FOLD1)), (Path("f0.json"), fold_run(0, FOLD0))]
    )
    assert left_out == []
    row = run.results[0]
    assert [p.pair_id for p in row.pairs] == ["a/1", "a/2", "b/1", "a/3", "b/2", "b/3", "c/1"]
    assert (row.n_pairs, row.n_users) == (7, 3)
    # policy accuracy, macro: ann 2/3, bob (1 + 0 + 0.5) / 3, cat 1; their mean
    assert row.per_user["policy_acc"] == pytest.approx({"ann": 2 / 3, "bob": 0.5, "cat": 1.0})
    assert row.metrics["policy_acc"] == pytest.approx((2 / 3 + 0.5 + 1.0) / 3, abs=1e-4)
    # RM accuracy: ann 2/3, bob 1/3, cat 1
    assert row.metrics["rm_acc"] == pytest.approx((2 / 3 + 1 / 3 + 1.0) / 3, abs=1e-4)
    low, high = row.ci["policy_acc"]
    assert low <= row.metrics["policy_acc"] <= high
    # each fold's working point and provenance kept, in fold order; the times summed; the
    # strength each fold chose named in the options and the working-points line
    assert [g.strength.value for g in row.guidance.folds] == [0.5, 1.5]
    assert row.guidance.strength == Strength(option="w", how="chosen per fold", values=(0.5, 1.5))
    assert row.options == {"w": (0.5, 1.5), "k": 10}
    assert table.working_points([row]) == [
        "  working points: bon[global_bt] w=0.5/1.5 (chosen per fold)"
    ]
    # the judge's counts summed; one it could not ask in any fold stays None
    assert row.judge.n == 7 and row.judge.counts["win_independent"] is None
    assert row.judge.counts["win_self"] == Counts(wins=2, ties=0, losses=1)
    assert [f.fold for f in row.data.provenance.cross_fit.pooled] == [0, 1]
    assert row.timings["generate_s"] == 3.0
    assert [f.fold for f in run.config.pooled_folds] == [1, 0] and run.config.args is None
    # the run's analysis is made again over the pooled rows (two reward methods: tau needs
    # more, so none; the run file is whole)
    assert run.complete and len(run.results) == 2


def test_a_plugins_metric_not_installed_here_is_left_out_and_named():
    runs = [fold_run(0, FOLD0), fold_run(1, FOLD1)]
    for run in runs:
        metrics = {**run.results[0].metrics, "my_metric": 0.5}
        run.results[0] = replace(run.results[0], metrics=metrics)
    _, left_out = pool([(Path(f"f{k}.json"), run) for k, run in enumerate(runs)])
    assert left_out == ["my_metric (bon[global_bt])"]


def refit(result: CaseResult, cross_fit: dict | None) -> CaseResult:
    """The result with another fold in its provenance (None: none)."""
    data = result.data.to_json()
    data["provenance"]["cross_fit"] = cross_fit
    return replace(result, data=data)


def rejudge(result: CaseResult, independent: str | None) -> CaseResult:
    """The result with another independent judge."""
    return replace(result, judge=replace(result.judge, independent=independent))


def mismatched(kind: str) -> list[RunFile]:
    zero, one = fold_run(0, FOLD0), fold_run(1, FOLD1)
    if kind == "twice":
        one = fold_run(0, FOLD1)
    elif kind == "missing":
        return [zero]
    elif kind == "count":
        one.results[0] = refit(one.results[0], {"folds": 3, "fold": 1})
    elif kind == "not a fold":
        one.results[1] = refit(one.results[1], None)
    elif kind == "test":  # it failed in fold 1
        one.results = one.results[:1]
    elif kind == "option":
        one = fold_run(1, FOLD1, seed=1)
    elif kind == "suite option":
        one = RunFile([result(m, 1, FOLD1, writer="other") for m in METHODS], commit="c1",
                      config=zero.config)  # fmt: skip
    elif kind == "commit":
        one.commit = "c2"
    elif kind == "model":
        model = {"name": "m", "fingerprint": "f", "weights": "w2"}
        one.results[0] = replace(one.results[0], model=model)
    elif kind == "code":
        cache = [{"artifact": "results", "key": "k", "hit": False, "inputs": {"evaluation": "e2"}}]
        one.results[0] = replace(one.results[0], cache=cache)
    elif kind == "reward":
        one.results[1] = replace(one.results[1], reward_version="2.0")
    elif kind == "judge":
        one.results[0] = rejudge(one.results[0], None)
    elif kind == "other judge":
        one.results[0] = rejudge(one.results[0], "e5 (12 pairs, 2 users)")
    return [zero, one]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("twice", "f1.json: fold 0 of 2 is given twice (also f0.json)"),
        ("missing", "fold 1 of 2 missing: give the run files of all 2 folds"),
        ("count", "f1.json: results of several folds (fold 1 of 2, fold 1 of 3)"),
        ("not a fold", "is not of a fold"),
        ("test", "bon[pal] on pref_lamp (135m) has no result in fold(s) 1"),
        ("option", "seed is 0 in f0.json but 1 in f1.json"),
        ("suite option", "pref_lamp was run with other options: writer is None in f0.json"),
        ("commit", "commit c1 in f0.json, c2 in f1.json"),
        ("model", "are not folds of one design"),
        ("code", "the folds ran other code: the evaluation code is e1 in f0.json but e2"),
        ("reward", "the reward method's version is None in fold 0 but '2.0' in fold 1"),
        ("judge", "the independent judge is 'minilm' in fold 0 but None in fold 1"),
        ("other judge", "the independent judge is 'minilm' in fold 0 but 'e5 (12 pairs"),
    ],
)
def test_runs_that_are_not_the_folds_of_one_design_are_refused(kind, message):
    runs = [(Path(f"f{k}.json"), run) for k, run in enumerate(mismatched(kind))]
    with pytest.raises(PoolError) as failure:
        pool(runs)
    assert message in str(failure.value)


def test_a_judge_fitted_on_each_fold_s_own_training_pairs_pools_though_its_counts_differ():
    # the independent judge is fitted per fold, so its description's counts differ by design
    # (the findings run of 2026-12-06: 328 pairs in fold 0, 333 in fold 1)
    zero, one = fold_run(0, FOLD0), fold_run(1, FOLD1)
    for run, count in ((zero, 328), (one, 333)):
        run.results = [rejudge(row, f"minilm ({count} pairs, 40 users)") for row in run.results]
    pooled, _ = pool([(Path("f0.json"), zero), (Path("f1.json"), one)])
    folds_judges = [part.independent for part in pooled.results[0].judge.folds]
    assert folds_judges == ["minilm (328 pairs, 40 users)", "minilm (333 pairs, 40 users)"]


def test_two_pooled_runs_whose_training_pairs_differ_in_one_fold_are_told_apart():
    def pooled(train_fingerprint: str) -> CaseResult:
        zero, one = fold_run(0, FOLD0), fold_run(1, FOLD1)
        for run, train in ((zero, "t0"), (one, train_fingerprint)):
            fingerprint = Fingerprint(all="a" + train, train_pairs=train)
            run.results = [
                replace(row, data=replace(row.data, fingerprint=fingerprint)) for row in run.results
            ]
        return pool([(Path("f0.json"), zero), (Path("f1.json"), one)])[0].results[0]

    same = comparable.case_differences(pooled("t1"), pooled("t1"))
    assert not [d for d in same if d.kind == "data"]
    other = comparable.case_differences(pooled("t1"), pooled("t9"))
    assert any("the training pairs differ" in d.text for d in other if d.kind == "data")


def test_the_outcomes_of_the_folds_say_a_test_passed_only_where_every_fold_passed_it():
    zero, one = fold_run(0, FOLD0), fold_run(1, FOLD1)
    zero.outcomes = RunOutcomes(selected=2, passed=("t1", "t2"))
    one.outcomes = RunOutcomes(selected=2, passed=("t1",), failed=("t2",), incomplete=("x",))
    run, _ = pool([(Path("f0.json"), zero), (Path("f1.json"), one)])
    assert run.outcomes.selected == 2
    assert run.outcomes.passed == ("t1",) and run.outcomes.failed == ("t2",)
    assert run.outcomes.incomplete == ("f1.json: x",)


@pytest.mark.skipif(not (DATA / "acl-anthology").is_dir(), reason=f"no data at {DATA}")
def test_two_real_fold_runs_pooled_by_the_command(pytester: pytest.Pytester, monkeypatch):
    """Each fold a run of its own (the tiny model writing the pairs); pooled, every pair of
    both, each paper tested once, and the figures those of the pooled records."""
    pytester.makeini(f"[pytest]\nprefalign_models = 135m = tiny\nprefalign_data = {DATA}\n")
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    for fold in (0, 1):
        folder = pytester.path / "suites" / f"pref_lamp_fold{fold}"
        folder.mkdir(parents=True)
        (folder / "suite.toml").write_text(
            '[suite]\nname = "pref_lamp"\n[options]\nnegatives = "style"\nwriter = "tiny"\n'
            f"folds = 2\nfold = {fold}\n"
        )
        result = pytester.runpytest_subprocess(
            "--prefalign", f"suites/pref_lamp_fold{fold}", "-p", "no:cacheprovider",
            "--prefalign-limit", "2", "--prefalign-methods", "base,lead",
            "--prefalign-json", f"fold{fold}.json",
        )  # fmt: skip
        result.assert_outcomes(passed=2)
    paths = [str(pytester.path / f"fold{k}.json") for k in (0, 1)]
    out = pytester.path / "pooled.json"
    assert cli.main(["pool", *paths, "--out", str(out)]) == 0
    pooled, runs = records.read(out), [records.read(Path(p)) for p in paths]
    for row in pooled.results:
        parts = [run.result(row.key) for run in runs]
        ids = [p.pair_id for part in parts if part for p in part.pairs]
        assert [p.pair_id for p in row.pairs] == ids and len(set(ids)) == len(ids)
        assert row.n_items == sum(part.n_items for part in parts if part)
        if row.method == "base":
            assert ids  # a policy: pairs scored in both folds
            users = sorted({p.user for p in row.pairs})
            means = [np.mean([p.value("policy_correct") for p in row.pairs if p.user == u])
                     for u in users]  # fmt: skip
            assert row.metrics["policy_acc"] == pytest.approx(np.mean(means), abs=1e-4)
    # a run file as any other: the report reads it
    assert cli.main(["report", str(out), "--out", str(pytester.path / "page")]) == 0
    assert (pytester.path / "page" / "report.html").is_file()
    assert cli.main(["pool", paths[0], paths[0], "--out", str(out)]) == 2


def test_the_judge_s_identity_is_read_from_the_description_the_real_judge_writes():
    # judge_identity strips the counts in the form methods/rewards/judge.py writes them: a
    # change of that form must show here, not as folds refused
    from methods.rewards.judge import ENCODER_NAME, IndependentJudge
    from pytest_prefalign.analysis.folds import judge_identity

    def described(pairs: int, users: int) -> str:
        heads = {f"u{k}": np.zeros(2) for k in range(users)}
        return IndependentJudge(None, np.zeros(4), heads, pairs).description  # type: ignore[arg-type]

    assert judge_identity(described(328, 40)) == judge_identity(described(333, 39))
    assert judge_identity(described(328, 40)).startswith(ENCODER_NAME)
    assert "pairs" not in judge_identity(described(328, 40))


def test_an_option_already_per_fold_is_kept_where_every_fold_has_it_else_refused():
    assert per_fold([{"w": (0.5, 1.5), "k": 10}, {"w": (0.5, 1.5)}]) == {
        "w": (0.5, 1.5),
        "k": (10, None),
    }
    with pytest.raises(PoolError, match=r"option 'w' is already per fold .*\(0\.5, 1\.5\)"):
        per_fold([{"w": (0.5, 1.5)}, {"w": 2.0}])
