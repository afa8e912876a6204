"""Comparing the figures of two run files (for the cache tests)."""

from __future__ import annotations

import pytest

SCORES = ("rm_chosen", "rm_rejected", "policy_chosen", "policy_rejected")
# metrics that are means of model scores (NLL per token), not of outcomes: recomputed in other
# batches they agree to float rounding too
SCORED_METRICS = ("fluency",)


def figures(run: dict) -> dict:
    """Every figure of a run: metrics per row, per-item outputs, per-pair outcomes and
    scores."""
    return {
        "metrics": {
            r["method"]: {k: v for k, v in r["metrics"].items() if k not in SCORED_METRICS}
            for r in run["results"]
        },
        "items": sorted((r["method"], r["item_id"], r["output"]) for r in run["items"]),
        "outcomes": sorted(
            (r["method"], r["pair_id"], r["rm_correct"], r["policy_correct"]) for r in run["pairs"]
        ),
        # scores recomputed in other batches agree to float rounding, not to the last bit
        "scores": {
            (r["method"], r["pair_id"], name): r[name]
            for r in run["pairs"]
            for name in SCORES
            if r[name] is not None
        }
        | {
            (r["method"], "", name): r["metrics"][name]
            for r in run["results"]
            for name in SCORED_METRICS
            if name in r["metrics"]
        },
    }


def same_figures(a: dict, b: dict) -> bool:
    """The same figures: metrics, outputs and outcomes to the last bit; per-pair scores and the
    metrics that average scores (fluency), which are recomputed in other batches, to float
    rounding."""
    fa, fb = figures(a), figures(b)
    scores = fa.pop("scores")
    return fa == {k: v for k, v in fb.items() if k != "scores"} and fb["scores"] == pytest.approx(
        scores, rel=1e-5, abs=1e-5
    )
