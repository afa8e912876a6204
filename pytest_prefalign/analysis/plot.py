"""The report's scatter plot: RM accuracy against policy accuracy, one labelled point per
reward method with its intervals as error bars, base's policy accuracy as a line, one panel per
(suite, size). matplotlib through its object API with the Agg canvas (the process-wide pyplot
backend is never touched); ImportError without it."""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, TypeGuard

from pytest_prefalign.runs.records import CaseResult

Point = tuple[str, float, float]  # (method, RM accuracy, policy accuracy)


def scatter_points(results: Sequence[CaseResult]) -> dict[tuple[str, str], list[Point]]:
    """One point per reward method with both figures, per (suite, size)."""
    points: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for row in results:
        x, y = row.metrics.get("rm_acc"), row.metrics.get("policy_acc")
        if row.reward and _finite(x) and _finite(y):
            points[(row.suite, row.size)].append((row.method, float(x), float(y)))
    return dict(sorted(points.items()))


def scatter_extras(results: Sequence[CaseResult]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (suite, size): each reward method's intervals of both figures (error bars) and
    base's policy accuracy (a reference line)."""
    extras: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"errors": {}})
    for row in results:
        key = (row.suite, row.size)
        if row.reward and "rm_acc" in row.ci and "policy_acc" in row.ci:
            extras[key]["errors"][row.method] = (row.ci["rm_acc"], row.ci["policy_acc"])
        if row.decoder == "base" and not row.reward and _finite(row.metrics.get("policy_acc")):
            extras[key]["base"] = row.metrics["policy_acc"]
    return dict(extras)


def render_plot(
    points: dict[tuple[str, str], list[Point]],
    extras: dict[tuple[str, str], dict[str, Any]] | None = None,
) -> tuple[bytes, list[tuple]]:
    """The PNG, and what was drawn read back from the figure: ``(panel title, label, x, y)``
    for every labelled point (so a test checks the figure, not the input). Raises ImportError
    without matplotlib."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation

    n = max(1, len(points))
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(5 * cols, 4.5 * rows), layout="constrained")
    FigureCanvasAgg(fig)
    for k, ((suite, size), pts) in enumerate(points.items()):
        _panel(
            fig.add_subplot(rows, cols, k + 1),
            f"{suite} · {size}",
            pts,
            (extras or {}).get((suite, size), {}),
        )
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110)
    drawn = [
        (ax.get_title(), t.get_text(), float(t.xy[0]), float(t.xy[1]))
        for ax in fig.axes
        for t in ax.texts
        if isinstance(t, Annotation)
    ]
    return buffer.getvalue(), drawn


def _panel(ax: Any, title: str, pts: list[Point], extra: dict[str, Any]) -> None:
    xs, ys = [p[1] for p in pts], [p[2] for p in pts]
    errors = extra.get("errors", {})
    ends = [v for name, _, _ in pts for ci in errors.get(name, ()) for v in ci]
    lo = min(0.4, *xs, *ys, *ends) - 0.02
    hi = max(0.8, *xs, *ys, *ends) + 0.02
    ax.plot([lo, hi], [lo, hi], ls="--", lw=0.8, color="#999", label="policy = RM")
    ax.axhline(0.5, lw=0.6, color="#ccc")
    ax.axvline(0.5, lw=0.6, color="#ccc")
    if "base" in extra:
        ax.axhline(extra["base"], lw=1.0, ls=":", color="#c33", label="base policy accuracy")
    for name, x, y in pts:
        if name in errors:
            (x_lo, x_hi), (y_lo, y_hi) = errors[name]
            ax.errorbar(
                x,
                y,
                xerr=[[x - x_lo], [x_hi - x]],
                yerr=[[y - y_lo], [y_hi - y]],
                fmt="none",
                lw=0.7,
                color="#5a7fb0",
                zorder=2,
            )
    ax.scatter(xs, ys, s=30, zorder=3)
    span = hi - lo
    places = label_places(pts, span)
    for (name, x, y), label_y in zip(pts, places, strict=True):
        moved = abs(label_y - y) > 1e-12
        ax.annotate(
            name,
            (x, y),
            xytext=(x + span * 0.012, label_y + span * 0.008),
            textcoords="data",
            fontsize=8,
            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "#888"} if moved else None,
        )
    top = max([hi, *(y + LABEL_GAP * span for y in places)])
    ax.set(
        xlim=(lo, hi),
        ylim=(lo, top),
        xlabel="RM accuracy (macro)",
        ylabel="policy accuracy (macro)",
        title=title,
    )


LABEL_GAP = 0.04  # least vertical distance between two labels, as a share of the axis span
LABEL_WIDTH = 0.3  # labels whose points are nearer than this (share of the span) may collide


def label_places(pts: list[Point], span: float) -> list[float]:
    """The height of each point's label: at the point, or pushed up just enough to clear the
    labels of lower points that are near it horizontally (methods with the same RM accuracy
    otherwise print their names over each other)."""
    gap, width = LABEL_GAP * span, LABEL_WIDTH * span
    placed: list[tuple[float, float]] = []
    heights = [0.0] * len(pts)
    for i in sorted(range(len(pts)), key=lambda i: (pts[i][2], pts[i][1])):
        _, x, y = pts[i]
        label_y, moved = y, True
        while moved:
            moved = False
            for px, py in placed:
                # (a label exactly one gap above another clears it, whatever the rounding)
                if abs(px - x) < width and abs(py - label_y) < gap * (1 - 1e-9):
                    label_y, moved = py + gap, True
        placed.append((x, label_y))
        heights[i] = label_y
    return heights


def _finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, int | float) and math.isfinite(value)
