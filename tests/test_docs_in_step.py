"""The docs and the code in step where they drifted before: every ``--prefalign-*`` option in
docs/usage.md's table, with the default the run uses (and its ``--help`` says); the decoders'
option defaults as docs/usage.md states them; the main job's time stated once, in the README,
and linked from the other pages instead of repeated."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from pytest_prefalign.plumbing import options

ROOT = Path(__file__).parents[1]
USAGE = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
MAIN_JOB_LINK = "README.md#run-the-main-job"


def option_rows() -> dict[str, str]:
    """docs/usage.md's options table: each ``--prefalign-*`` option and its meaning."""
    rows = {}
    for line in USAGE.splitlines():
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)]  # not at ``\|``
        found = re.match(r"`(--prefalign[\w-]*)", cells[1]) if len(cells) == 4 else None
        if found:
            rows[found.group(1)] = cells[2]
    return rows


def parser_options() -> dict[str, str]:
    """The options ``options.addoption`` declares, with their help."""
    parser = pytest.Parser(_ispytest=True)
    options.addoption(parser)
    return {
        name: option.attrs().get("help", "")
        for option in parser.getgroup("prefalign").options
        for name in option.names()
    }


def shown(value: object) -> str:
    return ",".join(value) if isinstance(value, list) else str(value)


@pytest.fixture
def defaults(pytester: pytest.Pytester) -> options.Settings:
    """What a run uses with no option and no ini value."""
    return options.settings(pytester.parseconfig())


def test_every_option_has_a_row_in_the_usage_table():
    assert sorted(set(parser_options()) - set(option_rows())) == []


def test_the_defaults_the_docs_and_the_help_state_are_the_runs(defaults):
    stated = 0
    helps = parser_options()
    for name, meaning in option_rows().items():
        field = name.removeprefix("--prefalign-").replace("-", "_")
        for text, pattern in ((meaning, r"default `([^`]+)`"), (helps[name], r"default: ([^;)]+)")):
            found = re.search(pattern, text)
            if found and getattr(defaults, field, None) is not None:  # None: chosen later
                assert found.group(1) == shown(getattr(defaults, field)), (name, text)
                stated += 1
    assert stated >= 8  # sizes, limit, reduce and seed, in the table and in the help


def test_the_seed_help_says_what_it_seeds():
    help_text = parser_options()["--prefalign-seed"]
    assert "bootstrap intervals always use seed 0" in help_text
    assert "icl" in help_text and "bon" in help_text


def decoder_rows() -> dict[str, dict[str, str]]:
    """docs/usage.md's decoder options table: each decoder (``*`` for every decoder) and the
    defaults its row states, ``field`` -> value."""
    rows: dict[str, dict[str, str]] = {}
    for line in USAGE.splitlines():
        found = re.match(r"\| (every decoder|`[^|]+`) \| (.*) \|$", line)
        if not found:
            continue
        values = dict(re.findall(r"`(\w+)` \(([^);:]+)", found.group(2)))
        names = (
            ["*"] if found.group(1) == "every decoder" else re.findall(r"`(\w+)`", found.group(1))
        )
        for name in names:
            rows[name] = values
    return rows


def test_decoder_defaults_in_the_docs_are_the_codes():
    from pytest_prefalign import hookspec
    from pytest_prefalign.api import DecodeOptions
    from pytest_prefalign.method_options import options_class
    from pytest_prefalign.registry import load

    manager = pytest.PytestPluginManager()
    manager.add_hookspecs(hookspec)
    decoders = load(manager).decoders
    rows = decoder_rows()
    base = {f.name: f.default for f in dataclasses.fields(DecodeOptions)}
    for field, value in rows["*"].items():
        assert value == str(base[field]), field
    for name, entry in decoders.items():
        fields = {f.name: f.default for f in dataclasses.fields(options_class(entry.obj))}
        for field, value in rows.get(name, {}).items():
            assert value == str(fields[field]).lower() or value == str(fields[field]), (name, field)
        changed = sorted(f for f in base if fields[f] != base[f])
        # a decoder that changes a default every decoder has says so in its own row
        assert [f for f in changed if f not in rows.get(name, {})] == [], name


def test_the_main_jobs_time_is_stated_once_and_linked():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "## Run the main job" in readme and re.search(r"\d+ min \d+ s", readme)
    for page in ("docs/usage.md", "benchmarks/README.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert MAIN_JOB_LINK in text, page
        main_job = [
            line
            for line in text.splitlines()
            if ("cold" in line or "main job" in line or "bench_main_job" in line)
            and re.search(r"\d+\s*(to \d+ )?min", line)
        ]
        assert main_job == [], page
