"""The plugin end to end: a small project, a real ``pytest --prefalign`` inside it (pytester),
with a toy suite registered from the project's conftest and the tiny model built from a config."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import machine_paths
import pytest

TOY_SUITE = """
import json
from pathlib import Path

from pytest_prefalign.api import DataError, Item, Pair, ProfileEntry, SuiteData


class Toy:
    name = "toy"
    description = "two users who write about cats or dogs"
    licence = "CC0"
    source = "toy"

    def instruction(self, input):
        return f"Write a title for: {input}"

    def example(self, entry):
        return f"Text: {entry.input}\\nTitle: {entry.output}"

    def load(self, data_dir, *, limit, options):
        path = Path(data_dir) / "records.json"
        records = json.loads(path.read_text())
        profiles, items, pairs = {}, [], []
        for n, rec in enumerate(records[: limit or None]):
            user = rec.get("user")
            if not isinstance(user, str):
                raise DataError(path, n, "user", "missing or not a string")
            profiles[user] = [ProfileEntry(f"{user}/p{i}", t, o)
                              for i, (t, o) in enumerate(rec["profile"])]
            for i, (text, title, bad) in enumerate(rec["tests"]):
                prompt = self.instruction(text)
                items.append(Item(f"{user}/t{i}", user, text, prompt, title))
                pairs.append(Pair(f"{user}/t{i}", user, prompt, title, bad))
        return SuiteData("toy", str(path), profiles, items, test_pairs=pairs)

    def build_pairs(self, data, reference, cache_dir):
        raise AssertionError("toy pairs come with the data")


def pytest_prefalign_register(registry):
    registry.add_suite(Toy())
"""

RECORDS = [
    {
        "user": "ann",
        "profile": [["cats sleep a lot", "Sleepy cats"], ["cats purr", "Purring"]],
        "tests": [
            ["a cat on a mat", "Cat on a mat", "Dogs run"],
            ["cats and milk", "Milk for cats", "A parade"],
        ],
    },
    {
        "user": "bob",
        "profile": [["dogs bark loudly", "Loud dogs"], ["dogs fetch", "Fetch"]],
        "tests": [["a dog in a park", "Dog in the park", "Cats nap"]],
    },
]


@pytest.fixture(scope="module", autouse=True)
def heavy_modules_imported_once():
    """pytester restores sys.modules after an in-process run; torch cannot be imported twice in
    one process, so everything heavy is imported here, before the first snapshot."""
    import bm25s  # noqa: F401
    import rouge_score.rouge_scorer  # noqa: F401

    import prefalign_methods.decoders.icl  # noqa: F401
    import pytest_prefalign.evaluation.case  # noqa: F401
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    build_tiny_lm(0)


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch):
    pytester.makeconftest(TOY_SUITE)
    pytester.makeini(
        textwrap.dedent("""
        [pytest]
        prefalign_models = tiny = tiny
        prefalign_sizes = tiny
        prefalign_methods = base,icl,icl_rag
        prefalign_data = data
    """)
    )
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(RECORDS))
    suite = pytester.mkdir("toy")
    suite.joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    return pytester


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    # in-process: torch and the tiny model are imported once for all these runs
    return pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider")


def test_without_flag_suites_are_not_collected(toy):
    result = run(toy, "toy")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED


def test_plugin_import_is_light():
    code = (
        "import sys, pytest_prefalign.plugin; "
        "print(sorted(m for m in ('torch', 'transformers', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


HEAVY = ("torch", "transformers")


def imported_heavy(code: str, cwd: Path) -> list[str]:
    """Run ``code`` in a fresh interpreter; the heavy modules it imported (its last line)."""
    code += f"; import json, sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def test_collecting_every_method_imports_no_torch(tmp_path):
    # the built-in suite with every registered method: each method's module is imported (its
    # declaration: options, what it needs, its capabilities), its torch code only when it runs
    suite = Path(__file__).parents[1] / "suites" / "synthetic"
    code = (
        "import pytest; "
        f"rc = pytest.main(['--prefalign', {str(suite)!r}, '--collect-only', '-q', "
        "'-p', 'no:cacheprovider']); assert rc == 0, rc"
    )
    assert imported_heavy(code, tmp_path) == []


def test_listing_imports_no_torch(tmp_path):
    code = "from pytest_prefalign import cli; assert cli.main(['list']) == 0"
    assert imported_heavy(code, tmp_path) == []


def test_end_to_end_leaderboard_and_run_file(toy):
    out = toy.path / "out.json"  # given as an absolute path: the run file names it from its root
    result = run(toy, "--prefalign", "toy", "-v", "--prefalign-json", str(out))
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            "*toy/suite.toml::toy?base-tiny? PASSED*",
            "*toy/suite.toml::toy?icl-tiny? PASSED*",
            "*toy/suite.toml::toy?icl_rag-tiny? PASSED*",
            "*prefalign leaderboard*",
            "toy · tiny · *",
            "*data: *records.json · 2 users · 3 items · 3 pairs*",
            "*method*ROUGE-1*ROUGE-L*policy acc*",
            "run file: *.prefalign/runs/0001_*.json",
        ]
    )
    run_file = json.loads((toy.path / "out.json").read_text())
    rows = {r["method"]: r for r in run_file["results"]}
    assert set(rows) == {"base", "icl", "icl_rag"}
    for row in rows.values():
        assert row["suite"] == "toy" and row["size"] == "tiny"
        assert (row["n_users"], row["n_items"], row["n_pairs"]) == (2, 3, 3)
        assert 0.0 <= row["metrics"]["rouge1"] <= 1.0
        assert 0.0 <= row["metrics"]["policy_acc"] <= 1.0
    # the ROUGE figure is the mean of the per-item records beside the run file
    items = [json.loads(line) for line in (toy.path / "out.items.jsonl").read_text().splitlines()]
    base_items = [r for r in items if r["method"] == "base"]
    assert len(base_items) == 3
    mean = sum(r["rouge1"] for r in base_items) / 3
    assert rows["base"]["metrics"]["rouge1"] == pytest.approx(mean)
    assert list((toy.path / ".prefalign" / "runs").glob("0001_*.json"))
    # made in a temporary folder, the run file names no path of the machine: the data and the
    # command line's paths from their roots, which it names once
    assert machine_paths.found(out.read_text()) == []
    assert str(toy.path) not in out.read_text()
    assert rows["base"]["data"]["source"] == "{data}/toy/records.json"
    assert "{rootdir}/out.json" in run_file["config"]["args"]
    assert set(run_file["config"]["roots"]) == {"data", "cache", "rootdir", "tmp", "~"}


def test_k_selects_one_method(toy):
    result = run(toy, "--prefalign", "toy", "-k", "icl_rag")
    result.assert_outcomes(passed=1, deselected=2)


def test_floor_fails_with_figure_and_floor(toy):
    result = run(
        toy,
        "--prefalign",
        "toy",
        "--prefalign-methods",
        "base",
        "--prefalign-fail-under",
        "rouge1=0.99",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rouge1 = 0.* is below the floor 0.99*"])
    result.stdout.fnmatch_lines(["*prefalign leaderboard*"])  # a failed floor still reports


def test_a_floor_in_the_ini_fails_the_test_and_the_command_line_replaces_it(toy):
    ini = (toy.path / "tox.ini").read_text()  # pytester strips the final newline
    toy.makeini(ini + "\nprefalign_fail_under = rouge1=0.99\n")
    base = ("--prefalign", "toy", "--prefalign-methods", "base")
    result = run(toy, *base)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*rouge1 = 0.* is below the floor 0.99*"])
    run(toy, *base, "--prefalign-fail-under", "rouge1=0").assert_outcomes(passed=1)
    toy.makeini(ini + "\nprefalign_fail_under = rouge1=3\n")
    bad = run(toy, *base)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*ini value prefalign_fail_under: *"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prefalign-limit", "0"], "*--prefalign-limit*expected a whole number >= 1*"),
        (
            ["--prefalign-methods", "nope"],
            "*unknown decoder 'nope'; available: args, base, bon, genarm, icl, icl_rag*",
        ),
        (["--prefalign-methods", "base[lore]"], "*decoder 'base' takes no reward method*"),
        (["--prefalign-methods", "bon[nope]"], "*unknown reward method 'nope'; available: arm, *"),
        (
            ["--prefalign-methods", "genarm[lore]"],
            "*genarm?lore?: decoder 'genarm' needs the capability next_token that reward method "
            "'lore' does not declare*",
        ),
        (["--prefalign-sizes", "9b"], "*unknown size 9b; known: *tiny*"),
        (["--prefalign-fail-under", "bleu=0.1"], "*expected METRIC=VALUE with METRIC one of*"),
    ],
)
def test_bad_options_are_usage_errors(toy, args, message):
    result = run(toy, "--prefalign", "toy", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_one_suite_in_two_folders_is_a_collection_error(toy):
    # the run file keys results by (suite, method, size): two results for one key could not be
    # read back, nor compared with a baseline
    other = toy.mkdir("toy_fixed")
    other.joinpath("suite.toml").write_text(
        '[suite]\nname = "toy"\n[options]\nrejected = "fixed"\n'
    )
    result = run(toy, "--prefalign", "toy", "toy_fixed", "--prefalign-methods", "base")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*toy_fixed/suite.toml: suite 'toy' is already collected from *toy/suite.toml "
            "(options none there, {'rejected': 'fixed'} here): a run keys its results by (suite, "
            "method, size), so run one folder at a time*"
        ]
    )
    assert run(toy, "--prefalign", "toy_fixed", "--prefalign-methods", "base").ret == 0


def test_malformed_record_names_file_record_field(toy):
    records = json.loads((toy.path / "data/toy/records.json").read_text())
    records[1]["user"] = 7
    (toy.path / "data/toy/records.json").write_text(json.dumps(records))
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*records.json: record 1: field 'user': missing or not a string*"])


def test_a_suite_that_leaves_no_user_fails_its_tests_saying_so(toy):
    # nothing to evaluate is no pass: a floor would otherwise hold on no figure at all
    (toy.path / "data/toy/records.json").write_text("[]")
    args = ("--prefalign-methods", "base,icl", "--prefalign-fail-under", "rouge1=0.1")
    result = run(toy, "--prefalign", "toy", *args)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*suite 'toy': no user left to evaluate in *records.json (0 users, 0 items, 0 test "
            "pairs; dropped: nothing)*"
        ]
    )


def test_missing_data_lists_the_places_searched(toy):
    shutil.rmtree(toy.path / "data")
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*data folder toy/ not found; looked in:*",
            "*--prefalign-data: not set*",
            "*ini prefalign_data: *data*",
            "*PREFALIGN_DATA*",
            "*user cache*",
        ]
    )


def test_broken_registration_is_reported_and_the_run_goes_on(toy):
    toy.syspathinsert()
    toy.makepyfile(
        broken="def pytest_prefalign_register(registry):\n    raise RuntimeError('boom')\n"
    )
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base", "-p", "broken")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*could not load plugin 'broken'*RuntimeError: boom*"])


def test_entry_point_that_fails_to_import_is_named(toy):
    # an installed distribution whose prefalign entry point cannot be imported
    dist = toy.mkdir("site").joinpath("brokenrm-0.1.dist-info")
    dist.mkdir()
    dist.joinpath("METADATA").write_text("Metadata-Version: 2.1\nName: brokenrm\nVersion: 0.1\n")
    dist.joinpath("entry_points.txt").write_text("[prefalign]\nbrokenrm = brokenrm_missing\n")
    toy.syspathinsert(toy.path / "site")
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*could not load entry point 'brokenrm' (brokenrm_missing, from brokenrm): "
            "ModuleNotFoundError*brokenrm_missing*"
        ]
    )


def test_result_hook_sees_each_result(toy):
    toy.syspathinsert()
    toy.makepyfile(
        logger=textwrap.dedent("""
        def pytest_prefalign_result(result, config):
            print("LOGGED", result.method, sorted(result.metrics), result.model.name)
    """)
    )
    result = run(toy, "--prefalign", "toy", "--prefalign-methods", "base", "-p", "logger", "-s")
    result.stdout.fnmatch_lines(
        [
            "*LOGGED base ?'fluency', 'not_answer', 'policy_acc', 'policy_acc_mean', "
            "'policy_acc_micro', 'policy_acc_sum', 'rouge1', 'rougeL'? *"
        ]
    )


def test_xdist_results_reach_the_controller(toy):
    result = toy.runpytest_subprocess(
        "--prefalign", "toy", "-n", "2", "--prefalign-json", "out.json", "-p", "no:cacheprovider"
    )
    result.assert_outcomes(passed=3)
    assert result.stdout.str().count("prefalign leaderboard") == 1
    rows = json.loads((toy.path / "out.json").read_text())["results"]
    assert sorted(r["method"] for r in rows) == ["base", "icl", "icl_rag"]


def test_default_methods_cover_every_reward_method_and_decoder(toy):
    toy.makeini(
        "[pytest]\nprefalign_models = tiny = tiny\nprefalign_sizes = tiny\nprefalign_data = data\n"
    )
    result = run(toy, "--prefalign", "toy", "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "toy/suite.toml::toy?base-tiny?",
            "toy/suite.toml::toy?icl-tiny?",
            "toy/suite.toml::toy?icl_rag-tiny?",
            "toy/suite.toml::toy?lead-tiny?",
            "toy/suite.toml::toy?profile_copy-tiny?",
            "toy/suite.toml::toy?args?global_bt?-tiny?",
            "toy/suite.toml::toy?args?hier_bt?-tiny?",
            "toy/suite.toml::toy?args?history_bt?-tiny?",
            "toy/suite.toml::toy?args?lore?-tiny?",
            "toy/suite.toml::toy?args?pal?-tiny?",
            "toy/suite.toml::toy?args?per_user_bt?-tiny?",
            "toy/suite.toml::toy?args?pref?-tiny?",
            "toy/suite.toml::toy?args?profile_bm25?-tiny?",
            "toy/suite.toml::toy?args?profile_impostors?-tiny?",
            "toy/suite.toml::toy?args?profile_overlap?-tiny?",
            "toy/suite.toml::toy?args?vpl?-tiny?",
            "toy/suite.toml::toy?genarm?arm?-tiny?",
            # the MiniLM methods name bon; bon keeps the row it names
            "toy/suite.toml::toy?bon?global_bt_minilm?-tiny?",
            "toy/suite.toml::toy?bon?per_user_bt?-tiny?",
            "toy/suite.toml::toy?bon?per_user_bt_minilm?-tiny?",
            "toy/suite.toml::toy?bon?profile_minilm?-tiny?",
        ]
    )
    # the synthetic suite's oracles run only when named
    assert "21 tests collected" in result.stdout.str()
    assert "oracle" not in result.stdout.str()


BAD_REWARDS = """
import numpy as np
from pytest_prefalign.api import RewardMethod


class Bad(RewardMethod):
    name = "bad"
    mode = "?"

    def fingerprint(self):
        return self.name

    def fit(self, lm, pairs, cache_dir):
        if self.mode == "fit":
            raise ValueError("cannot train on nothing")

    def score(self, lm, batch):
        if self.mode == "raise":
            raise RuntimeError("scoring broke")
        if self.mode == "nan":
            return [float("nan")] * len(batch)
        if self.mode == "short":
            return np.zeros(len(batch) - 1)
        return np.array([len(r) for r in batch.responses], dtype=float)


def make(mode):
    return type(f"Bad_{mode}", (Bad,), {"name": f"bad_{mode}", "mode": mode})


def pytest_prefalign_register(registry):
    for mode in ("fit", "raise", "nan", "short", "ok"):
        registry.add_reward(f"bad_{mode}", make(mode))
"""


def test_broken_reward_methods_fail_their_own_tests_only(toy):
    toy.syspathinsert()
    toy.makepyfile(badrewards=BAD_REWARDS)
    methods = "base,bon[bad_fit],bon[bad_raise],bon[bad_nan],bon[bad_short],bon[bad_ok]"
    result = run(
        toy,
        "--prefalign",
        "toy",
        "-p",
        "badrewards",
        "--prefalign-methods",
        methods,
        "--prefalign-json",
        "out.json",
    )
    result.assert_outcomes(passed=2, failed=4)
    result.stdout.fnmatch_lines_random(
        [
            "*reward method 'bad_fit' failed in fit: ValueError: cannot train on nothing*",
            "*reward method 'bad_raise' raised in score: RuntimeError: scoring broke*",
            "*reward method 'bad_nan' score returned nan for a response to item 'ann/t0' of "
            "user 'ann' (48 non-finite of 48)*",
            "*reward method 'bad_short' score returned * values, expected *",
        ]
    )
    # a method's own exception shows its frames, not the evaluation's
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*_ toy?bon?bad_raise?-tiny? _*",
            "reward method 'bad_raise' raised in score: RuntimeError: scoring broke",
            "",
            "*def score(self, lm, batch):*",
            '>*raise RuntimeError("scoring broke")',
            "E*RuntimeError: scoring broke",
            "badrewards.py:18: RuntimeError",
        ]
    )
    failures = out.split(" FAILURES ")[1].split(" warnings summary ")[0]
    assert "pytest_prefalign/" not in failures and "_pytest/" not in failures
    # the source four columns in, as the failing line's ">   " and the "E   " lines
    assert "\n    def score(self, lm, batch):\n" in failures
    rows = json.loads((toy.path / "out.json").read_text())["results"]
    assert sorted(r["method"] for r in rows) == ["base", "bon[bad_ok]"]
    ok = next(r for r in rows if r["method"] == "bon[bad_ok]")
    assert ok["reward"] == "bad_ok" and 0.0 <= ok["metrics"]["rm_acc"] <= 1.0


def test_a_decoders_named_reward_keeps_its_row_beside_rows_other_rewards_chose():
    from pytest_prefalign.registry import MethodName, Registry

    class First:
        needs = frozenset({"score"})
        order = 1

    class Second:
        needs = frozenset({"score"})
        order = 2
        default_reward = "named"

    class Chooser:
        capabilities = frozenset()
        default_decoder = "second"

    class Plain:
        capabilities = frozenset()

    registry = Registry()
    registry.add_decoder("first", First)
    registry.add_decoder("second", Second)
    registry.add_reward("chooser", Chooser)
    registry.add_reward("named", Plain)
    # "named" goes to the first decoder; "second", which "chooser" picked, keeps its own too
    assert registry.default_methods() == [
        MethodName("first", "named"),
        MethodName("second", "chooser"),
        MethodName("second", "named"),
    ]
    # a name that nothing registered adds no row
    Second.default_reward = "missing"
    assert registry.default_methods() == [
        MethodName("first", "named"),
        MethodName("second", "chooser"),
    ]


def test_default_methods_give_every_guided_decoder_a_row():
    from pytest_prefalign.registry import MethodName, Registry

    class Plain:
        needs = frozenset()

    class Guided:
        needs = frozenset({"score"})
        order = 1

    class NeedsPrefix:
        needs = frozenset({"score", "prefix"})
        order = 2

    class Hinted(Guided):
        order = 3
        default_reward = "zeta"

    class Alpha:
        capabilities = frozenset()

    class Zeta:
        capabilities = frozenset({"prefix"})

    registry = Registry()
    for name, cls in [
        ("plain", Plain),
        ("guided", Guided),
        ("prefix", NeedsPrefix),
        ("hinted", Hinted),
    ]:
        registry.add_decoder(name, cls)
    registry.add_reward("alpha", Alpha)
    registry.add_reward("zeta", Zeta)
    # alpha and zeta both go to the first decoder they fit; "prefix" then takes the only
    # reward it can (zeta), "hinted" the one it names
    assert registry.default_methods() == [
        MethodName("plain", None),
        MethodName("guided", "alpha"),
        MethodName("guided", "zeta"),
        MethodName("prefix", "zeta"),
        MethodName("hinted", "zeta"),
    ]


BUGGY_DECODER = """
from prefalign_methods.decoders.base import BaseDecoder


class Buggy(BaseDecoder):
    name = "buggy"

    def generate(self, ctx, items):
        return [self.lookup(it) for it in items]

    def lookup(self, item):
        return {}[item.item_id]


def pytest_prefalign_register(registry):
    registry.add_decoder("buggy", Buggy)
"""


def test_a_bug_in_a_method_shows_its_own_frames_not_pytests(toy):
    toy.syspathinsert()
    toy.makepyfile(buggy=BUGGY_DECODER)
    result = run(toy, "--prefalign", "toy", "-p", "buggy", "--prefalign-methods", "base,buggy")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        ["*def runtest(self)*", "*return {}?item.item_id?*", "E*KeyError*", "buggy.py:*: KeyError"]
    )
    assert "_pytest/runner.py" not in out and "pluggy/_" not in out


def test_a_metric_declared_once_reaches_the_leaderboard_run_file_floors_and_gates(
    toy, monkeypatch: pytest.MonkeyPatch
):
    """The catalogue is the one place: a metric declared there over an existing record field
    is computed, shown, stored, floored and gated with no other change."""
    from pytest_prefalign.analysis import catalogue

    declared = catalogue.Metric(
        "policy_hits", "pair", "policy_correct", "micro", "policy hits", gateable=True
    )
    monkeypatch.setattr(catalogue, "METRICS", (*catalogue.METRICS, declared))
    first = run(
        toy, "--prefalign", "toy", "--prefalign-methods", "base", "--prefalign-json", "a.json",
        "--prefalign-fail-under", "policy_hits=0.0", "--prefalign-save", "main",
    )  # fmt: skip
    first.assert_outcomes(passed=1)
    first.stdout.fnmatch_lines(["*method*ROUGE-1*policy acc*policy hits*time*"])
    (row,) = json.loads((toy.path / "a.json").read_text())["results"]
    pairs = json.loads((toy.path / "a.json").read_text())["pairs"]
    expected = sum(p["policy_correct"] for p in pairs) / len(pairs)
    assert row["metrics"]["policy_hits"] == pytest.approx(expected)
    assert len(row["ci"]["policy_hits"]) == 2 and set(row["per_user"]["policy_hits"]) == {
        "ann",
        "bob",
    }
    second = run(
        toy, "--prefalign", "toy", "--prefalign-methods", "base", "--prefalign-compare",
        "main", "--prefalign-compare-fail", "policy_hits:0pp",
    )  # fmt: skip
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*toy*base*tiny*policy_hits*0pp*ok*"])


@pytest.mark.slow
def test_the_summary_fits_a_terminal_of_the_given_width(pytester, monkeypatch):
    # the leaderboard and the analysis fit a width, as pytest's own lines do: the terminal's,
    # or $PREFALIGN_WIDTH's (here 100); the synthetic suite's oracles bring the wide tables
    pytester.makeini("[pytest]\nprefalign_models = tiny = tiny\n")
    pytester.mkdir("synthetic").joinpath("suite.toml").write_text('[suite]\nname = "synthetic"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    monkeypatch.setenv("PREFALIGN_WIDTH", "100")
    methods = "base,bon[oracle],bon[oracle_noisy],bon[oracle_negated]"
    args = ("--prefalign", "synthetic", "--prefalign-limit", "6", "--prefalign-methods", methods)
    result = run(pytester, *args)
    assert result.ret == 0
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "prefalign leaderboard" in line)
    end = next(i for i, line in enumerate(lines) if line.startswith("cache: "))
    section = lines[start + 1 : end]  # the tables and their sentences (then paths, as they are)
    assert any("Kendall's tau-b" in line for line in section)
    assert any("Circular evaluation" in line for line in section)
    # one line per claim of the paper: its verdict and the users a run needs to reach it
    text = " ".join(" ".join(section).split())  # the wrapped sentences joined again
    claim_one = text.split("- 1. tau weak (synthetic · ")[1].split(" - 2. spread")[0]
    assert " · bon): " in claim_one and "users needed" in claim_one and "runs each" in claim_one
    assert max(len(line) for line in section) <= 100, max(section, key=len)
    # no terminal (a CI log) and no width asked for: the rows are left whole
    monkeypatch.delenv("PREFALIGN_WIDTH")
    lines = run(pytester, *args).stdout.lines
    start = next(i for i, line in enumerate(lines) if "prefalign leaderboard" in line)
    assert max(len(line) for line in lines[start:]) > 100
