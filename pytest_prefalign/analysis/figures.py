"""A result's figures from its records: each metric of the catalogue pooled over users (macro)
or over observations (micro), with its bootstrap interval over users and each user's mean. The
evaluation makes a row's figures so (``evaluation/case.py``), and ``prefalign pool`` makes them
again from the records of a suite's folds (``analysis/folds.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pytest_prefalign.analysis import catalogue, metrics
from pytest_prefalign.runs.parts import Record


def figures(
    records: Mapping[str, Sequence[Record]],
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, dict[str, float]]]:
    """``(metrics, ci, per_user)``: each catalogue metric whose record field has observations,
    pooled over users (macro) or over observations (micro), with a 95% bootstrap interval over
    users and each user's mean where the catalogue asks for them."""
    values, ci, per_user = {}, {}, {}
    for metric in catalogue.metrics():
        observed = [
            (r.value(metric.field), r.user)
            for r in records.get(metric.level, ())
            if r.value(metric.field) is not None
        ]
        if not observed:
            continue
        outcomes = np.asarray([v for v, _ in observed], dtype=np.float64)
        users = [u for _, u in observed]
        means = metrics.per_user_mean(outcomes, users)
        # rounded: the same accuracy summed over users in another order must tie exactly in
        # tau, inversions and regret
        values[metric.name] = round(
            float(np.mean(list(means.values())) if metric.pooling == "macro" else outcomes.mean()),
            metrics.FIGURE_DIGITS,
        )
        if metric.interval:
            low, high = metrics.bootstrap_ci(outcomes, users, statistic=metric.pooling, seed=0)
            ci[metric.name] = [float(low), float(high)]
            per_user[metric.name] = {u: float(v) for u, v in means.items()}
    return values, ci, per_user
