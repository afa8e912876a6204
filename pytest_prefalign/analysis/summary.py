"""Rendering only: the crisis analysis stored in a run file, as the terminal summary prints it
after the leaderboards (and as tables the HTML report embeds). Every statement it prints was
made by the analysis (``crisis``, ``regret``, ``spread``, ``selection``) only when its test's
p-value, adjusted by Holm with every other look of the run (``family``), is below the level;
everything else is printed as what it is: no evidence, or not enough evidence and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pytest_prefalign.analysis import claims, family, power, projection, wrap
from pytest_prefalign.runs.entries import (
    CircularEntry,
    DegenerateEntry,
    IclEntry,
    InversionEntry,
    RegretEntry,
    SpreadEntry,
    TauEntry,
)
from pytest_prefalign.runs.records import RunFile

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.analysis.selection import RowComparison

MAX_LISTED = 10  # entries printed per section before "... and N more"


def summary_lines(run: RunFile, width: int | None = None) -> list[str]:
    """The crisis section: the degenerate rows first (they qualify everything after), tau,
    selection regret, inversions, ICL against the best reward-guided row, circular evaluation,
    per-user spread. Empty when the run has no reward-guided method and no degenerate row.
    With a ``width`` (the terminal's), no line is wider: tables wrap their cells, sentences
    their words."""
    crisis = run.crisis
    taus, circular = run.tau, crisis.circular
    degenerate = crisis.degenerate
    flagged = any(e.flagged for e in degenerate)
    if not taus and not circular and not crisis.icl_vs_rgd and not flagged:
        return []
    lines: list[str] = degenerate_lines(degenerate)
    if taus:
        lines += [
            "",
            "Does RM accuracy pick the method that generates best? Kendall's tau-b "
            "across the reward methods of each decoder (exact permutation p, and p_holm "
            "adjusted with the run's other looks; 95% interval: the lowest and highest tau "
            "over the orderings that simultaneous 95% intervals on every pairwise difference "
            "allow, users resampled)",
        ]
        lines += tau_table(taus, width=width).splitlines()
        lines += estimand_lines(taus)
        if any(not e.enough and e.tau is not None for e in taus):
            lines.append(
                "(in parentheses: an estimate without enough evidence to read, for the "
                "reasons its verdict gives; no look)"
            )
    lines += regret_lines(crisis.regret, width)
    lines += inversion_lines(crisis.inversions, width)
    lines += icl_lines(crisis.icl_vs_rgd, width)
    lines += circular_lines(circular, width)
    lines += spread_lines(crisis.spread, width)
    described = family.describe(crisis.family)
    if described:
        lines += ["", described]
    return fit_prose(lines, width)


def estimand_lines(entries: Sequence[TauEntry]) -> list[str]:
    """What each number of methods' tau states and what it cannot (``projection``): one line
    per number of methods among the entries with a tau."""
    counts = sorted({e.n_methods for e in entries if e.tau is not None and e.n_methods >= 3})
    return [f"({projection.estimand_text(n)})" for n in counts]


def claim_lines(
    verdicts: Mapping[tuple[claims.Where, str], str],
    curves: Mapping[tuple[claims.Where, str], power.Curve],
) -> list[str]:
    """One line per claim of the paper that the run allows (``claims.run_claims``): its
    verdict, and the users a run needs to reach it with the effect stated (``curves``:
    ``power.summary_curves``, bounded), with the Monte Carlo error behind that figure."""
    if not verdicts:
        return []
    sims = next(iter(curves.values())).sims if curves else 0
    lines = [
        "",
        "The paper's claims on this run (docs/findings.md's rules), and the users a run needs "
        f"to reach the claim {power.TARGET:.0%} of the time with the effect stated imposed on "
        f"this run's own users ({sims} simulated runs per number of users, up to "
        f"{power.SUMMARY_GRID[-1]}; `prefalign report` simulates more):",
    ]
    for (where, claim), verdict in verdicts.items():
        needed = [
            f"{c.effect}: {c.needed_text()}"
            for (w, name), c in curves.items()
            if w == where and claims.base(name) == claim
        ]
        text = f"- {claims.SHORT[claim]} ({' · '.join(where)}): {verdict}"
        lines.append(text + ("; users needed, " + "; ".join(needed) if needed else ""))
    return lines


def degenerate_lines(entries: Sequence[DegenerateEntry]) -> list[str]:
    """Each flagged row, why, and what that means for its comparisons; one line when none is
    flagged."""
    if not entries:
        return []
    flagged = [e for e in entries if e.flagged]
    margin = entries[0].margin
    text_margin = next((e.text_margin for e in entries if e.text_margin is not None), None)
    text = (
        ""
        if text_margin is None
        else f", a share of outputs that are not text above base's by more than {text_margin:g}"
    )
    test = (
        f"fluency beyond base's by more than {margin:g} nats/token{text}, or a not-an-answer "
        "share above base's by the one-sided sign-flip test over users, p_holm"
    )
    if not flagged:
        return [
            "",
            f"No degenerate row: the {len(entries)} generating row(s) checked against base "
            f"({test}) write text of the task as base does.",
        ]
    lines = ["", f"Degenerate rows ({len(flagged)} of {len(entries)} checked against base: {test})"]
    lines += [
        f"! {e.method} ({_where(e)}): {e.reason}. Its figures and every comparison "
        "with it (tau, inversions, regret, ICL against it) are about a broken setting, not "
        "the method."
        for e in flagged
    ]
    return lines


def fit_prose(lines: list[str], width: int | None) -> list[str]:
    """Sentences (lines without a table's column gap) wrapped to ``width``; table rows, which
    ``wrap.table`` already made fit, as they are."""
    out: list[str] = []
    for line in lines:
        is_row = "  " in line.strip() or set(line.strip()) <= {"-", " "}
        out += [line] if is_row else wrap.prose(line, width, indent="  ")
    return out


def _num(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _ci(ci: Sequence[float] | None, spec: str = "+.2f") -> str:
    return "-" if not ci else f"[{format(ci[0], spec)}, {format(ci[1], spec)}]"


def _marked(text: str, readable: bool) -> str:
    """A figure as it is, or in parentheses where the data cannot carry it ("-" stays)."""
    return text if readable or text == "-" else f"({text})"


def _where(
    entry: TauEntry
    | RegretEntry
    | InversionEntry
    | IclEntry
    | CircularEntry
    | SpreadEntry
    | DegenerateEntry,
) -> str:
    return f"{entry.suite} · {entry.size}"


def tau_table(
    entries: Sequence[TauEntry], tablefmt: str = "simple", width: int | None = None
) -> str:
    """Where there is not enough evidence to read a tau, its estimate, p-value and interval are
    shown in parentheses (marked, not hidden), and it has no adjusted p-value (no look)."""
    body = []
    for e in entries:
        shown = e.enough
        body.append(
            [
                _where(e),
                e.decoder,
                f"{e.x} ~ {e.y}",
                e.n_methods,
                "-" if e.n_users is None else e.n_users,
                _marked(_num(e.tau, "+.3f"), shown),
                _marked(_num(e.p_value), shown),
                _num(e.p_holm if shown else None),
                _marked(_ci(e.ci), shown),
                e.verdict,
            ]
        )
    headers = [
        "suite · size",
        "decoder",
        "x ~ y",
        "methods",
        "users",
        "tau",
        "p",
        "p_holm",
        "95% CI",
        "verdict",
    ]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def regret_lines(entries: Sequence[RegretEntry], width: int | None = None) -> list[str]:
    if not entries:
        return []
    lines = [
        "",
        "Selection regret: what the rule 'take the reward method with the best RM accuracy' "
        "loses against the best one, cross-fitted (both chosen on half the users, measured on "
        "the other half, over random halvings: the regret of the rule, which may differ from "
        "the gap between the two rows named, chosen on all users; p: bootstrap over users "
        "under equal means, each method's spread kept; 95% interval: users resampled)",
    ]
    lines += regret_table(entries, width=width).splitlines()
    return lines


def regret_table(
    entries: Sequence[RegretEntry], tablefmt: str = "simple", width: int | None = None
) -> str:
    body = [
        [
            _where(e),
            e.decoder,
            e.y,
            ", ".join(e.picked),
            e.best,
            _num(e.regret, "+.3f"),
            _ci(e.ci, "+.3f"),
            _num(e.p_value, ".3g"),
            _num(e.p_holm, ".3g"),
            "regret" if e.fires else "no evidence of regret",
        ]
        for e in entries
    ]
    headers = [
        "suite · size",
        "decoder",
        "y",
        "picked by RM acc (all users)",
        "best by y (all users)",
        "cross-fitted regret",
        "95% CI",
        "p",
        "p_holm",
        "verdict",
    ]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def inversion_lines(entries: Sequence[InversionEntry], width: int | None = None) -> list[str]:
    significant = [e for e in entries if e.fires]
    if not significant:
        if not entries:
            return [
                "",
                "No ranking inversions: RM accuracy orders the methods as the other "
                "figures do (or too few methods to compare).",
            ]
        return [
            "",
            f"No significant ranking inversion: {len(entries)} pair(s) of methods are "
            "ordered one way by RM accuracy and the other by policy accuracy or ROUGE-1, "
            "none significant once the run's looks are adjusted (all in the run file).",
        ]
    lines = [
        "",
        f"Ranking inversions ({len(significant)}): A is above B by RM accuracy, below "
        "B by the other figure, both differences significant (p: the larger of two sign-flip "
        "tests over users)",
    ]
    lines += inversion_table(significant[:MAX_LISTED], width=width).splitlines()
    if len(significant) > MAX_LISTED:
        lines.append(
            f"... and {len(significant) - MAX_LISTED} more (all in the run file and the report)"
        )
    return lines


def inversion_table(
    entries: Sequence[InversionEntry], tablefmt: str = "simple", width: int | None = None
) -> str:
    body = [
        [
            _where(e),
            e.decoder,
            e.y,
            e.a,
            e.b,
            f"{e.x_a:.3f} > {e.x_b:.3f}",
            _ci(e.x_diff_ci),
            f"{e.y_a:.3f} < {e.y_b:.3f}",
            _ci(e.y_diff_ci),
            _num(e.p_value, ".3g"),
            _num(e.p_holm, ".3g"),
        ]
        for e in entries
    ]
    headers = [
        "suite · size",
        "decoder",
        "y",
        "A",
        "B",
        "RM acc A > B",
        "A - B 95% CI",
        "y A < B",
        "B - A 95% CI",
        "p",
        "p_holm",
    ]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def icl_lines(entries: Sequence[IclEntry], width: int | None = None) -> list[str]:
    if not entries:
        return []
    lines = [
        "",
        "In-context learning against the best reward-guided row (paired over users; 95% "
        "interval with users resampled; p: within-user permutation of ICL and every "
        "reward-guided row, the best chosen again in each)",
    ]
    return lines + icl_table(entries, width=width).splitlines()


def _paired(
    diff: float | None,
    ci: Sequence[float] | None,
    p_value: float | None,
    p_holm: float | None,
    n_users: int,
    verdict: str,
) -> list[Any]:
    """The cells every paired comparison ends with: the difference, its interval, the exact p,
    the adjusted p, the users and the verdict (``PAIRED`` names them, after the difference's
    own header)."""
    return [
        _num(diff, "+.3f"),
        _ci(ci, "+.3f"),
        _num(p_value, ".3g"),
        _num(p_holm, ".3g"),
        n_users,
        verdict,
    ]


PAIRED = ["95% CI", "p", "p_holm", "users", "verdict"]


def icl_table(
    entries: Sequence[IclEntry], tablefmt: str = "simple", width: int | None = None
) -> str:
    body = [
        [
            _where(e),
            e.metric,
            e.icl,
            e.rgd,
            *_paired(e.diff, e.ci, e.p_value, e.p_holm, e.n_users, e.verdict),
        ]
        for e in entries
    ]
    headers = ["suite · size", "metric", "ICL", "best reward-guided", "ICL - it", *PAIRED]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def rows_table(
    entries: Sequence[RowComparison], tablefmt: str = "simple", width: int | None = None
) -> str:
    """``prefalign compare RUN --rows A,B``: every metric of two rows, ``A - B`` paired over
    the users both have."""
    body = [
        [
            f"{e.suite} · {e.size}",
            e.metric,
            _num(e.value_a),
            _num(e.value_b),
            *_paired(e.diff, e.ci, e.p_value, e.p_holm, e.n_users, e.verdict),
        ]
        for e in entries
    ]
    headers = ["suite · size", "metric", "A", "B", "A - B", *PAIRED]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def circular_lines(entries: Sequence[CircularEntry], width: int | None = None) -> list[str]:
    if not entries:
        return []
    lines = [
        "",
        "Circular evaluation: win rate over base judged by the method's own RM "
        "(circular) and by an independent RM",
    ]
    lines += circular_table(entries, width=width).splitlines()
    for e in entries:
        if e.fires and e.rouge1_vs_base is not None:
            lines.append(
                f"! {e.method} ({_where(e)}): wins {e.win_self:.0%} over base "
                f"under its own RM (interval {_ci(e.win_self_ci, '.2f')}) but its "
                f"ROUGE-1 is {-e.rouge1_vs_base:.3f} below base's (interval "
                f"{_ci(e.rouge1_vs_base_ci, '+.3f')})"
            )
        if e.reason and e.win_independent is None:
            lines.append(f"  no independent judge for {e.method}: {e.reason}")
    return lines


def circular_table(
    entries: Sequence[CircularEntry], tablefmt: str = "simple", width: int | None = None
) -> str:
    body = [
        [
            _where(e),
            e.method,
            f"{e.win_self:.3f} {_ci(e.win_self_ci, '.2f')} (circular)",
            f"{_num(e.win_independent)} {_ci(e.win_independent_ci, '.2f')}",
            _num(e.gap, "+.3f"),
            e.n if e.n else "-",
            _num(e.p_holm, ".3g"),
            "!" if e.fires else "",
            e.judge_independent or "-",
        ]
        for e in entries
    ]
    headers = [
        "suite · size",
        "method",
        "win, own RM",
        "win, independent",
        "gap",
        "items",
        "p_holm",
        "flag",
        "independent judge",
    ]
    return wrap.table(body, headers, tablefmt=tablefmt, width=width)


def spread_lines(entries: Sequence[SpreadEntry], width: int | None = None) -> list[str]:
    flags = [f for f in entries if f.fires]
    if not flags:
        return []
    lines = ["", "Per-user spread: what the mean hides"]
    lines += [
        f"- {_where(f)}: {f.text} (p_holm {_num(f.p_holm, '.3g')})" for f in flags[:MAX_LISTED]
    ]
    if len(flags) > MAX_LISTED:
        lines.append(f"... and {len(flags) - MAX_LISTED} more")
    return lines
