"""``lore``: LoRe-style low-rank personal rewards (Bose et al., 2025).

A shared basis of K linear reward heads ``B`` ``(K, H)``; each user a weight vector ``a_u``
``(K,)`` over it: ``r_u(x, y) = (a_u^T B) . h(x, y)``. Basis and weights are learnt jointly on
all users' pairs, so users with few pairs borrow the basis the others shaped. A user unseen in
training gets the mean of the learnt weights.

Its heads are ``heads.LowRankHeads``, the torch module that ``bt_heads.HeadRewardMethod`` trains
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
class LoReConfig:
    rank: int = 4  # K, the number of basis reward heads
    l2: float = 0.05  # weight of ||B||^2 (with l2_user, also fixes the scale between a and B)
    l2_user: float = 0.05  # weight of ||a_u||^2 against the user's own mean loss
    max_iter: int = 300  # L-BFGS iterations (non-convex: a fixed budget, same result each run)
    seed: int = 0  # initialisation of B and a


class LoRe(HeadRewardMethod):
    name = "lore"
    Config = LoReConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.heads import LowRankHeads

        if self.config.rank < 1:
            raise ValueError(f"lore: rank must be >= 1, got {self.config.rank}")
        return LowRankHeads(n_users, dim, self.config, generator)
