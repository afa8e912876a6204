"""Degenerate rows (``analysis/degenerate.py``) on hand-made results: the fluency margin, the
one-sided sign-flip test of the not-an-answer share against base's worked out by hand, the
test as a look of the run's family, the run file's ``degenerate`` entries and the summary's
words for a flagged row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from pytest_prefalign.analysis import crisis, degenerate, nulls, summary
from pytest_prefalign.runs.entries import DegenerateEntry
from pytest_prefalign.runs.parts import ItemRecord
from pytest_prefalign.runs.records import CaseResult, RunFile

USERS = [f"u{i:02d}" for i in range(10)]


def row(
    method: str, users: list[str] = USERS, n_pairs: int = 20, **per_user: float | list[float]
) -> CaseResult:
    """A generating row: each figure the same for every user, or one value per user; with
    ``n_pairs`` pair records (0: a decoder that is no policy)."""
    decoder, _, reward = method.partition("[")
    figures = {
        name: dict(zip(users, v if isinstance(v, list) else [v] * len(users), strict=True))
        for name, v in per_user.items()
    }
    return CaseResult(
        suite="s",
        size="135m",
        method=method,
        decoder=decoder,
        reward=reward.rstrip("]") or None,
        n_users=len(users),
        n_pairs=n_pairs,
        metrics={k: float(np.mean(list(v.values()))) for k, v in figures.items()},
        per_user=figures,
    )


BASE = row("base", fluency=2.0, not_answer=0.1)


def entry_of(results: list[CaseResult], method: str) -> DegenerateEntry:
    _, found = crisis.analyse(results)
    return next(e for e in found.degenerate if e.method == method)


def test_the_one_sided_floor_and_sign_flip_by_hand() -> None:
    # one-sided: five users all one way give 0.5**5 = 0.031 < 0.05; four give 0.0625
    assert degenerate.ONE_SIDED_FLOOR == 5
    # diffs (0.5, 0.5, 0.5, 0.5, -0.1), equal weights: the observed sum 1.9; of the 32 sign
    # patterns only the observed one and the one flipping the -0.1 (sum 2.1) reach 1.9
    p, exact = nulls.sign_flip_greater(np.array([0.5, 0.5, 0.5, 0.5, -0.1]), np.ones(5))
    assert exact and p == pytest.approx(2 / 32)
    # the other direction is not evidence: all five negative is the least extreme pattern
    p, _ = nulls.sign_flip_greater(-np.full(5, 0.5), np.ones(5))
    assert p == pytest.approx(1.0)
    assert nulls.sign_flip_greater(np.zeros(6), np.ones(6)) == (1.0, True)


def test_a_row_like_base_is_not_flagged() -> None:
    e = entry_of([BASE, row("icl", fluency=2.3, not_answer=0.1)], "icl")
    assert e.fluency_gap == pytest.approx(0.3) and e.not_answer_gap == pytest.approx(0.0)
    assert e.p_value == 1.0 and not e.fires and not e.flagged
    assert e.reason.startswith("fluent and writing text within the margins")
    assert e.not_text is None and e.not_text_gap is None  # no item records: not applied


def test_the_margin_sits_between_the_users_own_titles_and_the_gibberish_rows() -> None:
    # measured (docs/metrics.md): base 0.61 nats/token on Pref-LaMP 135m, the users' own titles
    # 2.82 (+2.22), args[pal]'s gibberish 3.97 (+3.36); at 270m the titles are +2.25
    assert 2.25 < degenerate.MARGIN < 3.3
    base = row("base", fluency=0.61, not_answer=0.1)
    own = entry_of([base, row("icl", fluency=2.82, not_answer=0.1)], "icl")
    pal = entry_of([base, row("args[pal]", fluency=3.97, not_answer=0.1)], "args[pal]")
    assert not own.flagged and pal.flagged


def test_fluency_beyond_the_margin_flags_without_a_test() -> None:
    gap = degenerate.MARGIN + 0.2
    e = entry_of([BASE, row("args[pal]", fluency=2.0 + gap, not_answer=0.1)], "args[pal]")
    assert e.flagged and not e.fires
    assert e.fluency_gap == pytest.approx(gap)
    assert f"beyond the margin of {degenerate.MARGIN:g}" in e.reason


def test_a_share_above_base_flags_when_its_adjusted_test_fires() -> None:
    # ten users all 0.5 above base: p = 1/1024 (only the observed pattern reaches it); three
    # looks in the family's one kind, so Holm gives the smallest 3/1024
    results = [
        BASE,
        row("icl", fluency=2.0, not_answer=0.1),
        row("args[vpl]", fluency=2.1, not_answer=0.1),
        row("args[pal]", fluency=2.0, not_answer=0.6),
    ]
    _, found = crisis.analyse(results)
    e = next(x for x in found.degenerate if x.method == "args[pal]")
    assert e.p_value == pytest.approx(1 / 1024)
    assert e.p_holm == pytest.approx(3 / 1024)
    assert e.fires and e.flagged
    assert "60% of its outputs are not an answer against base's 10%" in e.reason
    assert found.family.by_kind == {"degenerate": 3}
    written = e.to_json()
    for key in ("suite", "size", "method", "fluency_gap", "not_answer_gap", "p_value", "p_holm"):
        assert key in written
    assert isinstance(e.flagged, bool) and isinstance(e.reason, str)


def with_rules(result: CaseResult, rules: list[str | None]) -> CaseResult:
    """``result`` with one item record per rule (an item's ``not_answer_rule``), users in turn."""
    items = [
        ItemRecord(
            suite=result.suite,
            method=result.method,
            size=result.size,
            item_id=f"i{n}",
            user=USERS[n % len(USERS)],
            values={"not_answer_rule": rule},
        )
        for n, rule in enumerate(rules)
    ]
    return replace(result, items=tuple(items))


def test_outputs_that_are_not_text_beyond_the_margin_flag_without_a_test() -> None:
    # 20 items each; base: one loop (0.05). args[pref]: 6 loops or other languages and 2
    # copies, which are answers' faults, not text's -> 6/20 = 0.30, +0.25 beyond the margin 0.2;
    # its not-an-answer share the same as base's, so the test sees nothing
    base = with_rules(BASE, ["loop"] + ["copy"] * 1 + [None] * 18)
    broken = ["loop"] * 4 + ["language"] * 2 + ["copy"] * 2 + [None] * 12
    pref = with_rules(row("args[pref]", fluency=2.2, not_answer=0.1), broken)
    e = entry_of([base, pref], "args[pref]")
    assert (e.not_text, e.not_text_base) == (pytest.approx(0.3), pytest.approx(0.05))
    assert e.not_text_gap == pytest.approx(0.25) and e.text_margin == degenerate.TEXT_MARGIN
    assert e.flagged and not e.fires
    assert "30% of its outputs are not text" in e.reason
    assert "against base's 5% (beyond the margin of 0.2)" in e.reason
    # four of twenty (+0.15) stays within it: the working points' loops are no flag
    within = with_rules(row("args[vpl]", fluency=2.2, not_answer=0.1), ["loop"] * 4 + [None] * 16)
    e = entry_of([base, within], "args[vpl]")
    assert e.not_text_gap == pytest.approx(0.15) and not e.flagged
    assert e.reason.startswith("fluent and writing text within the margins")


def test_the_text_margin_sits_between_the_working_points_and_the_swept_w4_rows() -> None:
    # measured (docs/metrics.md): working points at most +0.104 above base; the sweep's w = 4
    # rows of the hidden-state heads +0.21 and +0.24 (the main job's 8 users)
    assert 0.104 < degenerate.TEXT_MARGIN < 0.21


def test_rows_whose_items_name_no_rule_are_not_judged_on_text() -> None:
    # a run file written before items named their rule: the criterion is not applied
    base = with_rules(BASE, [None] * 10)
    old = replace(
        row("args[pref]", fluency=2.0, not_answer=0.1),
        items=tuple(
            ItemRecord(suite="s", method="args[pref]", size="135m", item_id=f"i{n}", user="u00")
            for n in range(10)
        ),
    )
    e = entry_of([base, old], "args[pref]")
    assert e.not_text is None and e.not_text_base == 0.0
    assert e.not_text_gap is None and e.text_margin is None and not e.flagged
    assert degenerate.not_text_share(replace(BASE, items=())) is None


def test_a_share_above_base_in_too_few_users_makes_no_look() -> None:
    few = USERS[:4]
    base = row("base", few, fluency=2.0, not_answer=0.0)
    e = entry_of([base, row("icl", few, fluency=2.0, not_answer=1.0)], "icl")
    assert e.p_value is None and e.p_holm is None and not e.flagged
    assert "4 users: too few" in e.reason


def test_a_row_that_cannot_be_above_base_is_a_look_at_p_one() -> None:
    # base never answers: every row is at or below it, and each is a look of the family
    base = row("base", fluency=2.0, not_answer=1.0)
    _, found = crisis.analyse([base, row("icl", fluency=2.0, not_answer=[0.5] * 10)])
    (e,) = found.degenerate
    assert e.p_value == pytest.approx(1.0) and not e.fires
    assert found.family.by_kind == {"degenerate": 1}


def test_base_and_rows_without_the_figures_or_without_base_get_no_entry() -> None:
    other_suite = replace(row("icl", fluency=5.0, not_answer=1.0), suite="t")
    older = row("args[pal]", rouge1=0.1)  # a row from before the figures were recorded
    lead = row("lead", n_pairs=0, fluency=2.5, not_answer=1.0)  # writes without the model
    _, found = crisis.analyse([BASE, other_suite, older, lead])
    assert found.degenerate == ()


def test_the_summary_says_a_flagged_rows_comparisons_are_about_a_broken_setting() -> None:
    results = [BASE, row("args[pal]", fluency=5.5, not_answer=0.1)]
    tau, found = crisis.analyse(results)
    lines = summary.summary_lines(RunFile(results, tau=tau, crisis=found))
    text = " ".join(lines)
    assert "Degenerate rows (1 of 1 checked against base" in text
    assert "! args[pal] (s · 135m): fluency 5.50 nats/token against base's 2.00" in text
    assert "about a broken setting, not the method" in text


def test_the_summary_names_the_text_margin_and_a_row_it_flags() -> None:
    base = with_rules(BASE, [None] * 20)
    pref = with_rules(row("args[pref]", fluency=2.2, not_answer=0.1), ["loop"] * 6 + [None] * 14)
    results = [base, pref]
    tau, found = crisis.analyse(results)
    text = " ".join(summary.summary_lines(RunFile(results, tau=tau, crisis=found)))
    assert "not text above base's by more than 0.2" in text
    assert "! args[pref] (s · 135m): 30% of its outputs are not text" in text


def test_no_summary_for_a_run_of_healthy_rows_without_reward_methods() -> None:
    results = [BASE, row("icl", fluency=2.0, not_answer=0.1)]
    tau, found = crisis.analyse(results)
    assert summary.summary_lines(RunFile(results, tau=tau, crisis=found)) == []


def test_the_share_test_holds_its_level_under_the_null() -> None:
    # 2000 simulated (row, base) pairs of 8 users whose shares come from one distribution (each
    # user's 6 items not an answer with the user's own chance): the one-sided test fires at
    # most 5% of the time (within three Monte Carlo standard errors)
    rng = np.random.default_rng(0)
    fired = 0
    sims = 2000
    for n in range(sims):
        # half the runs with chances near 1, where base's share is often 1
        chance = rng.uniform(0.0, 0.5, size=8) if n % 2 else rng.uniform(0.85, 1.0, size=8)
        row_share = rng.binomial(6, chance) / 6
        base_share = rng.binomial(6, chance) / 6
        p, _ = nulls.sign_flip_greater(row_share - base_share, np.full(8, 6.0))
        fired += p < 0.05
    assert fired / sims <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / sims)
