"""The metric catalogue: the roles the analysis asks for."""

from __future__ import annotations

import pytest

from pytest_prefalign.analysis import catalogue


def novelty(**changes: object) -> catalogue.Metric:
    """A pair-level metric over a field of its own: whether the chosen side is the shorter
    one."""
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
