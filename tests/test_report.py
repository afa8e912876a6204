"""The HTML report: its tables, the scatter plot (one labelled point per method), the page
without matplotlib, and the ``prefalign report`` command's exit codes."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_prefalign.analysis import crisis, plot, report
from pytest_prefalign.runs import records
from pytest_prefalign.runs.entries import Crisis, DegenerateEntry
from pytest_prefalign.runs.records import RunFile

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def has_cell(page: str, text: str) -> bool:
    """tabulate pads cells with spaces: ``<td>name   </td>``."""
    return re.search(rf"<td>\s*{re.escape(text)}\s*</td>", page) is not None


def row(
    method: str, suite: str = "pref_lamp", size: str = "135m", **metrics: float
) -> dict[str, Any]:
    decoder, _, reward = method.partition("[")
    return {
        "suite": suite,
        "size": size,
        "method": method,
        "decoder": decoder,
        "reward": reward.rstrip("]") or None,
        "n_users": 4,
        "n_items": 8,
        "n_pairs": 8,
        "metrics": metrics,
        "ci": {k: [v - 0.1, v + 0.1] for k, v in metrics.items()},
        # eight users with the same figures: enough for a sign-flip test (2 / 2^8)
        "per_user": {k: {f"u{i}": v for i in range(8)} for k, v in metrics.items()},
        "timings": {"total_s": 2.5},
        "model": {"name": "SmolLM2-135M"},
        "data": DATA[suite],
    }


DATA = {
    "pref_lamp": {
        "source": "acl-anthology",
        "provenance": {
            "licence": "CC BY 4.0 (ACL Anthology, https://aclanthology.org)",
            "attribution": "ACL Anthology, https://aclanthology.org, CC BY 4.0",
        },
    },
    "polis": {
        "source": "polis",
        "provenance": {
            "licence": "CC BY 4.0",
            "attribution": "Data was gathered using the Polis software (compdemocracy.org/polis)",
        },
    },
}


RESULTS = [
    row("base", rouge1=0.30, rougeL=0.28, policy_acc=0.50),
    row("icl_rag", rouge1=0.34, rougeL=0.31, policy_acc=0.60),
    row(
        "args[lore]",
        rouge1=0.26,
        rougeL=0.25,
        policy_acc=0.55,
        rm_acc=0.80,
        win_self=1.0,
        win_independent=0.25,
    ),
    row("args[per_user_bt]", rouge1=0.29, rougeL=0.27, policy_acc=0.65, rm_acc=0.60),
    row("args[global_bt]", rouge1=0.28, rougeL=0.26, policy_acc=0.60, rm_acc=0.70),
    row("bon[pal]", suite="polis", policy_acc=0.52, rm_acc=0.66),
    row("bon[vpl]", suite="polis", policy_acc=0.58, rm_acc=0.61),
]
RUN = {
    "version": 1,
    "created": "2025-01-01T00:00:00+00:00",
    "commit": "abc123",
    "config": {"sizes": ["135m"], "limit": 4, "reduce": "sum", "seed": 0},
    "models": {"135m": {"name": "SmolLM2-135M"}},
    "results": RESULTS,
    "pairs": [],
    "items": [],
}


def analysed(data: dict[str, Any]) -> RunFile:
    """The run file of ``data`` with its analysis, as a run stores it when it ends."""
    run = RunFile.from_json({**data, "version": 1})
    run.tau, run.crisis = crisis.analyse(run.results)
    return run


def test_report_page_has_tables_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    page = report.write_report(analysed(RUN), tmp_path / "out")
    text = page.read_text()
    assert page == tmp_path / "out" / "report.html"
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text
    # one leaderboard per (suite, size), the crisis tables, the flags
    assert "pref_lamp · 135m · SmolLM2-135M" in text and "polis · 135m · SmolLM2-135M" in text
    for method in ("icl_rag", "args[lore]", "args[per_user_bt]", "bon[vpl]"):
        assert has_cell(text, method)
    assert "rm_acc ~ policy_acc" in text and "rm_acc ~ rouge1" in text
    assert "1.000 [0.90, 1.10] (circular)" in text and "+0.750" in text  # gap 1.0 - 0.25
    assert "below base" in text  # win 100% under its own RM, ROUGE-1 below base's
    # every suite's licence and attribution (CC BY asks for it wherever its data is used)
    assert "attribution: ACL Anthology, https://aclanthology.org, CC BY 4.0" in text
    assert "licence: CC BY 4.0 (ACL Anthology, https://aclanthology.org)" in text
    assert "attribution: Data was gathered using the Polis software" in text
    png = (tmp_path / "out" / report.PLOT).read_bytes()
    assert png.startswith(PNG_SIGNATURE)
    assert "data:image/png;base64," in text


def test_report_shows_the_ties_beside_each_win_rate(tmp_path: Path) -> None:
    """Win rates count strict wins; the leaderboard's win columns say how many items tied."""
    pytest.importorskip("matplotlib")
    results = [dict(r) for r in RUN["results"]]
    lore = next(r for r in results if r["method"] == "args[lore]")
    lore["judge"] = {
        "counts": {
            "win_self": {"wins": 8, "ties": 0, "losses": 0},
            "win_independent": {"wins": 2, "ties": 3, "losses": 3},
        }
    }
    page = report.write_report(analysed({**RUN, "results": results}), tmp_path / "out")
    text = page.read_text()
    assert has_cell(text, "0.250 [0.15,0.35] (3 ties)")  # win vs base: 2 of 8 items
    assert has_cell(text, "1.000 [0.90,1.10] (0 ties)")  # win, own RM (circular)


def test_plot_has_one_labelled_point_per_reward_method() -> None:
    pytest.importorskip("matplotlib")
    png, drawn = plot.render_plot(plot.scatter_points(analysed(RUN).results))
    assert png.startswith(PNG_SIGNATURE)
    assert sorted(drawn) == sorted(
        [
            ("pref_lamp · 135m", "args[lore]", 0.80, 0.55),
            ("pref_lamp · 135m", "args[per_user_bt]", 0.60, 0.65),
            ("pref_lamp · 135m", "args[global_bt]", 0.70, 0.60),
            ("polis · 135m", "bon[pal]", 0.66, 0.52),
            ("polis · 135m", "bon[vpl]", 0.61, 0.58),
        ]
    )


def test_plot_draws_each_methods_intervals_and_base_line() -> None:
    """Error bars at each reward method's intervals (RM accuracy across, policy accuracy up) and
    base's policy accuracy as a horizontal line, read back from the figure."""
    pytest.importorskip("matplotlib")
    results = analysed(RUN).results
    extras = plot.scatter_extras(results)
    assert extras[("pref_lamp", "135m")].base == 0.50
    rm_ci, policy_ci = extras[("pref_lamp", "135m")].errors["args[lore]"]
    assert rm_ci == pytest.approx([0.7, 0.9]) and policy_ci == pytest.approx([0.45, 0.65])
    assert extras[("polis", "135m")].base is None  # polis has no base row here
    fig = plot.plot_figure(plot.scatter_points(results), extras)
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("pref_lamp"))
    horizontal = [ln.get_ydata() for ln in panel.get_lines() if ln.get_label().startswith("base")]
    assert [list(y) for y in horizontal] == [[0.5, 0.5]]
    bars = [
        seg
        for coll in panel.collections
        if hasattr(coll, "get_segments")
        for seg in coll.get_segments()
    ]
    ends = {
        (round(float(a[0]), 3), round(float(a[1]), 3), round(float(b[0]), 3), round(float(b[1]), 3))
        for a, b in bars
    }
    assert (0.7, 0.55, 0.9, 0.55) in ends  # args[lore]'s RM accuracy interval, across
    assert (0.8, 0.45, 0.8, 0.65) in ends  # and its policy accuracy interval, up


CROWDED = {
    # four methods at RM accuracy 0.95 (as in a real limit-10 run), policy 0.354 to 0.389
    ("polis", "135m"): [
        ("args[per_user_bt]", 0.95, 0.354),
        ("args[lore]", 0.95, 0.363),
        ("args[global_bt]", 0.95, 0.380),
        ("bon[per_user_bt]", 0.95, 0.389),
        ("genarm[arm]", 0.73, 0.599),
        ("args[pal]", 0.96, 0.616),
    ],
    # a cluster a few pixels wide, as the main job gives on two users
    ("pref_lamp", "135m"): [
        ("args[global_bt]", 0.60, 0.52),
        ("args[lore]", 0.62, 0.52),
        ("args[pal]", 0.58, 0.53),
        ("args[per_user_bt]", 0.61, 0.51),
        ("args[vpl]", 0.60, 0.515),
        ("genarm[arm]", 0.55, 0.50),
        ("bon[per_user_bt]", 0.61, 0.55),
    ],
}


def test_labels_sit_at_their_points_and_do_not_overlap() -> None:
    """Read back from the drawn figure, on screen: each label is beside its own point (nearer to
    it than to any other point) or joined to it by a leader line; no two labels overlap, no label
    hides a point, every label is inside its panel."""
    pytest.importorskip("matplotlib")
    from matplotlib.text import Text

    from pytest_prefalign.analysis import plot

    fig = plot.plot_figure(CROWDED)
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = ax.texts
        assert len(labels) == len(
            CROWDED[("polis" if "polis" in ax.get_title() else "pref_lamp", "135m")]
        )
        frame = ax.get_window_extent(renderer)
        points = {t.get_text(): ax.transData.transform(t.xy) for t in labels}
        boxes = {t.get_text(): Text.get_window_extent(t, renderer) for t in labels}
        for label in labels:
            name, box = label.get_text(), boxes[label.get_text()]
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1, name
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1, name
            assert not any(box.overlaps(boxes[o]) for o in boxes if o != name), name
            others = [p for o, p in points.items() if o != name]
            assert not any(box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1 for x, y in others), name
            near = plot._distance(box, points[name])
            if label.arrow_patch is None:  # beside it: its own point is the nearest
                assert near < 20 and all(near < plot._distance(box, p) for p in others), name
            else:  # further out, with a line to it
                assert near < 80, name


def test_a_leaderboard_with_the_models_own_pairs_carries_the_header_note(
    tmp_path: Path,
) -> None:
    # the pairs written by the evaluated model (the design's writer): the header has a note
    run = analysed(RUN)
    design = {"label": "generated", "note": "", "writer_fingerprint": "fp"}
    run.results = [
        dataclasses.replace(
            result,
            model={"name": "SmolLM2-135M", "fingerprint": "fp"},
            data={"source": "x", "provenance": {"design": design}},
        )
        for result in run.results
    ]
    text = report.write_report(run, tmp_path / "out").read_text()
    assert "pairs: generated" in text
    assert "the pairs were written by this very model (generated)" in text


def test_page_without_matplotlib_says_how_to_get_the_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    text = report.write_report(analysed(RUN), tmp_path).read_text()
    assert "pip install pytest-prefalign[report]" in text
    assert not (tmp_path / report.PLOT).exists()
    assert has_cell(text, "args[lore]") and "rm_acc ~ policy_acc" in text


def test_method_names_are_escaped(tmp_path: Path) -> None:
    evil = row("<script>x</script>", policy_acc=0.5)
    text = report.write_report(analysed({"results": [evil]}), tmp_path).read_text()
    assert "<script>x</script>" not in text and "&lt;script&gt;" in text


def test_report_main_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(analysed(RUN).to_json()))
    assert (
        report.report_main([str(run_file), "--out", str(tmp_path / "rep"), "--power-sims", "0"])
        == 0
    )
    assert (tmp_path / "rep" / "report.html").is_file()
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not a readable JSON file"),
        ('{"version": 1, "results": [{"suite": "s", "size": "m"}]}', "results[0]: field 'method'"),
        ('{"results": []}', "not a run file of version 1, 2, 3"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_report_main_bad_run_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, message: str
) -> None:
    run_file = tmp_path / "run.json"
    if content is not None:
        run_file.write_text(content)
    assert report.report_main([str(run_file), "--out", str(tmp_path / "rep")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "rep").exists()


def test_report_main_out_is_a_file_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(analysed(RUN).to_json()))
    (tmp_path / "taken").write_text("")
    assert report.report_main([str(run_file), "--out", str(tmp_path / "taken")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_report_main_out_that_cannot_be_made_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_file = tmp_path / "run.json"
    run_file.write_text(json.dumps(analysed(RUN).to_json()))
    (tmp_path / "taken").write_text("")  # a file where a parent folder should be
    assert report.report_main([str(run_file), "--out", str(tmp_path / "taken" / "rep")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefalign report: --out ") and "Traceback" not in err


def test_report_main_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert report.report_main([]) == 2
    assert "usage: prefalign report" in capsys.readouterr().err


# --- outputs beside their reference --------------------------------------------------------

OUTPUT_METHODS = ["base", "icl", "args[pal]", "bon[per_user_bt]"]


def with_outputs() -> dict[str, Any]:
    """A run whose pref_lamp rows hold item records: 4 users with 2, 3, 1 and 2 items, each
    output naming its method and item, one reference with markup in it, one output empty."""
    results = [row(m, rouge1=0.3 - 0.01 * k) for k, m in enumerate(OUTPUT_METHODS)]
    items = [("u1", 2), ("u2", 3), ("u3", 1), ("u4", 2)]
    for result in results:
        result["records"] = {
            "items": [
                {
                    "suite": "pref_lamp",
                    "size": "135m",
                    "method": result["method"],
                    "item_id": f"{user}/t{k}",
                    "user": user,
                    "reference": "<b>Bold</b> & Title"
                    if (user, k) == ("u1", 0)
                    else f"Ref {user}/{k}",
                    "output": ""
                    if (result["method"], user) == ("icl", "u3")
                    else f"{result['method']} says {user}/t{k}",
                }
                for user, n in items
                for k in range(n)
            ]
        }
    return {**RUN, "results": results}


def outputs_section(text: str) -> str:
    return text[text.index("<h2>Outputs</h2>") : text.index("<h2>Does RM accuracy")]


def test_the_first_item_of_each_of_the_first_users_then_their_second_items() -> None:
    run = analysed(with_outputs())
    assert report.shown_items(run.results) == ["u1/t0", "u2/t0", "u3/t0", "u4/t0", "u1/t1"]
    assert report.shown_items(run.results, most=7) == [
        "u1/t0",
        "u2/t0",
        "u3/t0",
        "u4/t0",
        "u1/t1",
        "u2/t1",
        "u4/t1",
    ]
    assert report.shown_items(run.results[::-1]) == report.shown_items(run.results)


def test_the_page_shows_every_rows_output_beside_the_reference(tmp_path: Path) -> None:
    text = report.write_report(analysed(with_outputs()), tmp_path).read_text()
    section = outputs_section(text)
    assert "pref_lamp · 135m" in section
    shown = ["u1/t0", "u2/t0", "u3/t0", "u4/t0", "u1/t1"]
    for item in shown:
        assert f"<th>{item}<br>" in section
        for method in OUTPUT_METHODS:
            if (method, item) != ("icl", "u3/t0"):
                assert f"<td>{method} says {item}</td>" in section
    assert "u2/t1" not in section  # five items, not all
    # the reference, escaped; an empty output shown as such; every text escaped
    assert "<td>&lt;b&gt;Bold&lt;/b&gt; &amp; Title</td>" in section and "<b>Bold" not in section
    assert "<td>Ref u2/0</td>" in section
    assert '<td><span class="meta">(empty)</span></td>' in section
    # rows in the leaderboard's order (by ROUGE-1 here)
    places = [section.index(f"<td>{m}</td>") for m in OUTPUT_METHODS]
    assert places == sorted(places)
    assert "degenerate</span>" not in section  # no analysis entry: nothing marked


def degenerate_entry(suite: str, method: str, flagged: bool, reason: str) -> DegenerateEntry:
    """An analysis entry for ``method`` on (``suite``, 135m), flagged or not, with ``reason``."""
    return DegenerateEntry(
        suite=suite,
        size="135m",
        method=method,
        decoder=method.partition("[")[0],
        fluency=2.0,
        fluency_base=2.0,
        fluency_gap=0.0,
        fluency_gap_ci=None,
        margin=2.5,
        not_answer=0.1,
        not_answer_base=0.1,
        not_answer_gap=0.0,
        not_answer_gap_ci=None,
        n_users=8,
        flagged=flagged,
        reason=reason,
    )


def test_a_row_the_analysis_flags_degenerate_is_marked(tmp_path: Path) -> None:
    run = analysed(with_outputs())
    flagged = "fluency 3.1 nats/token above base's <margin 1>"
    run.crisis = dataclasses.replace(
        run.crisis,
        degenerate=(
            degenerate_entry("pref_lamp", "args[pal]", True, flagged),
            degenerate_entry("pref_lamp", "icl", False, "ok"),
            degenerate_entry("polis", "bon[per_user_bt]", True, "another suite"),
        ),
    )
    # the marks survive the run file's writing and reading
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run.to_json()))
    assert report.report_main([str(path), "--out", str(tmp_path / "rep"), "--power-sims", "0"]) == 0
    section = outputs_section((tmp_path / "rep" / "report.html").read_text())
    marked = re.findall(r'<tr class="degenerate"><td>([^<]*)<br>', section)
    assert marked == ["args[pal]"]
    assert 'title="fluency 3.1 nats/token above base&#x27;s &lt;margin 1&gt;">degenerate' in section
    assert "args[pal] is flagged degenerate: fluency 3.1 nats/token above base&#x27;s" in section
    assert "another suite" not in section  # polis has no outputs here


def test_an_analysis_without_degenerate_entries_marks_nothing() -> None:
    assert report.degenerate_rows(Crisis.none()) == {}
    older = analysed(with_outputs()).to_json()["crisis"]
    del older["degenerate"]  # a run file written before the rows were checked
    assert report.degenerate_rows(Crisis.from_json(older)) == {}


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("yes", "crisis: field 'degenerate': expected a list, got str"),
        (["not an entry"], "crisis: field 'degenerate'[0]: expected a JSON object, got str"),
        (
            [{"suite": "pref_lamp", "method": "base", "flagged": True}],
            "crisis: field 'degenerate'[0]: field 'size' is missing",
        ),
        (
            [{**degenerate_entry("s", "icl", False, "").to_json(), "flagged": "yes"}],
            "crisis: field 'degenerate'[0]: field 'flagged': 'yes' is not true or false",
        ),
    ],
)
def test_an_unusable_degenerate_entry_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: Any, named: str
) -> None:
    data = analysed(with_outputs()).to_json()
    data["crisis"]["degenerate"] = value
    path = tmp_path / "run.json"
    path.write_text(json.dumps(data))
    assert report.report_main([str(path), "--out", str(tmp_path / "rep")]) == 2
    assert f"{path}: {named}" in capsys.readouterr().err


def test_a_suite_without_item_outputs_says_so(tmp_path: Path) -> None:
    text = report.write_report(analysed(RUN), tmp_path).read_text()
    section = outputs_section(text)
    assert section.count("No row of this suite and size has item outputs.") == 2


def test_the_claims_section_says_the_users_each_claim_needs(tmp_path: Path) -> None:
    # simulated from the run's own users (a few simulated runs, a short grid: the rows are
    # what is checked here; tests/test_power.py checks the figures)
    text = report.write_report(analysed(RUN), tmp_path, power_sims=3).read_text()
    section = text.split("how many users each needs</h2>")[1].split("<h2>")[0]
    assert (
        "pref_lamp · 135m" in section
        and "2. Large RM-accuracy differences, nearly the same ROUGE-1" in section
    )
    assert "RM accuracy 0.20 apart, ROUGE-1 the same" in section
    assert "3 simulated runs per number of users" in section
    # not simulated unless asked: the section says how
    plain = report.write_report(analysed(RUN), tmp_path / "plain").read_text()
    assert "Not simulated here: <code>prefalign report RUN.json" in plain


def test_report_command_simulates_the_claims_power(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    run = analysed(RUN)
    records.write(run, path)
    assert report.report_main([str(path), "--out", str(tmp_path / "out"), "--power-sims", "2"]) == 0
    text = (tmp_path / "out" / report.PAGE).read_text()
    assert "2 simulated runs per number of users" in text
