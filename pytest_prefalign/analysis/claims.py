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
    """Claim 1 from tau's one-sided 95% bounds over these methods, users resampled: it
    **holds** on positive evidence only, both bounds inside (-0.31, 0.31) (two one-sided tests
    at 5%, an equivalence statement); it **does not hold** where the lower bound is above 0.31
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


def spread_claim(
    p_range: float | None,
    rm_diff: float,
    rm_ci: tuple[float, float] | list[float] | None,
    rouge_diff: float,
    rouge_ci: tuple[float, float] | list[float] | None,
    rouge_p: float | None,
) -> str:
    """Claim 2 on the methods with the highest and the lowest RM accuracy of a decoder
    (``rm_diff`` the highest minus the lowest, ``rouge_diff`` the same two rows' ROUGE-1).

    The RM-accuracy difference is large only when the within-user permutation test of the
    range finds the methods apart (``p_range``: choosing the two extremes on the same data is
    part of its null) and its interval lies above ``MIN_GAP``; an interval wholly below says the
    two are not far apart (the claim is not about them). ROUGE-1 is nearly the same only by
    equivalence: its interval within +-``NEAR`` and its paired test not significant. A
    significant ROUGE-1 difference, either way, does not hold; its direction is read from the
    two differences' signs."""
    if p_range is None or p_range >= ALPHA or not rm_ci:
        return UNDECIDED
    if rm_ci[1] < MIN_GAP:
        return f"no large RM-accuracy gap (below {MIN_GAP:.2f})"
    if rm_ci[0] < MIN_GAP:
        return UNDECIDED
    if rouge_p is not None and rouge_p < ALPHA and rouge_diff != 0:
        same_way = (rouge_diff > 0) == (rm_diff > 0)
        way = "ROUGE-1 follows RM accuracy" if same_way else "ROUGE-1 the other way"
        return f"{FAILS} ({way})"
    if rouge_ci and -NEAR <= rouge_ci[0] and rouge_ci[1] <= NEAR:
        return HOLDS
    return UNDECIDED


def icl_claim(icl: str, rgd: str, verdict: str) -> str:
    """Claim 3 from the run's ICL comparison (its verdict adjusted with the run's other looks):
    it holds at this size where the run states the ICL row better than the best reward-guided
    row, does not hold where it states that row better."""
    if verdict == f"{icl} better":
        return "holds at this size"
    if verdict == f"{rgd} better":
        return "does not hold at this size"
    return UNDECIDED
