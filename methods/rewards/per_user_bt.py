"""``per_user_bt``: one linear Bradley-Terry head per user, shrunk toward a global head.

``r_u(x, y) = (w + d_u) . h(x, y)``, trained jointly with an L2 penalty on ``d_u = w_u - w``
(each user's deviation from the global head) and a weaker one on ``w``: a user with few pairs
stays close to the global head, a user with many can move away from it. A user unseen in
training gets the global head ``w``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from prefalign_methods.rewards.bt_heads import (
    DTYPE,
    HeadRewardMethod,
    Heads,
    TrainPairs,
    dot,
    shared_penalty,
    user_rows,
)

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry


@dataclass(frozen=True)
class PerUserBTConfig:
    l2: float = 0.05  # weight of ||w||^2, the global head (as in global_bt)
    l2_user: float = 0.2  # weight of ||w_u - w||^2 against the user's own mean loss
    max_iter: int = 300  # L-BFGS iterations (convex: converges before that)
    seed: int = 0  # initialisation seed (heads start at zero, so unused; kept for the cache key)


class PerUserHeads(Heads):
    def __init__(self, n_users: int, dim: int, config: PerUserBTConfig) -> None:
        super().__init__()
        self.config = config
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=DTYPE))
        self.delta = torch.nn.Parameter(torch.zeros(n_users, dim, dtype=DTYPE))

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        # unknown users: no deviation, i.e. the global head
        delta = user_rows(self.delta, user, torch.zeros_like(self.w))
        return dot(self.w + delta, h)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        per_user = self.delta.square().sum(-1)
        return self.config.l2 * self.w.square().sum() + self.config.l2_user * shared_penalty(
            data, per_user
        )


class PerUserBT(HeadRewardMethod):
    name = "per_user_bt"
    Config = PerUserBTConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        return PerUserHeads(n_users, dim, self.config)


def pytest_prefalign_register(registry: Registry) -> None:
    registry.add_reward("per_user_bt", PerUserBT)
