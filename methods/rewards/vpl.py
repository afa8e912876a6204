"""``vpl``: VPL-style rewards conditioned on a user latent (Poddar et al., 2024).

An encoder reads a few of the user's labelled pairs, the mean of their feature differences
``m_u = mean(h(y_w) - h(y_l))`` (standardised), and maps it to a latent ``z_u = tanh(E m_u)``
``(Z,)``; the reward head is conditioned on it: ``r_u(x, y) = (w + U z_u) . h(x, y)``.

Training encodes, for each pair, the user's other context pairs (leave one out), so the encoder
cannot read the answer of the pair it is scored on. At test time ``z_u`` comes from the user's
context pairs of the training set; a user with none gets ``z = 0``, the shared head ``w``. The
variational part of VPL is reduced to its mean (no sampling), which keeps training
deterministic; the L2 on the encoder plays the part of the KL term.

Its heads are ``heads.LatentHead``, the torch module that ``bt_heads.HeadRewardMethod`` trains
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
class VPLConfig:
    latent: int = 8  # Z, the size of the user latent
    context_pairs: int = 16  # at most this many of a user's first training pairs are encoded
    l2: float = 0.05  # weight of ||w||^2 + ||U||^2, the shared head and the latent's effect
    l2_encoder: float = 0.05  # weight of ||E||^2, keeps latents near 0 unless the data says
    max_iter: int = 300  # L-BFGS iterations (non-convex: a fixed budget, same result each run)
    seed: int = 0  # initialisation of E and U


class VPL(HeadRewardMethod):
    name = "vpl"
    Config = VPLConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.heads import LatentHead

        if self.config.latent < 1 or self.config.context_pairs < 1:
            raise ValueError(f"vpl: latent and context_pairs must be >= 1, got {self.config}")
        return LatentHead(n_users, dim, self.config, generator)
