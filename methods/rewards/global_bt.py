"""``global_bt``: one linear Bradley-Terry head for all users, the non-personalized baseline.

``r(x, y) = w . h(x, y)`` on the standardised final hidden state; every user, seen in training
or not, gets the same reward.

Its heads are ``heads.GlobalHead``, the torch module that ``bt_heads.HeadRewardMethod`` trains
and reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.rewards.bt_heads import HeadRewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from prefalign_methods.rewards.heads import Heads


@dataclass(frozen=True)
class GlobalBTConfig:
    l2: float = 0.05  # weight of ||w||^2 added to the mean Bradley-Terry loss
    max_iter: int = 200  # L-BFGS iterations (the loss is convex: it converges well before)
    seed: int = 0  # initialisation seed (w starts at zero, so unused; kept for the cache key)


class GlobalBT(HeadRewardMethod):
    name = "global_bt"
    Config = GlobalBTConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.heads import GlobalHead

        return GlobalHead(dim, self.config)
