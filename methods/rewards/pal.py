"""``pal``: PAL-style pluralistic rewards (Chen et al., 2024, the ideal-point model PAL-A).

Responses are projected to a small preference space, ``f = M h`` ``(D,)``. There are P
preference prototypes ``q_1..q_P`` (ideal points in that space); a user's ideal point is a
mixture of them with the user's softmax weights, ``a_u = sum_p softmax(c_u)_p q_p``, and the
reward is closeness to it: ``r_u(x, y) = -||M h(x, y) - a_u||^2``. A user unseen in training
gets the mean mixture of the users seen.

Its heads are ``heads.IdealPoints``, the torch module that ``bt_heads.HeadRewardMethod`` trains
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
class PALConfig:
    prototypes: int = 4  # P, the number of preference prototypes (ideal points)
    dim: int = 16  # D, the size of the preference space
    l2: float = 0.1  # weight of ||M||^2, the projection
    # weight of ||Q||^2: weak, because a user with a linear taste needs a far ideal point (the
    # reward is then nearly linear in M h); a strong one leaves only quadratic rewards
    l2_prototypes: float = 0.001
    l2_user: float = 0.02  # weight of ||c_u||^2 (the mixing logits) against the user's mean loss
    # L-BFGS iterations, a bound: the fit runs until L-BFGS's tolerances stop it (376 iterations
    # on the main job's 8 users). A budget that stops it short (100 did) leaves a point that
    # moves with float rounding: 1e-7 on the features moved margins by 0.2, and so the figures
    # from one CPU to another; at convergence they move by 2e-4
    max_iter: int = 1000
    seed: int = 0  # initialisation of M, the prototypes and the mixing logits


class PAL(HeadRewardMethod):
    name = "pal"
    Config = PALConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.heads import IdealPoints

        if self.config.prototypes < 1 or self.config.dim < 1:
            raise ValueError(f"pal: prototypes and dim must be >= 1, got {self.config}")
        return IdealPoints(n_users, dim, self.config, generator)
