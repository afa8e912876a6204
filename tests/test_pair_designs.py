"""``benchmarks/pair_designs.py --comparisons``'s standard errors worked out by hand: the
per-user error of a paired method difference, with the pairs of one paper a cluster, and a
rivals run's first rival alone."""

from __future__ import annotations

import sys

import benchmark_scripts
import pytest


@pytest.fixture(scope="module")
def pairings():
    yield benchmark_scripts.load("pair_designs")
    sys.modules.pop("pair_designs", None)


def test_singleton_clusters_give_the_variance_of_a_plain_mean(pairings):
    # four pairs, each its own paper: s^2 / n = (1/3) / 4
    assert pairings.clustered_variance([[1.0], [0.0], [1.0], [0.0]]) == pytest.approx(1 / 12)


def test_pairs_of_one_paper_count_as_one_draw(pairings):
    # two papers of two identical pairs each: the mean of two draws, (1/2) / 2
    assert pairings.clustered_variance([[1.0, 1.0], [0.0, 0.0]]) == pytest.approx(0.25)
    # the same four values as independent papers would claim a third of it
    assert pairings.clustered_variance([[1.0], [1.0], [0.0], [0.0]]) == pytest.approx(1 / 12)


def test_the_per_user_error_is_the_root_of_the_users_mean_variance(pairings):
    by_method = {
        "a": [["u/p1", "u", 1.0], ["u/p1~1", "u", 1.0], ["u/p2", "u", 0.0],
              ["v/q1", "v", 1.0], ["v/q2", "v", 1.0], ["w/r1", "w", 1.0]],
        "b": [["u/p1", "u", 0.0], ["u/p1~1", "u", 0.0], ["u/p2", "u", 0.0],
              ["v/q1", "v", 0.0], ["v/q2", "v", 1.0], ["w/r1", "w", 0.0]],
    }  # fmt: skip
    # u: differences {p1: [1, 1], p2: [0]}, mean 2/3, cluster sums 2/3 and -2/3:
    #    2 / 1 * (8/9) / 9 = 16/81;  v: {q1: [1], q2: [0]}, mean 1/2: 2 * (1/2) / 4 = 1/4;
    # w has one paper: no estimate
    expected = ((16 / 81 + 1 / 4) / 2) ** 0.5
    assert pairings.within_errors(by_method) == {"a - b": pytest.approx(expected)}


def test_a_rivals_run_gives_its_first_rivals_pairs_alone(pairings):
    outcomes = {
        "rm_acc": {"a": [["u/p1", "u", 1.0], ["u/p1~1", "u", 0.0], ["u/p2", "u", 1.0]]},
        "policy_acc": {"a": [["u/p1", "u", 0.0], ["u/p1~2", "u", 1.0], ["u/p2", "u", 0.0]]},
    }
    run = {"outcomes": outcomes, "per_user": {}, "pairs": 5, "users": 1}
    first = pairings.first_rivals(run, 1)
    assert first["pairs"] == 2
    assert first["per_user"] == {"rm_acc": {"a": {"u": 1.0}}, "policy_acc": {"a": {"u": 0.0}}}
    two = pairings.first_rivals(run, 2)  # ~1 kept, ~2 not
    assert two["pairs"] == 3
    assert two["per_user"] == {"rm_acc": {"a": {"u": 2 / 3}}, "policy_acc": {"a": {"u": 0.0}}}
    assert pairings.paper_of("u/p1~2") == pairings.paper_of("u/p1#0-1") == "u/p1"
    # another suite's ids are their own: synthetic's and Polis's
    assert pairings.paper_of("short#0/07") == "short#0/07"
    assert pairings.paper_of("conv:12/18>3") == "conv:12/18>3"


def test_the_spread_over_users_splits_into_their_noise_and_what_is_left(pairings):
    # a - b: u {p1: [1], p2: [1]} (mean 1, no noise), v {q1: [0], q2: [0]} (mean 0),
    # w {r1: [1], r2: [0]} (mean 1/2, clustered variance 2 * (1/4 + 1/4) / 4 = 1/4);
    # x has one paper and is left out of all three parts
    a = [["u/p1", "u", 1.0], ["u/p2", "u", 1.0], ["v/q1", "v", 0.0], ["v/q2", "v", 0.0],
         ["w/r1", "w", 1.0], ["w/r2", "w", 0.0], ["x/s1", "x", 1.0]]  # fmt: skip
    b = [[pid, user, 0.0] for pid, user, _ in a]
    parts = pairings.decompose({"outcomes": {"rm_acc": {"a": a, "b": b}}}, "rm_acc")
    # over users: the variance of (1, 0, 1/2) = 1/4; noise: the mean of (0, 0, 1/4) = 1/12
    assert parts["over_users"] == pytest.approx(0.5)
    assert parts["per_user"] == pytest.approx((1 / 12) ** 0.5)
    assert parts["between"] == pytest.approx((1 / 4 - 1 / 12) ** 0.5)


def test_the_writer_s_prompts_are_counted_as_a_run_asks_them(pairings, tmp_path):
    from tests.test_pair_writer import FakeWriter
    from tests.test_rivals import build

    fake = FakeWriter()
    build(tmp_path, fake, writer_rivals="3")  # 6 training briefs, 2 test briefs
    options = {"negatives": "style", "writer_rivals": "3"}
    data = tmp_path / "data"
    assert pairings.writer_prompts(data, options, 2) == len(set(fake.prompts)) == 6 * 2 + 2 * 4
    assert pairings.writer_prompts(data, {"negatives": "style"}, 2) == 8 * 2


KEPT = benchmark_scripts.BENCHMARKS / "pair-designs-runs"
SUITES_DOC = benchmark_scripts.BENCHMARKS.parent / "docs" / "suites.md"


@pytest.mark.parametrize("authors, kept", [("main job's 8", "rivals-0"), ("101-108", "rivals-100")])
def test_the_documented_per_user_errors_are_the_kept_measurement_s(pairings, authors, kept):
    """docs/suites.md's row of cross-fitting with 3 rivals, from the kept measurement."""
    runs = pairings.read_json(str(KEPT / f"{kept}.json.gz"))
    first, rivals = runs["nearest"], runs["nearest, 2 folds, 3 rivals"]
    cells = []  # per metric: the median ratio per user, then over users (as the table's)
    for metric in pairings.METRICS:
        within = [pairings.within_errors(r["outcomes"][metric]) for r in (rivals, first)]
        over = [pairings.standard_errors(r["per_user"][metric]) for r in (rivals, first)]
        cells += [pairings.se_cells(*within)[1], pairings.se_cells(*over)[1]]
    per_user_rm, over_rm, per_user_policy, over_policy = cells
    head = f"| {authors} | 2 folds, 3 rivals | {rivals['pairs'] / rivals['users']:.1f} | "
    tail = f" | **{per_user_rm}** | {over_rm} | **{per_user_policy}** | {over_policy} |"
    doc = SUITES_DOC.read_text(encoding="utf-8")
    assert any(line.startswith(head) and tail in line for line in doc.splitlines()), head + tail


def test_rm_accuracy_counts_a_reward_method_once_and_policy_accuracy_every_method(pairings):
    same = [["u/p1", "u", 1.0], ["u/p2", "u", 0.0]]
    outcomes = {
        # pal under two decoders ranks the pairs alike; lore happens to rank them as pal does
        "rm_acc": {"args[pal]": same, "bon[pal]": list(same), "args[lore]": list(same)},
        # two decoders that happen to agree on every pair are still two methods
        "policy_acc": {"args[pal]": same, "bon[pal]": list(same), "base": [["u/p1", "u", 1.0]]},
    }
    found = pairings.distinct(outcomes)
    assert list(found["rm_acc"]) == ["args[pal]", "args[lore]"]
    assert list(found["policy_acc"]) == ["args[pal]", "bon[pal]", "base"]
    assert pairings.reward_of("genarm[arm]") == "arm" and pairings.reward_of("base") == "base"
