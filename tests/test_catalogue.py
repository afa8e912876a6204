"""The metric catalogue: the roles the analysis asks for, and a plugin's metric registered into
it, which the leaderboard, the figures of a case, tau, the inversions and the regret then take
up (end to end through a real run: tests/test_plugin.py)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from pytest_prefalign.analysis import catalogue, crisis, regret, table
from pytest_prefalign.analysis.figures import figures
from pytest_prefalign.errors import PrefalignError
from pytest_prefalign.evaluation import case
from pytest_prefalign.runs.parts import ItemRecord, PairRecord
from pytest_prefalign.runs.records import CaseResult

USERS = [f"u{i}" for i in range(8)]


@pytest.fixture(autouse=True)
def clean_catalogue() -> Iterator[None]:
    catalogue.reset()
    yield
    catalogue.reset()


def pair(n: int, user: str, **values: str) -> PairRecord:
    """A pair record of user ``user`` with these values."""
    return PairRecord("s", "m", "135m", f"p{n}", user, values=values)


def novelty(**changes: object) -> catalogue.Metric:
    """A plugin's pair-level metric over a field of its own: whether the chosen side is the
    shorter one."""
    declared: dict[str, object] = {
        "name": "shorter_chosen",
        "level": "pair",
        "field": "shorter_chosen",
        "pooling": "macro",
        "title": "shorter",
        "roles": ("y",),
    }
    declared.update(changes)
    return catalogue.Metric(**declared)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Roles
# --------------------------------------------------------------------------------------------


def test_the_built_in_roles() -> None:
    assert catalogue.x_metric() == "rm_acc"
    assert catalogue.y_metrics() == ("policy_acc", "rouge1")  # the plotted one first
    assert catalogue.plotted() == "policy_acc"
    assert set(catalogue.spread_metrics()) == {"policy_acc", "rm_acc", "rouge1"}
    assert catalogue.text_metric() == "rouge1"
    assert (catalogue.own_judge(), catalogue.independent_judge()) == ("win_self", "win_independent")
    assert catalogue.reduced() == ("policy_acc", "policy_acc_micro")
    assert set(catalogue.gateable()) == {"rouge1", "rougeL", "policy_acc", "rm_acc"}


def test_every_single_role_is_played_by_one_metric() -> None:
    for role in catalogue.SINGLE:
        assert len(catalogue.with_role(role)) == 1, role


def test_the_rank_key_is_the_first_rank_metric_present_else_the_plotted_one() -> None:
    assert catalogue.rank_key({"rouge1", "policy_acc"}) == "rouge1"
    assert catalogue.rank_key({"policy_acc", "rm_acc"}) == "policy_acc"
    assert catalogue.rank_key(set()) == "policy_acc"


def test_a_metric_with_an_unknown_role_or_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role 'why'"):
        novelty(roles=("y", "why"))
    with pytest.raises(ValueError, match="level 'user'"):
        novelty(level="user")
    with pytest.raises(KeyError, match="unknown role"):
        catalogue.with_role("why")


# --------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------


def test_a_registered_metric_joins_the_catalogue_after_the_built_ins_until_reset() -> None:
    metric = catalogue.register(novelty(gateable=True))
    assert catalogue.metrics()[-1] is metric and catalogue.find("shorter_chosen") is metric
    assert catalogue.columns()[-1] is metric
    assert "shorter_chosen" in catalogue.gateable()
    assert catalogue.fields("pair")[-1] == "shorter_chosen"
    assert catalogue.y_metrics() == ("policy_acc", "rouge1", "shorter_chosen")
    assert catalogue.METRICS[-1].name == "win_self"  # the built-ins stay as declared
    catalogue.reset()
    assert catalogue.find("shorter_chosen") is None
    assert catalogue.y_metrics() == ("policy_acc", "rouge1")


def test_registration_refuses_a_taken_name_a_taken_single_role_and_a_field_of_another() -> None:
    with pytest.raises(ValueError, match="'policy_acc' is declared already"):
        catalogue.register(novelty(name="policy_acc"))
    with pytest.raises(ValueError, match="'rm_acc' plays the role 'x' already"):
        catalogue.register(novelty(roles=("x",)))
    with pytest.raises(ValueError, match="computes the field 'policy_correct'"):
        catalogue.register(novelty(field="policy_correct", compute=lambda r: 1.0))
    catalogue.register(novelty())
    with pytest.raises(ValueError, match="declared already"):
        catalogue.register(novelty())
    # a metric over an existing field, without a computation of its own, is fine
    catalogue.register(novelty(name="policy_hits", field="policy_correct", roles=()))


def rows_with(values: list[float]) -> list[CaseResult]:
    """Five reward-guided rows whose RM accuracy and the plugin's figure rise together."""
    rows = []
    for i, value in enumerate(values):
        per_user = {
            "rm_acc": {u: 0.6 + 0.05 * i + 0.01 * (j % 3) for j, u in enumerate(USERS)},
            "shorter_chosen": {u: value + 0.01 * (j % 3) for j, u in enumerate(USERS)},
        }
        rows.append(
            CaseResult(
                "s",
                f"args[m{i}]",
                "135m",
                decoder="args",
                reward=f"m{i}",
                n_users=len(USERS),
                metrics={k: float(np.mean(list(v.values()))) for k, v in per_user.items()},
                per_user=per_user,
            )
        )
    return rows


def test_a_registered_y_is_in_tau_the_inversions_and_the_regret() -> None:
    catalogue.register(novelty())
    rows = rows_with([0.3, 0.4, 0.5, 0.6, 0.7])
    (tau,) = crisis.tau_entries(rows)
    assert (tau.x, tau.y) == ("rm_acc", "shorter_chosen")
    assert tau.tau == pytest.approx(1.0) and tau.n_methods == 5
    (entry,) = regret.entries(crisis.reward_groups(rows))
    assert entry.y == "shorter_chosen" and entry.picked == ("args[m4]",)
    inverted = rows_with([0.7, 0.6, 0.5, 0.4, 0.3])
    assert {e.y for e in crisis.inversion_entries(inverted)} == {"shorter_chosen"}
    catalogue.reset()
    assert crisis.tau_entries(rows) == []  # without the registration, nothing to test


def test_a_registered_metric_is_a_leaderboard_column() -> None:
    catalogue.register(novelty())
    (row, *_) = rows_with([0.25])
    assert [m.title for m in table.columns([row])] == ["RM acc", "shorter"]
    assert "shorter" in table.table([row]).splitlines()[0]


def test_a_computed_metric_is_observed_in_each_record_and_pooled() -> None:
    catalogue.register(
        novelty(
            compute=lambda r: float(len(r.value("chosen_text")) < len(r.value("rejected_text"))),
            pooling="micro",
        )
    )
    pairs = [
        pair(0, "a", chosen_text="ab", rejected_text="abc"),
        pair(1, "a", chosen_text="abcd", rejected_text="abc"),
        pair(2, "b", chosen_text="a", rejected_text="ab"),
    ]
    observed = case.observe({"pair": pairs, "item": []})["pair"]
    assert [p.value("shorter_chosen") for p in observed] == [1.0, 0.0, 1.0]
    assert all(not p.has("shorter_chosen") for p in pairs)  # new records, not edited ones
    values, ci, per_user = figures({"pair": observed, "item": []})
    assert values["shorter_chosen"] == pytest.approx(2 / 3)
    assert per_user["shorter_chosen"] == {"a": 0.5, "b": 1.0} and "shorter_chosen" in ci


def test_a_computation_that_returns_no_number_or_clobbers_a_field_fails_naming_the_metric() -> None:
    catalogue.register(novelty(compute=lambda r: "long"))
    with pytest.raises(PrefalignError, match="'shorter_chosen': compute returned 'long'"):
        case.observe({"pair": [pair(0, "a")]})
    catalogue.reset()
    catalogue.register(novelty(field="output", level="item", compute=lambda r: 1.0))
    with pytest.raises(PrefalignError, match="the field 'output', which the evaluation writes"):
        item = ItemRecord("s", "m", "135m", "i0", "a", output="x")
        case.observe({"item": [item]})
