"""The paper's claims as rules on figures: the verdicts of docs/findings.md, decided from numbers.

Rezk et al. (arXiv 2512.23067) state three claims; each rule here takes the figures a run (or a
simulated run) gives and says **holds**, **does not hold** or **not enough evidence**. They take
numbers, never verdict strings, so that a direction is read from a sign and the same rule
serves the findings page (``benchmarks/findings.py``), the power simulations (``power.py``)
and ``prefalign report``.

1. RM accuracy is a weak predictor of policy accuracy (Kendall's tau 0.08 to 0.31).
2. Large RM-accuracy differences give nearly the same ROUGE-1.
3. In-context learning writes closer to the user than reward-guided decoding (the run's own
   ICL verdict, adjusted with its other looks).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace

from pytest_prefalign.analysis import catalogue, crisis, projection, selection, users
from pytest_prefalign.analysis.selection import Paired
from pytest_prefalign.runs.entries import TauEntry
from pytest_prefalign.runs.records import CaseResult, RunFile

# each claim's title (the findings page's headings, prefalign report's claims table) and short
# name (the power table's rows)
TITLES = {
    "tau": "1. RM accuracy is a weak predictor of policy accuracy",
    "spread": "2. Large RM-accuracy differences, nearly the same ROUGE-1",
    "icl": "3. In-context learning against the best reward-guided method",
}
SHORT = {"tau": "1. tau weak", "spread": "2. spread", "icl": "3. ICL ahead"}


def base(name: str) -> str:
    """The claim a power curve's name is about ("spread@0.01": claim 2 at a stated ROUGE-1
    difference of 0.01)."""
    return name.split("@")[0]


PAPER_TAU = (0.08, 0.31)  # the paper's range of tau across its three datasets
PAPER_TAU_MIDDLE = 0.2  # the effect claim 1's power is simulated at: the middle of that range
NEAR = 0.02  # ROUGE-1 differences within this (2 points) count as nearly the same
# An RM-accuracy difference counts as large from 10 points, its interval above that (the
# paper's own is 20 points; 10 is stated here, before any run, as the smallest gap whose
# policy consequences the claim speaks of: docs/metrics.md, "Verdicts")
MIN_GAP = 0.10
PAPER_GAP = 0.20  # the paper's RM-accuracy gap, the effect claim 2's power is simulated at
PAPER_ICL_GAIN = 0.03  # ICL's ROUGE-1 lead at 7B, the effect claim 3's power is simulated at
ALPHA = 0.05

HOLDS = "holds"
FAILS = "does not hold"
UNDECIDED = "not enough evidence"


def tau_claim(enough: bool, lower: float | None, upper: float | None) -> str:
    """Claim 1 from tau's 95% interval over these methods, users the unit (the projection of
    simultaneous intervals on every pairwise difference, ``projection``; each bound is also a
    one-sided 95% bound): it **holds** on positive evidence only, both bounds inside (-0.31,
    0.31) (an equivalence statement); it **does not hold** where the lower bound is above 0.31
    (RM accuracy orders the methods as policy accuracy does) or the upper bound below -0.31
    (the opposite order, also no weak predictor); else not enough evidence. ``enough``: the
    analysis found the design able to say anything (``crisis._thin_evidence``)."""
    if not enough or lower is None or upper is None:
        return UNDECIDED
    if not (math.isfinite(lower) and math.isfinite(upper)):
        return UNDECIDED
    bound = PAPER_TAU[1]
    if -bound < lower and upper < bound:
        return HOLDS
    if lower > bound:
        return FAILS
    if upper < -bound:
        return FAILS + " (the opposite order)"
    return UNDECIDED


def tau_entry_claim(entry: TauEntry) -> str:
    """Claim 1 on a run's tau entry (a run file written before ``lower_95`` was kept reads
    with the interval's 2.5th percentile in its place: ``runs/records.py``'s upgrader)."""
    return tau_claim(entry.enough, entry.lower_95, entry.upper_95)


def projected(entry: TauEntry, results: Iterable[CaseResult]) -> TauEntry:
    """``entry`` with tau's projection interval (``crisis.tau_interval``, the analysis's own
    seed and resamples), computed again from the run's results where its file was written
    before the projection interval was kept (issue 64: the percentile bootstrap of tau it
    holds does not cover where methods lie close); as it is otherwise."""
    if entry.interval:  # kept in the file
        return entry
    group = crisis.reward_groups(results).get((entry.suite, entry.size, entry.decoder), [])
    rows = [r for r in group if r.method in entry.methods]
    if len(rows) != len(entry.methods):
        return entry
    found = crisis.tau_interval(rows, entry.y)
    return replace(
        entry, ci=found.ci, lower_95=found.lower, upper_95=found.upper,
        interval=projection.METHOD, resolved_pairs=found.resolved,
    )  # fmt: skip


def spread_claim(
    p_range: float | None,
    rm_diff: float,
    rm_ci: Sequence[float] | None,
    rouge_diff: float,
    rouge_ci: Sequence[float] | None,
    rm_p: float | None,
    rm_lower: float | None,
) -> str:
    """Claim 2 on the methods with the highest and the lowest RM accuracy of a decoder
    (``rm_diff`` the highest minus the lowest, ``rouge_diff`` the same two rows' ROUGE-1).

    The RM-accuracy difference is large only when two tests find the pair apart and its
    selection-aware lower bound (``rm_lower``: ``selection.gap_lower``, which holds for
    whichever pair the data chose) is at least ``MIN_GAP``: the within-user permutation test
    of the range (``p_range``: choosing the two extremes on the same data is part of its null,
    but it rejects where any methods differ) and the two rows' own paired sign-flip test
    (``rm_p``: these two rows differ, whatever the others do). The pair's own interval
    (``rm_ci``) wholly below ``MIN_GAP`` says the two are not far apart (the claim is not about
    them). Then ROUGE-1's 95% interval (``rouge_ci``) against the margin +-``NEAR`` decides:
    wholly inside it, nearly the same (**holds**, an equivalence statement); wholly outside
    it, not nearly the same (**does not hold**, its direction read from the two differences'
    signs); across an edge of it, not enough evidence. A ROUGE-1 difference that is real but
    inside the margin is the claim true, so a significant difference alone never says it is
    false (issue 64: it did, more surely as users grew). Without a gap shown, neither: ROUGE-1
    can neither confirm nor refute a claim about large gaps."""
    gap = gap_state(p_range, rm_diff, rm_ci, rm_p, rm_lower)
    if gap == "small":
        return f"no large RM-accuracy gap (below {MIN_GAP:.2f})"
    if gap != "large" or not rouge_ci:
        return UNDECIDED
    low, high = rouge_ci
    if -NEAR <= low and high <= NEAR:
        return HOLDS
    if low > NEAR or high < -NEAR:
        same_way = (rouge_diff > 0) == (rm_diff > 0)
        way = "ROUGE-1 follows RM accuracy" if same_way else "ROUGE-1 the other way"
        return f"{FAILS} ({way})"
    return UNDECIDED


def gap_state(
    p_range: float | None,
    rm_diff: float,
    rm_ci: Sequence[float] | None,
    rm_p: float | None,
    rm_lower: float | None,
) -> str | None:
    """What claim 2's RM-accuracy comparison shows (``spread_claim``'s first half): "large"
    (the range test and the pair's own test significant, the selection-aware lower bound at
    least ``MIN_GAP``), "small" (the range test significant, the pair's interval wholly below
    ``MIN_GAP``) or None (neither shown; a comparison without a test or a bound shows
    nothing)."""
    if p_range is None or p_range >= ALPHA or not rm_ci:
        return None
    if rm_ci[1] < MIN_GAP:
        return "small"
    if rm_lower is None or rm_p is None:
        return None
    return "large" if rm_lower >= MIN_GAP and rm_p < ALPHA and rm_diff > 0 else None


def gap_shown(rm: Gap) -> bool:
    """Whether claim 2's RM-accuracy comparison (``spread_entries``' ``rm``) shows a large gap,
    so that ROUGE-1 decides the claim."""
    return gap_state(rm.p_range, rm.diff, rm.ci, rm.p_value, rm.lower) == "large"


def icl_claim(icl: str, rgd: str, verdict: str) -> str:
    """Claim 3 from the run's ICL comparison (its verdict adjusted with the run's other looks):
    it holds at this size where the run states the ICL row better than the best reward-guided
    row, does not hold where it states that row better."""
    if verdict == f"{icl} better":
        return "holds at this size"
    if verdict == f"{rgd} better":
        return "does not hold at this size"
    return UNDECIDED


@dataclass(frozen=True)
class Gap(Paired):
    """RM accuracy's paired comparison of claim 2's two rows (``selection.paired``), with the
    range test's p-value over every row of their decoder (``p_range``: ``selection.range_test``)
    and the pair's selection-aware lower bound (``lower``: ``selection.gap_lower``); each None
    where it could not be computed."""

    p_range: float | None = None
    lower: float | None = None


@dataclass(frozen=True)
class SpreadClaim:
    """Claim 2 on one (suite, size, decoder): the methods with the highest and the lowest RM
    accuracy (``high``, ``low``), their paired differences on RM accuracy (``rm``) and on
    ROUGE-1 (``rouge``), and the claim's verdict (``claim``)."""

    suite: str
    size: str
    decoder: str
    high: CaseResult
    low: CaseResult
    rm: Gap
    rouge: Paired
    claim: str


def spread_verdict(rm: Gap, rouge: Paired) -> str:
    """Claim 2 from two paired comparisons, RM accuracy's carrying the range test's
    ``p_range`` and the pair's selection-aware lower bound ``lower``."""
    return spread_claim(rm.p_range, rm.diff, rm.ci, rouge.diff, rouge.ci, rm.p_value, rm.lower)


def spread_entries(results: Iterable[CaseResult]) -> list[SpreadClaim]:
    """Claim 2 per (suite, size, decoder) with two reward methods or more."""
    x, text = catalogue.x_metric(), catalogue.text_metric()  # RM accuracy, ROUGE-1
    out = []
    for (suite, size, decoder), rows in crisis.reward_groups(results).items():
        rows = [r for r in rows if text in r.per_user and x in r.per_user]
        if len(rows) < 2:
            continue
        high = max(rows, key=lambda r: users.figure(r, x))
        low = min(rows, key=lambda r: users.figure(r, x))
        if high is low or users.figure(high, x) == users.figure(low, x):
            continue
        rm = Gap(
            **asdict(selection.paired(high, low, x)),
            p_range=selection.range_test(rows, x),
            lower=selection.gap_lower(rows, x, rows.index(high), rows.index(low)),
        )
        rouge = selection.paired(high, low, text)
        claim = spread_verdict(rm, rouge)
        out.append(SpreadClaim(suite, size, decoder, high, low, rm, rouge, claim))
    return out


# (suite, size, decoder): the decoder at one strength for the strength sweep's rows
# (``CaseResult.panel``, ``args@w=0.25``); claim 3's decoder is the ICL row's
Where = tuple[str, str, str]


def run_claims(run: RunFile) -> dict[tuple[Where, str], str]:
    """Every claim's verdict a run allows, by ((suite, size, decoder), claim): claim 1 on tau
    over the plotted y per decoder with 3 reward methods or more, claim 2 per decoder with 2 or
    more, claim 3 per ICL row."""
    found: dict[tuple[Where, str], str] = {}
    for e in run.tau:
        if e.y == catalogue.plotted() and e.n_methods >= 3:
            claim = tau_entry_claim(projected(e, run.results))
            found[((e.suite, e.size, e.decoder), "tau")] = claim
    for s in spread_entries(run.results):
        found[((s.suite, s.size, s.decoder), "spread")] = s.claim
    for icl in run.crisis.icl_vs_rgd:
        found[((icl.suite, icl.size, icl.icl), "icl")] = icl_claim(icl.icl, icl.rgd, icl.verdict)
    return found
