"""Stale caches, end to end: a real ``pytest --prefalign`` run in a small project (pytester), then
a second run in the same cache with one input changed. The run file lists, per test, the cached
values it used and whether each came from the cache; every input that a value depends on must
turn its hit into a miss, and nothing else may.

The inputs: the data, a suite option, a reward option, a decoder option, the seed, the model and
the code. Last, a cached rerun must give figure for figure what ``--prefalign-no-cache`` gives,
for two suite options sharing one cache (in fresh processes, so that no in-process memo helps).
"""

from __future__ import annotations

import json
import math
import textwrap
from typing import Any

import pytest
from run_figures import figures, same_figures

TOY_SUITE = '''
import json
from pathlib import Path

from pytest_prefalign.api import Item, Pair, ProfileEntry, SuiteData


class Toy:
    """Users with a profile, generation items and training pairs. Option ``rejected``:
    ``listed`` (the training pairs' own rejected side) or ``fixed`` (one text for all)."""

    name = "toy"
    description = "users who write about cats or dogs"
    licence = "CC0"
    source = "toy"

    def instruction(self, input):
        return f"Write a title for: {input}"

    def example(self, entry):
        return f"Text: {entry.input}\\nTitle: {entry.output}"

    def load(self, data_dir, *, limit, options):
        path = Path(data_dir) / "records.json"
        mode = options.get("rejected", "listed")
        profiles, items, train, test = {}, [], [], []
        for rec in json.loads(path.read_text()):
            user = rec["user"]
            profiles[user] = [ProfileEntry(f"{user}/p{i}", t, o)
                              for i, (t, o) in enumerate(rec["profile"])]
            for i, (text, own, other) in enumerate(rec["train"]):
                bad = other if mode == "listed" else "A fixed title"
                train.append(Pair(f"{user}/r{i}", user, self.instruction(text), own, bad))
            for i, (text, title, bad) in enumerate(rec["tests"]):
                prompt = self.instruction(text)
                items.append(Item(f"{user}/t{i}", user, text, prompt, title))
                test.append(Pair(f"{user}/t{i}", user, prompt, title, bad))
        return SuiteData("toy", str(path), profiles, items, train_pairs=train, test_pairs=test)

    def build_pairs(self, data, reference, cache_dir):
        raise AssertionError("toy pairs come with the data")


def pytest_prefalign_register(registry):
    registry.add_suite(Toy())
'''

MY_RM = '''
"""A third-party reward method: a Bradley-Terry head, kept in a module of its own."""
from prefalign_methods.rewards.global_bt import GlobalBT


class MyRM(GlobalBT):
    name = "my_rm"

    def _standardise(self, h):
        # the code that the code-version scenario edits
        return (h - self._mean.to(h.device)) / self._std.to(h.device)


def pytest_prefalign_register(registry):
    registry.add_reward("my_rm", MyRM)
'''

CATS = [
    "cats sleep in the sun",
    "a kitten plays with yarn",
    "cats purr at night",
    "the cat and the mouse",
]
DOGS = [
    "dogs bark at the mailman",
    "a puppy fetches a ball",
    "dogs run in the park",
    "the dog and the bone",
]
RECORDS = [
    {
        "user": "ann",
        "profile": [[t, t.title()] for t in CATS],
        "train": [[t, t.title(), d.title()] for t, d in zip(CATS, DOGS, strict=True)],
        "tests": [
            ["a cat on a mat", "Cat On A Mat", "Dogs Run"],
            ["cats and milk", "Milk For Cats", "A Bone"],
        ],
    },
    {
        "user": "bob",
        "profile": [[d, d.title()] for d in DOGS],
        "train": [[d, d.title(), t.title()] for t, d in zip(CATS, DOGS, strict=True)],
        "tests": [
            ["a dog in a park", "Dog In The Park", "Cats Nap"],
            ["dogs and sticks", "Sticks For Dogs", "Yarn Balls"],
        ],
    },
]


@pytest.fixture(scope="module", autouse=True)
def heavy_modules_imported_once():
    """pytester restores sys.modules after an in-process run; torch cannot be imported twice in
    one process, so everything heavy is imported here, before the first snapshot."""
    import bm25s  # noqa: F401
    import rouge_score.rouge_scorer  # noqa: F401

    import prefalign_methods.decoders.args  # noqa: F401
    import prefalign_methods.decoders.genarm  # noqa: F401
    import prefalign_methods.rewards.judge  # noqa: F401
    import pytest_prefalign.evaluation.case  # noqa: F401
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    build_tiny_lm(0)


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeconftest(TOY_SUITE)
    pytester.makepyfile(my_rm=MY_RM)
    pytester.syspathinsert()
    write_ini(pytester, "tiny = tiny")
    data = pytester.mkdir("data").joinpath("toy")
    data.mkdir()
    data.joinpath("records.json").write_text(json.dumps(RECORDS))
    pytester.mkdir("toy").joinpath("suite.toml").write_text('[suite]\nname = "toy"\n')
    monkeypatch.setenv("PREFALIGN_CACHE", str(pytester.path / "cache"))
    return pytester


def write_ini(pytester: pytest.Pytester, model_line: str) -> None:
    pytester.makeini(
        textwrap.dedent(f"""
        [pytest]
        prefalign_models = {model_line}
        prefalign_sizes = tiny
        prefalign_data = data
    """)
    )


def run(
    pytester: pytest.Pytester, methods: str, *args: str, out: str = "run.json"
) -> dict[str, Any]:
    return run_with_output(pytester, methods, *args, out=out)[1]


def run_with_output(
    pytester: pytest.Pytester, methods: str, *args: str, out: str = "run.json"
) -> tuple[pytest.RunResult, dict[str, Any]]:
    """A run of the small project in this process, passing; its output and its run file."""
    from pytest_prefalign.runtime.models import clear_loaded

    clear_loaded()  # each run loads its model afresh, as a new process would
    result = pytester.runpytest_inprocess(
        "--prefalign",
        "toy",
        "-p",
        "no:cacheprovider",
        "-p",
        "my_rm",
        "--prefalign-methods",
        methods,
        "--prefalign-json",
        out,
        *args,
    )
    assert result.ret == 0, result.stdout.str()
    return result, json.loads((pytester.path / out).read_text())


def uses(run_file: dict[str, Any]) -> dict[tuple[str, str, str], bool]:
    """(test's method, artifact, the method a generation is of) -> hit, for every cached value
    a test used; features are left out (an in-process memo may serve them instead)."""
    out = {}
    for row in run_file["results"]:
        for use in row["cache"]:
            if use["artifact"] == "features":
                continue
            of = use["inputs"].get("method", "")
            out[(row["method"], use["artifact"], of)] = use["hit"]
    return out


def misses(run_file: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {use for use, hit in uses(run_file).items() if not hit}


GUIDED = "base,icl,args[global_bt],genarm[arm]"


def results_of(methods: str) -> set[tuple[str, str, str]]:
    """Each test's own results (its records, the figures' source), by method."""
    return {(m, "results", m) for m in methods.split(",")}


def guidance_of(methods: str) -> set[tuple[str, str, str]]:
    """Each reward-guided test's guidance strength, chosen on validation items: consulted
    before its results, so a rerun reads it too."""
    return {(m, "guidance", m) for m in methods.split(",") if m.startswith(("args[", "genarm["))}


def consulted(methods: str) -> set[tuple[str, str, str]]:
    """What a rerun whose results all come from the cache consults."""
    return results_of(methods) | guidance_of(methods)


def keys(run_file: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (u["artifact"], u["key"])
        for r in run_file["results"]
        for u in r["cache"]
        if u["artifact"] != "features"
    }


def test_an_unchanged_rerun_hits_every_cached_value_with_the_same_figures(project):
    first = run(project, GUIDED, out="first.json")
    assert misses(first) == set(uses(first))  # a cold cache computes everything
    kinds = {artifact for _, artifact, _ in uses(first)}
    assert {"generations", "rewards", "reward-scale", "guidance", "judges", "results"} <= kinds
    again = run(project, GUIDED, out="again.json")
    # each test's results come whole from the cache, after its guidance strength: nothing
    # inside them is consulted, no reward method is fitted
    assert set(uses(again)) == consulted(GUIDED) and misses(again) == set()
    assert same_figures(again, first)
    assert keys(again) <= keys(first)  # the same keys both times
    # the phases: a cold run generated and scored in each test, trained once per reward
    # method; the warm run did neither
    cold = {r["method"]: r["timings"] for r in first["results"]}
    warm = {r["method"]: r["timings"] for r in again["results"]}
    assert all(t["generate_tokens"] > 0 and t["policy_tokens"] > 0 for t in cold.values())
    assert cold["args[global_bt]"]["fit_s"] > 0 and cold["genarm[arm]"]["fit_s"] > 0
    assert all(t["total_s"] >= t["generate_s"] + t["policy_s"] for t in cold.values())
    assert not any("generate_tokens" in t or "policy_tokens" in t for t in warm.values())
    # the model's body: each cold test ran positions through it (weight FLOPs in proportion;
    # attention and the output head on top), a warm test none
    assert all(t["forward_tokens"] > 0 and t["forward_s"] > 0 for t in cold.values())
    assert len({t["forward_body_flops"] / t["forward_tokens"] for t in cold.values()}) == 1
    assert all(
        t["forward_flops"] > t["forward_body_flops"] and t["forward_attention_flops"] > 0
        for t in cold.values()
    )
    assert not any("forward_tokens" in t for t in warm.values())
    assert all(t.get("fit_s", 0.0) == 0.0 for t in warm.values())


def edit_training_pair(project: pytest.Pytester) -> list[str]:
    records = json.loads(json.dumps(RECORDS))
    records[0]["train"][0][2] = "An Edited Rejected Title"
    (project.path / "data" / "toy" / "records.json").write_text(json.dumps(records))
    return []


def reward_guided_misses(method: str, reward: str) -> set[tuple[str, str, str]]:
    """A new fitted reward method: its scale, the strength chosen with it, the outputs and the
    results are computed again."""
    return {
        (method, "rewards", reward),
        (method, "reward-scale", reward),
        *guidance_of(method),
        (method, "generations", method),
        *results_of(method),
    }


def edit_test_reference(project: pytest.Pytester) -> list[str]:
    records = json.loads(json.dumps(RECORDS))
    records[0]["tests"][0][1] = "An Edited Reference Title"
    (project.path / "data" / "toy" / "records.json").write_text(json.dumps(records))
    return []


SCENARIOS = {
    # (methods, what changes, what must be recomputed; everything else must hit)
    "data": (
        "base,icl,args[global_bt]",
        edit_training_pair,
        reward_guided_misses("args[global_bt]", "global_bt"),
    ),
    "suite option": (
        "base,icl,args[global_bt]",
        lambda p: (
            p.path.joinpath("toy", "suite.toml").write_text(
                '[suite]\nname = "toy"\n[options]\nrejected = "fixed"\n'
            )
            and []
        ),
        reward_guided_misses("args[global_bt]", "global_bt"),
    ),
    "reward option": (
        "args[global_bt],genarm[arm]",
        lambda p: ["--prefalign-option", "global_bt.l2=0.5"],
        reward_guided_misses("args[global_bt]", "global_bt"),
    ),
    "decoder option": (
        "args[global_bt],genarm[arm]",
        lambda p: ["--prefalign-option", "args.k=3"],
        {
            ("args[global_bt]", "guidance", "args[global_bt]"),
            ("args[global_bt]", "generations", "args[global_bt]"),
            *results_of("args[global_bt]"),
        },
    ),
    # the guidance strength is chosen on validation items, never the test items: a test
    # item's reference changes every output's record, not the strength
    "test item": (
        "base,args[global_bt]",
        edit_test_reference,
        {
            ("base", "generations", "base"),
            ("args[global_bt]", "generations", "base"),
            ("args[global_bt]", "generations", "args[global_bt]"),
            *results_of("base,args[global_bt]"),
        },
    ),
    "policy reduction": (  # scores the pairs again; the outputs stay
        "base,args[global_bt]",
        lambda p: ["--prefalign-reduce", "mean"],
        results_of("base,args[global_bt]"),
    ),
    "seed": (
        "base,icl,args[global_bt]",
        lambda p: ["--prefalign-seed", "7"],
        {
            ("base", "generations", "base"),
            ("icl", "generations", "icl"),
            ("args[global_bt]", "generations", "args[global_bt]"),
            ("args[global_bt]", "generations", "base"),
            ("args[global_bt]", "guidance", "args[global_bt]"),
            *results_of("base,icl,args[global_bt]"),
        },
    ),
    "code": (
        "args[global_bt],args[my_rm]",
        lambda p: (
            p.path.joinpath("my_rm.py").write_text(
                MY_RM.replace("/ self._std", "/ (2 * self._std)")
            )
            and []
        ),
        reward_guided_misses("args[my_rm]", "my_rm"),
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_each_input_changed_alone_recomputes_exactly_what_depends_on_it(project, scenario):
    methods, change, expected = SCENARIOS[scenario]
    first = run(project, methods, out="first.json")
    args = change(project) or []
    second = run(project, methods, *args, out="second.json")
    assert misses(second) == expected
    # a test whose results were recomputed consulted what it did the first time (and what
    # another test had loaded for it then: the judge); any other took its results whole
    recomputed = {m for m, artifact, _ in expected if artifact == "results"}
    for method in recomputed:
        again = {u for u in uses(second) if u[0] == method}
        before = {u for u in uses(first) if u[0] == method}
        shared = {(method, artifact, of) for _, artifact, of in uses(first)}
        assert before <= again <= shared
    others = [m for m in methods.split(",") if m not in recomputed]
    assert {u for u in uses(second) if u[0] not in recomputed} == (
        consulted(",".join(others)) - expected if others else set()
    )


CONF_RM = """

from prefalign_methods.rewards.global_bt import GlobalBT


class ConfRM(GlobalBT):
    name = "conf_rm"

    def _standardise(self, h):
        return (h - self._mean.to(h.device)) / self._std.to(h.device)
"""


def test_a_method_in_a_conftest_is_recomputed_when_edited_beside_another_conftest(project):
    # every conftest outside a package is the module "conftest", and sys.modules keeps the one
    # imported last (toy/conftest.py here): the method's code must be read from its own file
    conftest = (
        TOY_SUITE.replace(
            "registry.add_suite(Toy())",
            "registry.add_suite(Toy())\n    registry.add_reward('conf_rm', ConfRM)",
        )
        + CONF_RM
    )
    project.makeconftest(conftest)
    project.path.joinpath("toy", "conftest.py").write_text("HELPER = 1\n")
    first = run(project, "args[conf_rm]", out="first.json")
    assert misses(first) == set(uses(first))
    assert misses(run(project, "args[conf_rm]", out="again.json")) == set()
    project.makeconftest(conftest.replace("/ self._std", "/ (2 * self._std)"))
    edited = run(project, "args[conf_rm]", out="edited.json")
    assert ("args[conf_rm]", "rewards", "conf_rm") in misses(edited)
    # everything read the edited conftest (the suite is there too) but the independent judge,
    # keyed by its own code and the content of the pairs it is trained on
    assert misses(edited) == {use for use in uses(first) if use[1] != "judges"}


def test_the_summary_says_how_much_came_from_the_cache(project):
    args = ("--prefalign", "toy", "-p", "no:cacheprovider", "--prefalign-methods", "base,icl")
    project.runpytest_inprocess(*args).stdout.fnmatch_lines(
        ["cache: 0 of 4 values reused, 4 computed (each keyed by *"]  # generations, results
    )
    project.runpytest_inprocess(*args).stdout.fnmatch_lines(
        ["cache: 2 of 2 values reused, 0 computed *"]
    )
    project.runpytest_inprocess(*args, "--prefalign-no-cache").stdout.fnmatch_lines(
        ["cache: off (--prefalign-no-cache), 4 values computed"]
    )


def test_a_comment_in_a_plugin_changes_nothing(project):
    first = run(project, "args[my_rm]", out="first.json")
    project.path.joinpath("my_rm.py").write_text(
        MY_RM.replace("# the code that the code-version scenario edits", "# reworded")
    )
    second = run(project, "args[my_rm]", out="second.json")
    assert misses(second) == set() and same_figures(second, first)


def test_another_model_recomputes_everything_that_reads_it(project, tmp_path):
    from pytest_prefalign.runtime.tiny import build_tiny_lm

    folder = tmp_path / "model"
    lm = build_tiny_lm(0)
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    write_ini(project, f"tiny = {folder}")
    first = run(project, "base,args[global_bt]", out="first.json")
    build_tiny_lm(1).model.save_pretrained(folder)  # same architecture, other weights
    second = run(project, "base,args[global_bt]", out="second.json")
    assert misses(second) == {
        ("base", "generations", "base"),
        ("args[global_bt]", "generations", "base"),
        ("args[global_bt]", "generations", "args[global_bt]"),
        ("args[global_bt]", "rewards", "global_bt"),
        ("args[global_bt]", "reward-scale", "global_bt"),
        ("args[global_bt]", "guidance", "args[global_bt]"),
        *results_of("base,args[global_bt]"),
    }
    assert first["models"]["tiny"]["fingerprint"] != second["models"]["tiny"]["fingerprint"]


def test_a_rerun_served_from_the_cache_loads_no_model(project, tmp_path, monkeypatch):
    import importlib

    from pytest_prefalign.runtime.tiny import build_tiny_lm

    # the module the runs will use: pytester drops what a run imported, and an attribute of
    # the package may still name a module that an earlier run imported and dropped
    models = importlib.import_module("pytest_prefalign.runtime.models")

    folder = tmp_path / "model"  # a model known by its files (the tiny one hashes its weights)
    lm = build_tiny_lm(0)
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    write_ini(project, f"tiny = {folder}")
    first = run(project, GUIDED, out="first.json")
    loads = []
    real = models._load_source

    def refused(*args: Any) -> Any:
        loads.append(args)
        raise AssertionError("a rerun served from the cache loaded a model")

    monkeypatch.setattr(models, "_load_source", refused)
    again = run(project, GUIDED, out="again.json")
    assert loads == [] and misses(again) == set()
    assert same_figures(again, first)
    # the identity read from the files is the loaded model's, kernel and dtype included
    assert again["models"] == first["models"]
    for cold, warm in zip(first["results"], again["results"], strict=True):
        assert warm["model"] == cold["model"] and warm["environment"] == cold["environment"]
    # a change that needs the model loads it
    monkeypatch.setattr(models, "_load_source", lambda *args: loads.append(args) or real(*args))
    run(project, GUIDED, "--prefalign-seed", "7", out="seeded.json")
    assert len(loads) == 1


def test_bf16_weights_on_the_cpu_run_every_decoder_and_recompute_what_reads_the_model(project):
    first = run(project, GUIDED, out="first.json")
    write_ini(project, "tiny = tiny dtype=bfloat16")
    second = run(project, GUIDED, out="second.json")
    assert {r["environment"]["dtype"] for r in first["results"]} == {"float32"}
    assert {r["environment"]["dtype"] for r in second["results"]} == {"bfloat16"}
    assert first["models"]["tiny"]["fingerprint"] != second["models"]["tiny"]["fingerprint"]
    # every value that reads the model is computed again; the judge reads only its encoder
    assert {u for u in uses(second) if u[1] != "judges"} == misses(second)
    assert {u for u in uses(second) if u[1] == "judges"} <= set(uses(second)) - misses(second)
    for row in second["results"]:
        assert row["metrics"] and all(math.isfinite(v) for v in row["metrics"].values())


def test_a_reward_method_that_reads_profiles_gets_them_and_is_keyed_by_them(project):
    # profile_overlap declares needs_profiles: the evaluation hands it the suite's profiles
    # before fit. Read, each preferred test title holds a word of its user's profile and no
    # rejected one does: ann's "Cat On A Mat" and "Milk For Cats" ("The Cat And The Mouse",
    # "Cats Purr At Night"), bob's "Dog In The Park" and "Sticks For Dogs". Unread, all tie.
    methods = "args[global_bt],args[profile_overlap]"
    first = run(project, methods, out="first.json")
    rows = {r["method"]: r for r in first["results"]}
    assert rows["args[profile_overlap]"]["metrics"]["rm_acc"] == 1.0
    inputs = {
        u["inputs"]["method"]: u["inputs"]
        for r in first["results"]
        for u in r["cache"]
        if u["artifact"] == "rewards"
    }
    assert "profiles" in inputs["profile_overlap"] and "profiles" not in inputs["global_bt"]
    records = json.loads(json.dumps(RECORDS))
    records[1]["profile"][0][1] = "Puppies Everywhere"  # one of bob's profile outputs
    (project.path / "data" / "toy" / "records.json").write_text(json.dumps(records))
    second = run(project, methods, out="second.json")
    assert ("args[profile_overlap]", "rewards", "profile_overlap") in misses(second)
    assert ("args[global_bt]", "rewards", "global_bt") not in misses(second)


def test_prefalign_dtype_bfloat16_is_refused_without_native_bf16_and_runs_with_it(
    project, monkeypatch
):
    from pytest_prefalign.runtime import devices

    monkeypatch.setattr(devices, "cpu_bf16", lambda: False)  # this AVX2 CPU, whatever it is
    refused = project.runpytest_inprocess("--prefalign", "toy", "--prefalign-dtype", "bfloat16")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    (line,) = [x for x in refused.stderr.lines if "bfloat16" in x]
    assert "this CPU has no native bf16" in line
    bad = project.runpytest_inprocess("--prefalign", "toy", "--prefalign-dtype", "float16")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "expected float32 or bfloat16" in bad.stderr.str()
    first = run(project, GUIDED, "--prefalign-dtype", "float32", out="first.json")
    # a CPU with avx512_bf16 or AMX (torch runs bf16 on this one too, emulated and slowly)
    monkeypatch.setattr(devices, "cpu_bf16", lambda: True)
    second = run(project, GUIDED, "--prefalign-dtype", "bfloat16", out="second.json")
    assert {r["environment"]["dtype"] for r in first["results"]} == {"float32"}
    # the passes in bf16 run PyTorch's dense linears, never the fp32 packed kernel
    assert {(r["environment"]["dtype"], r["environment"]["linear"]) for r in second["results"]} == {
        ("bfloat16", "dense")
    }
    assert first["models"]["tiny"]["fingerprint"] != second["models"]["tiny"]["fingerprint"]
    # every value that reads the model is computed again; the judge reads only its encoder
    assert {u for u in uses(second) if u[1] != "judges"} == misses(second)
    for row in second["results"]:
        assert row["metrics"] and all(math.isfinite(v) for v in row["metrics"].values())
    # the ini value does the same, and its rerun comes whole from the cache
    project.makeini(
        "[pytest]\nprefalign_models = tiny = tiny\nprefalign_sizes = tiny\n"
        "prefalign_data = data\nprefalign_dtype = bfloat16\n"
    )
    result = project.runpytest_inprocess(
        "--prefalign", "toy", "-p", "no:cacheprovider", "-p", "my_rm",
        "--prefalign-methods", GUIDED, "--prefalign-json", "third.json",
    )  # fmt: skip
    assert result.ret == 0
    third = json.loads((project.path / "third.json").read_text())
    assert misses(third) == set() and same_figures(third, second)
    # the leaderboard's heading names the dtype
    (heading,) = [x for x in result.stdout.lines if x.startswith("toy · tiny · ")]
    assert heading.endswith(" · bfloat16")


def test_the_run_file_lists_each_tests_cached_values_with_their_inputs(project):
    from prefalign_methods.rewards import features

    features.clear_memo()  # else an earlier test's in-process memo serves them
    run_file = run(project, "args[global_bt]")
    (row,) = run_file["results"]
    by_kind = {}
    for use in row["cache"]:
        by_kind.setdefault(use["artifact"], []).append(use)
    (reward,) = by_kind["rewards"]
    assert set(reward["inputs"]) == {"method", "config", "code", "model", "train_pairs"}
    generations = {u["inputs"]["method"]: u for u in by_kind["generations"]}
    assert set(generations) == {"args[global_bt]", "base"}  # base's for the win rates
    own = generations["args[global_bt]"]
    # the fitted reward's key, data included, through its scale's: the outputs depend on both
    (scale,) = by_kind["reward-scale"]
    assert scale["inputs"]["reward"] == reward["key"]
    assert own["inputs"]["reward"] == scale["key"]
    (strength,) = by_kind["guidance"]
    assert strength["inputs"]["reward"] == reward["key"] and "validation" in strength["inputs"]
    assert not {"items", "test_pairs"} & set(strength["inputs"])  # never the test items
    assert {"decoder", "options", "seed", "model", "suite", "items", "profiles"} <= set(
        own["inputs"]
    )
    assert all(len(u["key"]) == 16 and u["hit"] is False for u in row["cache"])
    assert by_kind["features"] and by_kind["judges"]


@pytest.mark.slow  # three runs in fresh processes: no in-process memo may stand in for a cache
def test_cached_reruns_equal_no_cache_runs_for_two_suite_options(project):
    def fresh(options: str, *args: str, out: str) -> dict[str, Any]:
        project.path.joinpath("toy", "suite.toml").write_text(
            f'[suite]\nname = "toy"\n[options]\nrejected = "{options}"\n'
        )
        result = project.runpytest_subprocess(
            "--prefalign",
            "toy",
            "-p",
            "no:cacheprovider",
            "--prefalign-methods",
            "base,icl,args[global_bt],bon[per_user_bt]",
            "--prefalign-json",
            out,
            *args,
        )
        assert result.ret == 0, result.stdout.str()
        return json.loads((project.path / out).read_text())

    listed = fresh("listed", out="listed.json")
    fixed = fresh("fixed", out="fixed.json")  # same cache: base and icl come from it
    assert ("base", "generations", "base") not in misses(fixed)
    assert ("args[global_bt]", "rewards", "global_bt") in misses(fixed)
    fixed_fresh = fresh("fixed", "--prefalign-no-cache", out="fixed-fresh.json")
    assert misses(fixed_fresh) == set(uses(fixed_fresh))  # nothing read from the cache
    assert same_figures(fixed, fixed_fresh)
    assert figures(fixed)["metrics"] != figures(listed)["metrics"]
    listed_again = fresh("listed", out="listed-again.json")
    assert misses(listed_again) == set() and same_figures(listed_again, listed)
