"""The report's plot: RM accuracy (x) against policy accuracy (y), one labelled point per
reward method with its intervals as error bars, base's policy accuracy as a line, one panel per
(suite, size). Each label sits beside its point, or, where points
crowd, a little further out with a leader line to it (``place_labels``).

matplotlib is used through its object API with the Agg canvas, so the process-wide pyplot backend
is never touched; it is imported on use (``pip install pytest-prefalign[report]``).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_prefalign.analysis import catalogue
from pytest_prefalign.analysis.metrics import finite
from pytest_prefalign.runs.records import CaseResult

Point = tuple[str, float, float]  # (method, RM accuracy, policy accuracy)


def scatter_points(results: Sequence[CaseResult]) -> dict[tuple[str, str], list[Point]]:
    """One point per reward method with both figures (the catalogue's x and plotted), per
    (suite, size), at its working point (the strength sweep's rows are in their own tables)."""
    x_metric, y_metric = catalogue.x_metric(), catalogue.plotted()
    points: dict[tuple[str, str], list[Point]] = defaultdict(list)
    for row in results:
        x, y = row.metrics.get(x_metric), row.metrics.get(y_metric)
        if row.reward and row.sweep is None and finite(x) and finite(y):
            points[(row.suite, row.size)].append((row.method, float(x), float(y)))
    return dict(sorted(points.items()))


@dataclass(frozen=True)
class Extras:
    """What a panel draws beside its points: each reward method's intervals of both figures
    (``errors``: method -> (RM accuracy's, policy accuracy's), as error bars) and base's policy
    accuracy (``base``, a reference line; None where the panel has no base row)."""

    errors: Mapping[str, tuple[Sequence[float], Sequence[float]]] = field(default_factory=dict)
    base: float | None = None


def scatter_extras(results: Sequence[CaseResult]) -> dict[tuple[str, str], Extras]:
    """Per (suite, size): each reward method's intervals of both figures (error bars) and
    base's policy accuracy (a reference line)."""
    x, y = catalogue.x_metric(), catalogue.plotted()
    errors: dict[tuple[str, str], dict[str, tuple[Sequence[float], Sequence[float]]]] = {}
    bases: dict[tuple[str, str], float] = {}
    for row in results:
        key = (row.suite, row.size)
        if row.reward and x in row.ci and y in row.ci:
            errors.setdefault(key, {})[row.method] = (row.ci[x], row.ci[y])
        base = row.metrics.get(y)
        if row.decoder == "base" and not row.reward and finite(base):
            bases[key] = base
    return {key: Extras(errors.get(key, {}), bases.get(key)) for key in {**errors, **bases}}


def render_plot(
    points: dict[tuple[str, str], list[Point]],
    extras: dict[tuple[str, str], Extras] | None = None,
) -> tuple[bytes, list[tuple]]:
    """The PNG, and what was drawn read back from the figure: ``(panel title, label, x, y)``
    for every labelled point (so a test checks the figure, not the input). Raises ImportError
    without matplotlib."""
    from matplotlib.text import Annotation

    fig = plot_figure(points, extras)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI)
    drawn = [
        (ax.get_title(), t.get_text(), float(t.xy[0]), float(t.xy[1]))
        for ax in fig.axes
        for t in ax.texts
        if isinstance(t, Annotation)
    ]
    return buffer.getvalue(), drawn


DPI = 110
MARKER = 30  # the points' marker area, in points squared


def plot_figure(
    points: dict[tuple[str, str], list[Point]],
    extras: dict[tuple[str, str], Extras] | None = None,
) -> Any:
    """The figure: one panel per (suite, size), its labels placed beside their points."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = max(1, len(points))
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(5 * cols, 4.5 * rows), layout="constrained", dpi=DPI)
    FigureCanvasAgg(fig)
    panels = [
        (
            _panel(
                fig.add_subplot(rows, cols, k + 1),
                f"{suite} · {size}",
                pts,
                (extras or {}).get((suite, size), Extras()),
            ),
            pts,
        )
        for k, ((suite, size), pts) in enumerate(points.items())
    ]
    fig.draw_without_rendering()  # the layout settles first: labels are placed on screen
    for ax, pts in panels:
        place_labels(ax, pts)
    return fig


def _panel(ax: Any, title: str, pts: list[Point], extra: Extras) -> Any:
    xs, ys = [p[1] for p in pts], [p[2] for p in pts]
    errors = extra.errors
    ends = [v for name, _, _ in pts for ci in errors.get(name, ()) for v in ci]
    lo = min(0.4, *xs, *ys, *ends) - 0.02
    hi = max(0.8, *xs, *ys, *ends) + 0.02
    ax.plot([lo, hi], [lo, hi], ls="--", lw=0.8, color="#999", label="policy = RM")
    ax.axhline(0.5, lw=0.6, color="#ccc")
    ax.axvline(0.5, lw=0.6, color="#ccc")
    if extra.base is not None:
        ax.axhline(extra.base, lw=1.0, ls=":", color="#c33", label="base policy accuracy")
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
    ax.scatter(xs, ys, s=MARKER, zorder=3)
    ax.set(
        xlim=(lo, hi),
        ylim=(lo, hi),
        xlabel="RM accuracy (macro)",
        ylabel="policy accuracy (macro)",
        title=title,
    )
    return ax


# where a label may sit, in points from its marker (and how it is aligned there): beside it
# first, then further out with a leader line to it
SIDES = (
    (6, 3, "left", "bottom"),
    (6, -3, "left", "top"),
    (-6, 3, "right", "bottom"),
    (-6, -3, "right", "top"),
    (0, 7, "center", "bottom"),
    (0, -7, "center", "top"),
    (8, 0, "left", "center"),
    (-8, 0, "right", "center"),
    (5, 7, "left", "bottom"),
    (-5, 7, "right", "bottom"),
    (5, -7, "left", "top"),
    (-5, -7, "right", "top"),
)
RINGS = (1.0, 2.0, 3.0, 4.5, 6.0, 8.0, 10.0, 13.0)


def place_labels(ax: Any, pts: list[Point]) -> None:
    """Label each point beside it: the first place around it (nearest first) whose text box is
    inside the panel, clear of the labels placed before and of every other point, and nearer to
    its own point than to any other; further out, a leader line joins it to its point and runs
    clear of the other points and labels. Where no place is clear, the least crowded one."""
    from matplotlib.text import Text

    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    radius = math.sqrt(MARKER) / 2 * ax.figure.dpi / 72 + 1  # a marker, in pixels
    centres = [ax.transData.transform((x, y)) for _, x, y in pts]
    taken: list[Any] = []
    for i in sorted(range(len(pts)), key=lambda i: (pts[i][2], pts[i][1])):
        name, x, y = pts[i]
        place = Place(
            frame, taken, centres[i], [c for j, c in enumerate(centres) if j != i], radius
        )
        best: tuple[float, Any, Any] | None = None
        for ring, (dx, dy, ha, va) in [(r, s) for r in RINGS for s in SIDES]:
            label = _label(ax, name, x, y, (dx * ring, dy * ring), ha, va, leader=ring > 1)
            label.update_positions(renderer)
            box = Text.get_window_extent(label, renderer)  # the text's box, not its leader
            cost = place.cost(box, leader=ring > 1)
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, label, box)
            else:
                label.remove()
            if cost == 0:
                break
        assert best is not None  # there is always a first candidate
        taken.append(best[2])


@dataclass(frozen=True)
class Place:
    """What a label's place must keep clear of, in display pixels."""

    frame: Any  # the panel
    taken: list[Any]  # the boxes of the labels placed before
    own: Any  # its point
    others: list[Any]  # the other points
    radius: float  # a marker's

    def cost(self, box: Any, leader: bool) -> float:
        """0 for a clear place; more the more it hides or strays."""
        cost = 0.0 if self._inside(box) else 1000.0
        cost += 100.0 * sum(box.overlaps(other) for other in self.taken)
        cost += 100.0 * sum(self._covers(box, point) for point in self.others)
        if leader:
            cost += 50.0 * self._leader_crossings(box)
        elif not all(_distance(box, self.own) < _distance(box, p) for p in self.others):
            cost += 50.0  # beside another point as much as its own: read as the other's label
        return cost

    def _inside(self, box: Any) -> bool:
        f = self.frame
        return box.x0 >= f.x0 and box.x1 <= f.x1 and box.y0 >= f.y0 and box.y1 <= f.y1

    def _covers(self, box: Any, point: Any) -> bool:
        x, y = point
        r = self.radius
        return box.x0 - r < x < box.x1 + r and box.y0 - r < y < box.y1 + r

    def _leader_crossings(self, box: Any) -> int:
        """Points and labels that the line from the point to its label's nearest edge crosses."""
        x, y = self.own
        end = (min(max(x, box.x0), box.x1), min(max(y, box.y0), box.y1))
        path = [(x + (end[0] - x) * k / 20, y + (end[1] - y) * k / 20) for k in range(1, 20)]
        points = sum(
            any(math.hypot(px - ox, py - oy) < self.radius for px, py in path)
            for ox, oy in self.others
        )
        labels = sum(
            any(b.x0 <= px <= b.x1 and b.y0 <= py <= b.y1 for px, py in path) for b in self.taken
        )
        return points + labels


def _distance(box: Any, point: Any) -> float:
    x, y = point
    return math.hypot(max(box.x0 - x, 0.0, x - box.x1), max(box.y0 - y, 0.0, y - box.y1))


def _label(
    ax: Any, name: str, x: float, y: float, offset: tuple[float, float], ha: str, va: str,
    leader: bool,
) -> Any:  # fmt: skip
    label = ax.annotate(
        name, (x, y), xytext=offset, textcoords="offset points", ha=ha, va=va, fontsize=8,
        arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "#888"} if leader else None,
    )  # fmt: skip
    label.set_in_layout(False)  # the layout is settled; a label must not move the panel
    return label
