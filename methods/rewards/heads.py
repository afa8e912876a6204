"""The Bradley-Terry reward methods' torch side: the reward heads, each a small torch module that
maps a user and a standardised hidden state to a reward (the base ``Heads`` and the five
methods' own), and their full-batch training on the Bradley-Terry loss
``-log sigmoid(r_u(y_w) - r_u(y_l))`` (L-BFGS, seeded, deterministic).

Imported when a method is fitted or loaded (``bt_heads.HeadRewardMethod``), not when it is
registered: the methods' declarations (``global_bt``, ``per_user_bt``, ``lore``, ``vpl``,
``pal``) stay free of torch, so that listing and collecting them imports none. A head takes its
method's ``Config`` (typed ``Any`` here: the configurations live with their methods, which
import this module, not the other way round).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

UNKNOWN = -1  # the index of a user without training pairs
DTYPE = torch.float64  # heads are tiny; float64 keeps L-BFGS's line search well behaved


@dataclass(frozen=True)
class TrainPairs:
    """The training pairs as tensors: standardised features ``(P, H)`` of the chosen and the
    rejected responses, each pair's user index ``(P,)``, and each user's share of the pairs
    ``(U,)`` (per-user penalties are weighted by it, so a user's shrinkage does not depend on
    how many other users there are)."""

    chosen: torch.Tensor
    rejected: torch.Tensor
    user: torch.Tensor
    share: torch.Tensor

    @property
    def n_users(self) -> int:
        return int(self.share.shape[0])


class Heads(torch.nn.Module):
    """A method's reward model on standardised hidden states; parameters in float64."""

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Rewards ``(N, ...)`` for user indices ``(N,)`` (``UNKNOWN`` allowed) and states
        ``(N, ..., H)``."""
        raise NotImplementedError

    def margins(self, data: TrainPairs) -> torch.Tensor:
        """``r_u(y_w) - r_u(y_l)`` of every training pair, ``(P,)``."""
        return self(data.user, data.chosen) - self(data.user, data.rejected)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        """The regulariser added to the mean Bradley-Terry loss."""
        raise NotImplementedError

    def prepare(self, data: TrainPairs) -> None:
        """Set data-derived buffers before training (VPL keeps each user's context here)."""


def user_rows(table: torch.Tensor, user: torch.Tensor, default: torch.Tensor) -> torch.Tensor:
    """``table[user]`` ``(N, D)``, with ``default`` ``(D,)`` for ``UNKNOWN`` users."""
    known = user >= 0
    rows = table[user.clamp(min=0)]
    return torch.where(known[:, None], rows, default.expand_as(rows))


def per_row(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """``x`` ``(N, D)`` viewed as ``(N, 1, ..., 1, D)``, to broadcast against ``h``
    ``(N, ..., H)``."""
    return x.reshape(x.shape[0], *([1] * (h.dim() - 2)), x.shape[-1])


def dot(x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Row-wise ``x_n . h_n[...]``: ``(N, H)`` and ``(N, ..., H)`` give ``(N, ...)``."""
    return (per_row(x, h) * h).sum(-1)


def shared_penalty(data: TrainPairs, per_user: torch.Tensor) -> torch.Tensor:
    """``sum_u share_u * per_user[u]``: a per-user penalty weighted by each user's share."""
    return (data.share * per_user).sum()


def init_normal(
    shape: tuple[int, ...], scale: float, generator: torch.Generator
) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(shape, generator=generator, dtype=DTYPE) * scale)


def objective(heads: Heads, data: TrainPairs) -> torch.Tensor:
    """Mean Bradley-Terry loss plus the method's penalty."""
    return -F.logsigmoid(heads.margins(data)).mean() + heads.penalty(data)


def train(heads: Heads, data: TrainPairs, max_iter: int) -> float:
    """Full-batch L-BFGS with a strong-Wolfe line search: no sampling, so the same data and
    initialisation give the same parameters. Returns the final objective."""
    params = [p for p in heads.parameters() if p.requires_grad]
    optimiser = torch.optim.LBFGS(
        params,
        lr=1.0,
        max_iter=max_iter,
        history_size=20,
        tolerance_grad=1e-8,
        tolerance_change=1e-12,
        line_search_fn="strong_wolfe",
    )

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        loss = objective(heads, data)
        loss.backward()
        return loss

    optimiser.step(closure)
    with torch.no_grad():
        return float(objective(heads, data))


def standardiser(feats: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and standard deviation of ``(N, H)`` training features. A dimension
    that barely varies gets a floor on its deviation, so that it does not blow up at test time."""
    mean = feats.mean(0)
    std = feats.std(0, correction=0) if feats.shape[0] > 1 else torch.ones_like(mean)
    floor = 1e-2 * float(std.median()) + 1e-8
    return mean, std.clamp(min=floor)


# --------------------------------------------------------------------------------------------
# Each method's heads (its Config: global_bt.GlobalBTConfig, per_user_bt.PerUserBTConfig, ...)
# --------------------------------------------------------------------------------------------


class GlobalHead(Heads):
    """``global_bt``'s head, ``r(x, y) = w . h``; ``config``: its ``GlobalBTConfig``."""

    def __init__(self, dim: int, config: Any) -> None:
        super().__init__()
        self.config = config
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=DTYPE))

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return h @ self.w

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        return self.config.l2 * self.w.square().sum()


class PerUserHeads(Heads):
    """``per_user_bt``'s heads, ``r_u = (w + d_u) . h`` (unknown users: ``w``); ``config``: its
    ``PerUserBTConfig``."""

    def __init__(self, n_users: int, dim: int, config: Any) -> None:
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


class LowRankHeads(Heads):
    """``lore``'s heads, ``r_u = (a_u^T B) . h`` (unknown users: the mean ``a``); ``config``: its
    ``LoReConfig``."""

    def __init__(self, n_users: int, dim: int, config: Any, generator: torch.Generator) -> None:
        super().__init__()
        self.config = config
        self.basis = init_normal((config.rank, dim), 1 / math.sqrt(dim), generator)
        self.weights = init_normal((n_users, config.rank), 1 / math.sqrt(config.rank), generator)

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        a = user_rows(self.weights, user, self.weights.mean(0))  # unknown: the mean user
        return dot(a @ self.basis, h)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        return self.config.l2 * self.basis.square().sum() + self.config.l2_user * shared_penalty(
            data, self.weights.square().sum(-1)
        )


class IdealPoints(Heads):
    """``pal``'s ideal points, ``r_u = -||M h - a_u||^2`` (unknown users: the mean mixture);
    ``config``: its ``PALConfig``."""

    def __init__(self, n_users: int, dim: int, config: Any, generator: torch.Generator) -> None:
        super().__init__()
        self.config = config
        self.project = init_normal((config.dim, dim), 1 / math.sqrt(dim), generator)
        self.prototypes = init_normal((config.prototypes, config.dim), 1.0, generator)
        self.logits = init_normal((n_users, config.prototypes), 0.1, generator)

    def mixture(self, user: torch.Tensor) -> torch.Tensor:
        """Each user's mixing weights ``(N, P)``; unknown users get the mean mixture."""
        weights = torch.softmax(self.logits, dim=-1)
        rows = weights[user.clamp(min=0)]
        return torch.where((user >= 0)[:, None], rows, weights.mean(0).expand_as(rows))

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        ideal = self.mixture(user) @ self.prototypes  # (N, D)
        f = h @ self.project.T  # (N, ..., D)
        return -(f - per_row(ideal, f)).square().sum(-1)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        return (
            self.config.l2 * self.project.square().sum()
            + self.config.l2_prototypes * self.prototypes.square().sum()
            + self.config.l2_user * shared_penalty(data, self.logits.square().sum(-1))
        )


class LatentHead(Heads):
    """``vpl``'s head conditioned on the user latent, ``r_u = (w + U z_u) . h`` (unknown users:
    ``z = 0``); ``config``: its ``VPLConfig``."""

    context: torch.Tensor  # a buffer (register_buffer), typed for the readers below

    def __init__(self, n_users: int, dim: int, config: Any, generator: torch.Generator) -> None:
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
