"""``per_user_bt``: one linear Bradley-Terry head per user, shrunk toward a global head.

``r_u(x, y) = (w + d_u) . h(x, y)``, trained jointly with an L2 penalty on ``d_u = w_u - w``
(each user's deviation from the global head) and a weaker one on ``w``: a user with few pairs
stays close to the global head, a user with many can move away from it. A user unseen in
training gets the global head ``w``.

Its heads are ``heads.PerUserHeads``, the torch module that ``bt_heads.HeadRewardMethod`` trains
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
class PerUserBTConfig:
    l2: float = 0.05  # weight of ||w||^2, the global head (as in global_bt)
    l2_user: float = 0.2  # weight of ||w_u - w||^2 against the user's own mean loss
    max_iter: int = 300  # L-BFGS iterations (convex: converges before that)
    seed: int = 0  # initialisation seed (heads start at zero, so unused; kept for the cache key)


class PerUserBT(HeadRewardMethod):
    name = "per_user_bt"
    Config = PerUserBTConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.heads import PerUserHeads

        return PerUserHeads(n_users, dim, self.config)
