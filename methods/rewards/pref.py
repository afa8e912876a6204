"""``pref``: PReF-style factorised personal rewards (Shenfeld et al., 2025, "Language Model
Personalization via Reward Factorization").

A shared basis of J reward functions ``phi(h) = B tanh(A h + b)`` ``(J,)``, a small network
on the standardised final hidden state (standing in for the paper's reward model with J outputs,
a fine-tuned LM: non-linear in its input), and per-user weights ``lambda_u`` ``(J,)``:
``r_u(x, y) = lambda_u . phi(h(x, y))``. Basis and weights are learnt jointly on all users'
pairs (Bradley-Terry loss, L2 on both), so a user with few pairs only has to place J weights
on functions the other users shaped. A user unseen in training gets the mean of the learnt
weights (the paper estimates a new user's weights from a few of their answers; this project
has none for an unseen user). The paper's SVD initialisation is left out: it factorises a
users x pairs matrix of answers, and here each user labels pairs of their own, so that matrix
has one entry per column.

Where ``lore`` is a linear basis (its J rewards are linear in ``h``), PReF's basis is a
network: the two coincide when ``tanh`` is linear.

Its heads are ``more_heads.FactorisedHeads``, the torch module that
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
class PReFConfig:
    basis: int = 4  # J, the number of basis reward functions
    width: int = 32  # the basis network's hidden units (A is width x H)
    l2: float = 0.05  # weight of ||A||^2 + ||B||^2, the shared basis
    l2_user: float = 0.05  # weight of ||lambda_u||^2 against the user's own mean loss
    max_iter: int = 300  # L-BFGS iterations (non-convex: a fixed budget, same result each run)
    seed: int = 0  # initialisation of the basis and the weights


class PReF(HeadRewardMethod):
    name = "pref"
    Config = PReFConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.more_heads import FactorisedHeads

        if self.config.basis < 1 or self.config.width < 1:
            raise ValueError(f"pref: basis and width must be >= 1, got {self.config}")
        return FactorisedHeads(n_users, dim, self.config, generator)
