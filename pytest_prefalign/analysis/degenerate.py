"""Degenerate rows (docs/metrics.md, "Fluency and answers"): a generating row whose outputs are
not text of the task, so that its figures describe a broken setting, not the method.

For every generating row of a (suite, size) other than ``base`` (a row with ``fluency`` and
``not_answer``), against base's row of the same (suite, size); the trivial baselines, which
write without the model and are no distribution over texts (``lead``, ``profile_copy``: no
pair records where base has some), have no decoding setting to break and no entry:

- ``fluency_gap``: the row's mean negative log-likelihood per token minus base's (nats; both
  read by the same scorer, the base model on the plain prompt). Beyond ``MARGIN`` the row is
  degenerate: a stated margin, set from the stored runs
  (``benchmarks/working_points.py --margin``), not a test;
- ``not_answer_gap``: the row's share of outputs that are not an answer minus base's, tested
  by the one-sided sign-flip test over users (``nulls.sign_flip_greater``: each user's share
  minus base's, weighted by the user's items; the null: the row and base exchangeable within
  each user). The test is a look of the run's family (``family``, weighted Holm); it fires when
  its adjusted p-value is below the level and the gap is positive. No test below
  ``ONE_SIDED_FLOOR`` shared users, where none could be significant. A row at or below base's
  share is a look that cannot fire (its p-value near 1), and it counts: leaving it out would
  choose the family after seeing the data (a base that writes no answer at all, as the tiny
  random model's, leaves every row such a look).

- ``not_text_gap``: the row's share of outputs that are not text at all minus base's (its
  items' ``not_answer_rule`` one of ``answers.TEXT_RULES``: empty, only labels, another
  language, a loop; the rule an item's record names is the first it breaks, so an output that
  copies the input's opening and then loops counts as a copy here). Beyond ``TEXT_MARGIN``
  the row is degenerate: a stated margin, not a test, as the fluency margin. The not-an-answer
  test cannot see such rows where their loops take the place of base's copies of the input,
  which count the same, nor at few users once adjusted in the run's family; and the fluency
  margin passes loops, which the base model reads as likely text. None where an item names no
  rule (a run file written before items did): that criterion is then not applied.

``flagged``: any of them. A flagged row keeps its figures; the summary says that its comparisons
(tau, inversions, regret, ICL against it) are about a broken setting, not the method.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from pytest_prefalign.analysis import nulls, users
from pytest_prefalign.analysis.answers import TEXT_RULES
from pytest_prefalign.analysis.metrics import finite
from pytest_prefalign.runs.entries import DegenerateEntry
from pytest_prefalign.runs.records import CaseResult

ALPHA = 0.05
# nats per token above base's fluency. Set from the stored runs (working_points.py --margin,
# docs/metrics.md): the users' own Pref-LaMP titles cost 2.2 more than base's greedy outputs
# (2.22 at 135m, 2.25 at 270m), so a row must be less fluent than the users' own writing, by a
# quarter of a nat, to be flagged on fluency; the gibberish rows of the 135m run (args[pal],
# bon) are 3.3 above base
MARGIN = 2.5
# share of outputs that are not text at all above base's. Set from the stored runs
# (docs/metrics.md, "Fluency and answers"): at their working points every guided row of the
# findings runs and of the main job writes at most 0.10 more such outputs than base (0.104:
# Polis 135m's icl; 0.095: the main job's args[history_bt]); at w = 4 of the strength sweep the
# hidden-state heads' loops and invented words are 0.21 and 0.24 above base (main job's users)
TEXT_MARGIN = 0.2
FLUENCY, NOT_ANSWER = "fluency", "not_answer"
RULE = "not_answer_rule"  # an item's value: the first rule of answers.RULES it breaks, or None
# the fewest users, all one way, that make the one-sided sign-flip test significant: 0.5**5
ONE_SIDED_FLOOR = next(k for k in range(1, 64) if 0.5**k < ALPHA)


def entries(results: Iterable[CaseResult]) -> list[DegenerateEntry]:
    """One entry per generating row other than base, in the run's order, for the (suite, size)s
    that have a base row; ``p_holm`` and ``fires`` come from the family, ``flagged`` and
    ``reason`` from ``state``."""
    results = list(results)
    base = {
        (r.suite, r.size): r
        for r in results
        if r.decoder == "base" and not r.reward and _generating(r)
    }
    found = []
    for row in results:
        reference = base.get((row.suite, row.size))
        if reference is None or row is reference or not _generating(row):
            continue
        if reference.n_pairs and not row.n_pairs:
            continue  # a decoder that is no distribution over texts (lead, profile_copy)
        found.append(_entry(row, reference))
    return found


def _generating(row: CaseResult) -> bool:
    return finite(row.metrics.get(FLUENCY)) and finite(row.metrics.get(NOT_ANSWER))


def _entry(row: CaseResult, base: CaseResult) -> DegenerateEntry:
    fluency, fluency_base = users.figure(row, FLUENCY), users.figure(base, FLUENCY)
    not_answer, not_answer_base = users.figure(row, NOT_ANSWER), users.figure(base, NOT_ANSWER)
    fluency_gap = fluency - fluency_base
    answer_gap = not_answer - not_answer_base
    _, fluency_ci, _ = users.difference(row, base, FLUENCY)
    _, answer_ci, _ = users.difference(row, base, NOT_ANSWER)
    shared, d, w = users.paired_differences(row, base, NOT_ANSWER)
    p_value = None
    if len(shared) >= ONE_SIDED_FLOOR:
        p_value = nulls.sign_flip_greater(d, w)[0]
    not_text, not_text_base = not_text_share(row), not_text_share(base)
    text_gap = None
    if not_text is not None and not_text_base is not None:
        text_gap = round(not_text - not_text_base, 12)
    return DegenerateEntry(
        suite=row.suite,
        size=row.size,
        method=row.method,
        decoder=row.decoder,
        fluency=fluency,
        fluency_base=fluency_base,
        fluency_gap=round(fluency_gap, 12),
        fluency_gap_ci=fluency_ci,
        margin=MARGIN,
        not_answer=not_answer,
        not_answer_base=not_answer_base,
        not_answer_gap=round(answer_gap, 12),
        not_answer_gap_ci=answer_ci,
        n_users=len(shared),
        test="one-sided sign flip over users of the not-an-answer share minus base's",
        p_value=p_value,
        holds=answer_gap > 0,
        flagged=False,
        reason="",
        not_text=not_text,
        not_text_base=not_text_base,
        not_text_gap=text_gap,
        text_margin=TEXT_MARGIN if text_gap is not None else None,
    )


def not_text_share(row: CaseResult) -> float | None:
    """The share of the row's outputs that are not text at all (their item's rule one of
    ``answers.TEXT_RULES``); None where the row has no items, or an item names no rule."""
    if not row.items or any(RULE not in item.values for item in row.items):
        return None
    broken = sum(item.values[RULE] in TEXT_RULES for item in row.items)
    return round(broken / len(row.items), 12)


def broken(entry: DegenerateEntry) -> bool:
    """Whether the row's share of outputs that are not text is above base's by more than its
    margin (False where the share is not known)."""
    gap, margin = entry.not_text_gap, entry.text_margin
    return gap is not None and margin is not None and gap > margin


def state(entry: DegenerateEntry) -> DegenerateEntry:
    """The entry with its ``flagged`` and ``reason`` from its fluency gap and its adjusted
    p-value (``p_holm`` and ``fires``, set by the family)."""
    reasons = []
    if entry.fluency_gap > MARGIN:
        reasons.append(
            f"fluency {entry.fluency:.2f} nats/token against base's "
            f"{entry.fluency_base:.2f} (worse by {entry.fluency_gap:.2f}, beyond the "
            f"margin of {MARGIN:g})"
        )
    if entry.fires and entry.p_holm is not None:
        reasons.append(
            f"{entry.not_answer:.0%} of its outputs are not an answer against base's "
            f"{entry.not_answer_base:.0%} (p_holm {entry.p_holm:.3g})"
        )
    if broken(entry):
        reasons.append(
            f"{entry.not_text:.0%} of its outputs are not text (empty, labels only, another "
            f"language, a loop) against base's {entry.not_text_base:.0%} (beyond the margin of "
            f"{entry.text_margin:g})"
        )
    if reasons:
        reason = "; ".join(reasons)
    elif entry.p_value is None:
        reason = (
            f"fluent and writing text within the margins; {entry.n_users} users: too few for "
            f"the test of its not-an-answer share (p >= {0.5 ** max(entry.n_users, 0):.2g})"
        )
    else:
        p_holm = entry.p_holm
        shown = "-" if p_holm is None or not math.isfinite(p_holm) else f"{p_holm:.3g}"
        reason = (
            "fluent and writing text within the margins, and its not-an-answer share not "
            f"significantly above base's (p_holm {shown})"
        )
    return replace(entry, flagged=bool(reasons), reason=reason)
