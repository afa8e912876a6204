"""``vpl``: VPL-style rewards conditioned on a user latent (Poddar et al., 2024).

An encoder reads a few of the user's labelled pairs, the mean of their feature differences
``m_u = mean(h(y_w) - h(y_l))`` (standardised), and maps it to a latent ``z_u = tanh(E m_u)``
``(Z,)``; the reward head is conditioned on it: ``r_u(x, y) = (w + U z_u) . h(x, y)``.

Training encodes, for each pair, the user's other context pairs (leave one out), so the encoder
cannot read the answer of the pair it is scored on. At test time ``z_u`` comes from the user's
context pairs of the training set; a user with none gets ``z = 0``, the shared head ``w``. The
variational part of VPL is reduced to its mean (no sampling), which keeps training
deterministic; the L2 on the encoder plays the part of the KL term.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from prefalign_methods.rewards.bt_heads import (
    DTYPE,
    HeadRewardMethod,
    Heads,
    TrainPairs,
    dot,
    init_normal,
    user_rows,
)

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.registry import Registry


@dataclass(frozen=True)
class VPLConfig:
    latent: int = 8  # Z, the size of the user latent
    context_pairs: int = 16  # at most this many of a user's first training pairs are encoded
    l2: float = 0.05  # weight of ||w||^2 + ||U||^2, the shared head and the latent's effect
    l2_encoder: float = 0.05  # weight of ||E||^2, keeps latents near 0 unless the data says
    max_iter: int = 300  # L-BFGS iterations (non-convex: a fixed budget, same result each run)
    seed: int = 0  # initialisation of E and U


class LatentHead(Heads):
    def __init__(
        self, n_users: int, dim: int, config: VPLConfig, generator: torch.Generator
    ) -> None:
        super().__init__()
        self.config = config
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=DTYPE))
        self.encoder = init_normal((config.latent, dim), 1 / math.sqrt(dim), generator)
        self.mix = init_normal((dim, config.latent), 1 / math.sqrt(dim), generator)
        # m_u of every training user, saved with the parameters (the test-time context)
        self.register_buffer("context", torch.zeros(n_users, dim, dtype=DTYPE))
        self.train_context = torch.zeros(0, dim, dtype=DTYPE)  # (P, H), leave-one-out m

    def latent(self, context: torch.Tensor) -> torch.Tensor:
        return torch.tanh(context @ self.encoder.T)

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        z = user_rows(
            self.latent(self.context),
            user,
            torch.zeros(self.config.latent, dtype=h.dtype, device=h.device),
        )
        return dot(self.w + z @ self.mix.T, h)

    def margins(self, data: TrainPairs) -> torch.Tensor:
        head = self.w + self.latent(self.train_context) @ self.mix.T
        return dot(head, data.chosen - data.rejected)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        shared = self.w.square().sum() + self.mix.square().sum()
        return self.config.l2 * shared + self.config.l2_encoder * self.encoder.square().sum()

    def prepare(self, data: TrainPairs) -> None:
        diff = data.chosen - data.rejected
        in_context = context_mask(data.user, self.config.context_pairs)
        sums = torch.zeros_like(self.context).index_add_(0, data.user[in_context], diff[in_context])
        counts = torch.bincount(data.user[in_context], minlength=self.context.shape[0])
        counts = counts.to(DTYPE)[:, None]
        self.context.copy_(sums / counts.clamp(min=1))
        # leave one out: a pair in its user's context is removed from the mean it is given
        own = in_context.to(DTYPE)[:, None]
        n = counts[data.user] - own
        self.train_context = (sums[data.user] - own * diff) / n.clamp(min=1)


def context_mask(user: torch.Tensor, limit: int) -> torch.Tensor:
    """``(P,)`` bool: the first ``limit`` pairs of each user, in the order of the pairs."""
    seen: dict[int, int] = {}
    keep = []
    for u in user.tolist():
        seen[u] = seen.get(u, 0) + 1
        keep.append(seen[u] <= limit)
    return torch.tensor(keep, dtype=torch.bool)


class VPL(HeadRewardMethod):
    name = "vpl"
    Config = VPLConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        if self.config.latent < 1 or self.config.context_pairs < 1:
            raise ValueError(f"vpl: latent and context_pairs must be >= 1, got {self.config}")
        return LatentHead(n_users, dim, self.config, generator)


def pytest_prefalign_register(registry: Registry) -> None:
    registry.add_reward("vpl", VPL)
