"""The policy score's reduction (docs/metrics.md, "RM accuracy and policy accuracy"): the sum of
the token log-likelihoods by default, the mean by option, and both in the run file.

The known answer, on the toy project of tests/test_plugin.py with the tiny model of seed 0, the
``base`` decoder (``log pi_base(y | prompt)``), worked out from the model's token log-likelihoods
(``LM.response_logprobs``):

=====  ====================================  ================  ==================
user   chosen | rejected (tokens)            sum               mean
=====  ====================================  ================  ==================
ann    Cat on a mat | Dogs run (7 | 9)       -45.87 > -62.44   -6.553 > -6.937
ann    Milk for cats | A parade (9 | 7)      -58.52 < -48.74   -6.502 > -6.963
bob    Dog in the park | Cats nap (9 | 7)    -63.42 < -48.70   -7.046 < -6.957
=====  ====================================  ================  ==================

So by the sum ann wins 1 of 2 and bob 0 of 1: macro policy accuracy (1/2 + 0) / 2 = 0.25; by the
mean ann wins both: (1 + 0) / 2 = 0.5. The second pair tells the two reductions apart.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import test_plugin as toy_project
from test_plugin import RECORDS, run

from prefalign_methods.decoders.base import BaseDecoder
from pytest_prefalign.api import REDUCTIONS, Batch, CaseContext, Decoder, SuiteData, policy_scores

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy

SUM, MEAN = 0.25, 0.5  # macro policy accuracy of base by each reduction (the table above)


def expected_outcomes(tiny_lm) -> dict[str, dict[str, float]]:
    """Each toy pair's outcome by each reduction, from the model's token log-likelihoods."""
    out: dict[str, dict[str, float]] = {how: {} for how in REDUCTIONS}
    for rec in RECORDS:
        for i, (text, chosen, rejected) in enumerate(rec["tests"]):
            prompt = f"Write a title for: {text}"
            won, lost = tiny_lm.response_logprobs([prompt, prompt], [chosen, rejected])
            for how, reduce in (("sum", np.sum), ("mean", np.mean)):
                a, b = float(reduce(won)), float(reduce(lost))
                out[how][f"{rec['user']}/t{i}"] = 1.0 if a > b else 0.0 if a < b else 0.5
    return out


def base_run(toy, *args: str) -> dict:
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base", *args)
    result.assert_outcomes(passed=1)
    return json.loads((toy.path / "a.json").read_text())


def test_the_run_file_keeps_both_reductions_and_the_default_is_the_sum(toy, tiny_lm):
    expected = expected_outcomes(tiny_lm)
    assert expected["sum"] != expected["mean"]  # the known answer tells them apart
    run_file = base_run(toy, "--prefalign-json", "a.json")
    (row,) = run_file["results"]
    assert row["settings"]["reduce"] == "sum"
    for pair in run_file["pairs"]:
        for how in REDUCTIONS:
            assert pair[f"policy_correct_{how}"] == expected[how][pair["pair_id"]]
        assert pair["policy_correct"] == pair["policy_correct_sum"]
    metrics = row["metrics"]
    assert metrics["policy_acc_sum"] == pytest.approx(SUM)
    assert metrics["policy_acc_mean"] == pytest.approx(MEAN)
    assert metrics["policy_acc"] == metrics["policy_acc_sum"]
    for name in ("policy_acc_sum", "policy_acc_mean"):
        assert len(row["ci"][name]) == 2 and set(row["per_user"][name]) == {"ann", "bob"}
    assert row["per_user"]["policy_acc_mean"] == {"ann": 1.0, "bob": 0.0}


def test_the_mean_by_option_keeps_the_sum_beside_it(toy):
    run_file = base_run(toy, "--prefalign-json", "a.json", "--prefalign-reduce", "mean")
    (row,) = run_file["results"]
    assert row["settings"]["reduce"] == "mean"
    assert row["metrics"]["policy_acc"] == pytest.approx(MEAN)
    assert row["metrics"]["policy_acc_sum"] == pytest.approx(SUM)
    assert all(p["policy_correct"] == p["policy_correct_mean"] for p in run_file["pairs"])


def test_a_cached_result_of_one_reduction_is_not_served_to_the_other(toy):
    """The results are keyed by the reduction: the mean after the sum scores the pairs again,
    and each run's ``policy_acc`` is its own reduction's."""
    summed = base_run(toy, "--prefalign-json", "a.json")
    meant = base_run(toy, "--prefalign-json", "a.json", "--prefalign-reduce", "mean")
    again = base_run(toy, "--prefalign-json", "a.json")
    figures = [r["results"][0]["metrics"]["policy_acc"] for r in (summed, meant, again)]
    assert figures == pytest.approx([SUM, MEAN, SUM])


# --------------------------------------------------------------------------------------------
# The decoder interface: loglik or logliks
# --------------------------------------------------------------------------------------------


def context(tiny_lm, reduce: str = "sum") -> CaseContext:
    data = SuiteData("toy", "test", profiles={}, items=[])
    return CaseContext(lm=tiny_lm, suite=None, data=data, reward=None, reduce=reduce)  # type: ignore[arg-type]


ARGS = (["ann", "bob"], ["Write a title for: cats", "Write a title for: dogs"], ["Cats", "Dogs"])


def test_a_context_sums_by_default_and_loglik_is_logliks_under_its_reduction(tiny_lm):
    assert CaseContext.__dataclass_fields__["reduce"].default == "sum"
    both = BaseDecoder().logliks(context(tiny_lm), Batch(*ARGS))
    assert set(both) == set(REDUCTIONS)
    for how in REDUCTIONS:
        np.testing.assert_array_equal(
            BaseDecoder().loglik(context(tiny_lm, how), Batch(*ARGS)), both[how]
        )


class Shifted(BaseDecoder):
    """A built-in decoder's subclass that redefines only ``loglik`` (as written before
    ``logliks`` existed): its own score must be used for both reductions."""

    name = "shifted"

    def loglik(self, ctx, batch: Batch) -> np.ndarray:
        return super().loglik(ctx, batch) + 100.0


def test_a_subclass_redefining_loglik_is_scored_by_it_under_both_reductions(tiny_lm):
    base = BaseDecoder().logliks(context(tiny_lm), Batch(*ARGS))
    got = policy_scores(Shifted(), context(tiny_lm), Batch(*ARGS))
    for how in REDUCTIONS:
        np.testing.assert_allclose(got[how], base[how] + 100.0)


def test_a_decoder_defining_neither_says_so(tiny_lm):
    class Nothing(Decoder):
        name = "nothing"

    with pytest.raises(NotImplementedError, match="'nothing' defines neither loglik nor logliks"):
        policy_scores(Nothing(), context(tiny_lm), Batch(*ARGS))
    with pytest.raises(NotImplementedError, match="defines neither"):
        Nothing().loglik(context(tiny_lm), Batch(*ARGS))
