"""docs/plugins.md quotes what the tool prints when a reward method goes wrong; this test runs
those broken variants of the page's ``mypkg.myrm`` (installed as a fake distribution) on the toy
project of tests/test_plugin.py and checks that every line of the page's quoted output appears,
as it is, in what pytest printed. Edit a message, and this test says which doc line to edit."""

from __future__ import annotations

import importlib
import re
import shutil
import sys
import textwrap
from pathlib import Path

import pytest
import test_plugin as toy_project
from test_plugin import run

# the toy project's fixtures (tests/test_plugin.py)
heavy_modules_imported_once = toy_project.heavy_modules_imported_once
toy = toy_project.toy

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"
BLOCK = re.compile(
    r"<!-- messages: checked by tests/test_plugin_docs.py -->\s*```text\n(?P<body>.*?)```", re.S
)

MYRM = """
from __future__ import annotations

import numpy as np

from pytest_prefalign.api import RewardMethod


class MyRewardMethod(RewardMethod):
    name = "myrm"
    capabilities = frozenset()

    def fingerprint(self) -> str:
        return "myrm-v1"

    def fit(self, lm, pairs, cache_dir) -> None:
        {fit}

    def score(self, lm, batch) -> np.ndarray:
        {score}


def pytest_prefalign_register(registry) -> None:
    registry.add_reward("myrm", MyRewardMethod)
"""
FIT = "self.weight = {p.user: 1.0 for p in pairs}"
SCORE = "return np.array([-float(len(r.split())) for r in batch.responses])"
# the broken variants: what fit or score does instead
VARIANTS = {
    "fit": {
        "fit": "if len(pairs) < 10:\n"
        '            raise ValueError(f"myrm needs at least 10 training pairs, got {len(pairs)}")'
    },
    "raise": {  # forgets the users without training pairs
        "score": "return np.array([self.weight[u] * len(r) for u, _, r in batch])"
    },
    "nan": {"score": "return np.full(len(batch), np.nan)"},
    "nan on one title": {
        "score": "return np.array(\n"
        '            [np.nan if r.startswith("Dog") else 0.0 for r in batch.responses]\n'
        "        )"
    },
    "one short": {"score": "return np.zeros(len(batch) - 1)"},
}


def source(fit: str = FIT, score: str = SCORE) -> str:
    return MYRM.replace("{fit}", fit).replace("{score}", score)


def install(site: Path, dist: str, version: str, source: str) -> None:
    """Distribution ``dist`` ``version``: the package ``dist`` with ``dist/myrm.py`` = source,
    and the entry point ``myrm = dist.myrm``, as docs/plugins.md packages it."""
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir(parents=True)
    info.joinpath("METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
    )
    info.joinpath("entry_points.txt").write_text(f"[prefalign]\nmyrm = {dist}.myrm\n")
    info.joinpath("top_level.txt").write_text(f"{dist}\n")
    package = site / dist
    package.mkdir()
    package.joinpath("__init__.py").write_text("")
    package.joinpath("myrm.py").write_text(textwrap.dedent(source))


def variant(toy: pytest.Pytester, source: str, methods: str = "bon[myrm]", other: str = "") -> str:
    """Run ``methods`` with ``mypkg`` (and ``otherpkg`` when ``other`` is its source)
    installed in the project's own folder, as ``pip install -e .`` would (so tracebacks show
    ``mypkg/myrm.py``), for this run only; everything pytest printed."""
    install(toy.path, "mypkg", "0.1", source)
    if other:
        install(toy.path, "otherpkg", "0.2", other)
    sys.path.insert(0, str(toy.path))
    importlib.invalidate_caches()
    try:
        result = run(toy, "--prefalign", "toy", "--prefalign-methods", methods)
    finally:
        sys.path.remove(str(toy.path))
        for path in [*toy.path.glob("*.dist-info"), toy.path / "mypkg", toy.path / "otherpkg"]:
            shutil.rmtree(path, ignore_errors=True)
    return "\n".join([*result.stdout.lines, *result.stderr.lines])


def test_the_messages_docs_plugins_md_quotes_are_printed(toy, monkeypatch):
    monkeypatch.chdir(toy.path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # each variant rewrites mypkg/myrm.py
    outputs = [variant(toy, source(**change)) for change in VARIANTS.values()]
    broken = source().replace("import numpy as np", "import numpy as np\nimport mypkg_native")
    outputs.append(variant(toy, broken, methods="base"))  # not asked for: a warning
    outputs.append(variant(toy, broken))  # asked for: its error
    outputs.append(variant(toy, source(), other=source()))  # one name, two packages
    printed = {line.rstrip() for output in outputs for line in output.splitlines()}
    blocks = [m["body"] for m in BLOCK.finditer(DOC.read_text(encoding="utf-8"))]
    quoted = [line.rstrip() for body in blocks for line in body.splitlines() if line.strip()]
    assert len(blocks) >= 4 and len(quoted) >= 20, "docs/plugins.md lost its checked messages"
    if pytest.version_tuple < (8, 4):  # tracebacks underline with carets from pytest 8.4 on
        quoted = [line for line in quoted if set(line.strip()) != {"^"}]
    # "..." in a quoted line stands for what changes from run to run (a path)
    patterns = {line: re.compile(".*".join(map(re.escape, line.split("...")))) for line in quoted}
    not_printed = [
        line for line in quoted if not any(patterns[line].fullmatch(p) for p in printed)
    ]  # fmt: skip
    assert not_printed == [], "\n".join(
        [
            "docs/plugins.md quotes lines never printed:",
            *not_printed,
            "",
            "printed:",
            *sorted(printed),
        ]
    )
