"""``hier_bt``: a hierarchical (empirical-Bayes) per-user Bradley-Terry head, whose shrinkage
toward the global head is chosen by the data.

The model is ``per_user_bt``'s, ``r_u(x, y) = (w + d_u) . h(x, y)`` with a Gaussian prior on
each user's deviation ``d_u`` (the L2 penalty ``l2_user * ||d_u||^2``) around the shared
``w``; where ``per_user_bt`` fixes the prior's strength, ``hier_bt`` chooses it, as empirical
Bayes does, from the training pairs themselves: each of ``steps`` weights spaced evenly on a
log scale from ``shrinkage_min`` to ``shrinkage_max`` is fitted on
``folds - 1`` folds of every user's pairs and scored by the Bradley-Terry log-likelihood of the
held-out fold, and the best (ties: the stronger shrinkage) is fitted on all the pairs. Users
whose tastes differ get a weak prior and their own heads; users who agree, or have too few
pairs to show a difference, get the global head. A user unseen in training gets ``w``.

References: hierarchical logistic regression with an estimated prior scale (Gelman et al.,
"Bayesian Data Analysis", 3rd ed., ch. 5 and 16); personalised reward models as a shared
component plus regularised per-user parts (Park et al., 2024, "RLHF from Heterogeneous
Feedback via Personalization and Preference Aggregation").

Its heads are ``more_heads.ShrunkPerUserHeads``, the torch module that
``bt_heads.HeadRewardMethod`` trains and reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.rewards.bt_heads import HeadRewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from prefalign_methods.rewards.heads import Heads


@dataclass(frozen=True)
class HierBTConfig:
    l2: float = 0.05  # weight of ||w||^2, the global head (as in global_bt)
    # the candidate weights of ||w_u - w||^2, the prior's precision, log-spaced from min to max
    # (by default 0.01, 0.1, 1, 10, 100: from users nearly on their own to nearly the global
    # head); one is chosen by held-out likelihood
    shrinkage_min: float = 0.01
    shrinkage_max: float = 100.0
    steps: int = 5
    folds: int = 3  # folds of each user's pairs for the choice
    max_iter: int = 300  # L-BFGS iterations, per fit (convex: converges before that)
    seed: int = 0  # initialisation seed (heads start at zero, so unused; kept for the cache key)


class HierBT(HeadRewardMethod):
    name = "hier_bt"
    Config = HierBTConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.more_heads import ShrunkPerUserHeads

        low, high, steps = self.config.shrinkage_min, self.config.shrinkage_max, self.config.steps
        if not 0 < low <= high or steps < 1:
            raise ValueError(
                f"hier_bt: expected 0 < shrinkage_min <= shrinkage_max and steps >= 1, got "
                f"shrinkage_min={low}, shrinkage_max={high}, steps={steps}"
            )
        if self.config.folds < 2:
            raise ValueError(f"hier_bt: folds must be >= 2, got {self.config.folds}")
        return ShrunkPerUserHeads(n_users, dim, self.config)
