"""The torch heads of the Bradley-Terry reward methods added beside the first five: ``pref``'s
factorised rewards, ``hier_bt``'s per-user heads with a shrinkage chosen by held-out
likelihood, ``history_bt``'s head conditioned on the user's preference history.

They are ``heads.Heads`` like the first five's, trained by the same ``heads.train`` (full-batch
L-BFGS on the Bradley-Terry loss plus each head's penalty) and read by the same
``bt_heads.HeadRewardMethod``; they live in a module of their own so that adding them leaves
the first five's code, and so their cache keys, as they were. Imported when a method is fitted
or loaded, not when it is registered. A head takes its method's ``Config`` (typed ``Any``: the
configurations live with their methods).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from prefalign_methods.rewards.heads import (
    DTYPE,
    Heads,
    PerUserHeads,
    TrainPairs,
    dot,
    init_normal,
    shared_penalty,
    train,
    user_rows,
)


class FactorisedHeads(Heads):
    """``pref``'s rewards, ``r_u = lambda_u . B tanh(A h + b)`` (unknown users: the mean
    ``lambda``); ``config``: its ``PReFConfig``."""

    def __init__(self, n_users: int, dim: int, config: Any, generator: torch.Generator) -> None:
        super().__init__()
        self.config = config
        self.hidden = init_normal((config.width, dim), 1 / math.sqrt(dim), generator)
        self.bias = init_normal((config.width,), 0.1, generator)
        self.out = init_normal((config.basis, config.width), 1 / math.sqrt(config.width), generator)
        self.weights = init_normal((n_users, config.basis), 1 / math.sqrt(config.basis), generator)

    def basis(self, h: torch.Tensor) -> torch.Tensor:
        """The J basis rewards ``phi(h)`` ``(N, ..., J)`` of states ``(N, ..., H)``."""
        return torch.tanh(h @ self.hidden.T + self.bias) @ self.out.T

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        weights = user_rows(self.weights, user, self.weights.mean(0))  # unknown: the mean user
        return dot(weights, self.basis(h))

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        network = self.hidden.square().sum() + self.bias.square().sum() + self.out.square().sum()
        return self.config.l2 * network + self.config.l2_user * shared_penalty(
            data, self.weights.square().sum(-1)
        )


def shrinkage_grid(config: Any) -> list[float]:
    """``hier_bt``'s candidate weights of ``||d_u||^2``: ``config.steps`` values spaced evenly
    on a log scale from ``shrinkage_min`` to ``shrinkage_max``, weakest first."""
    low, high, steps = config.shrinkage_min, config.shrinkage_max, config.steps
    if steps == 1:
        return [float(low)]
    ratio = (high / low) ** (1 / (steps - 1))
    return [float(low * ratio**k) for k in range(steps)]


def fold_of_each_pair(user: torch.Tensor, folds: int) -> torch.Tensor:
    """``(P,)``: pair i's fold, its rank among its user's pairs (in the order of the pairs)
    modulo ``folds``, so every user's pairs are spread over the folds as evenly as they go."""
    seen: dict[int, int] = {}
    out = []
    for u in user.tolist():
        out.append(seen.get(u, 0) % folds)
        seen[u] = seen.get(u, 0) + 1
    return torch.tensor(out, dtype=torch.long)


def subset(data: TrainPairs, keep: torch.Tensor) -> TrainPairs:
    """The pairs where ``keep`` ``(P,)`` is true, each user's share recomputed on them."""
    user = data.user[keep]
    counts = torch.bincount(user, minlength=data.n_users).to(DTYPE)
    return TrainPairs(data.chosen[keep], data.rejected[keep], user, counts / counts.sum())


class ShrunkPerUserHeads(PerUserHeads):
    """``hier_bt``'s heads, ``r_u = (w + d_u) . h`` (unknown users: ``w``), with the weight of
    ``||d_u||^2`` chosen in ``prepare`` by held-out likelihood; ``config``: its
    ``HierBTConfig``. The choice is kept in the ``shrinkage`` buffer (saved with the
    parameters), the held-out losses of the candidates in ``heldout_loss``."""

    shrinkage: torch.Tensor
    heldout_loss: torch.Tensor

    def __init__(self, n_users: int, dim: int, config: Any) -> None:
        super().__init__(n_users, dim, config)
        grid = shrinkage_grid(config)
        self.register_buffer("shrinkage", torch.tensor(grid[-1], dtype=DTYPE))
        self.register_buffer("heldout_loss", torch.zeros(len(grid), dtype=DTYPE))

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        per_user = self.delta.square().sum(-1)
        return self.config.l2 * self.w.square().sum() + self.shrinkage * shared_penalty(
            data, per_user
        )

    def prepare(self, data: TrainPairs) -> None:
        """Choose the shrinkage: each candidate fitted on all folds but one of every user's
        pairs, its Bradley-Terry loss summed over the held-out pairs (each pair held out once);
        the lowest wins, a tie the strongest. Without a fold to hold out (every user has one
        pair), all candidates tie and the strongest, the nearest to the global head, wins."""
        grid = shrinkage_grid(self.config)
        fold = fold_of_each_pair(data.user, self.config.folds)
        losses = torch.zeros(len(grid), dtype=DTYPE)
        for k in range(self.config.folds):
            held = fold == k
            if not bool(held.any()) or bool(held.all()):
                continue
            fit_on, score_on = subset(data, ~held), subset(data, held)
            for i, weight in enumerate(grid):
                candidate = ShrunkPerUserHeads(data.n_users, self.w.shape[0], self.config)
                candidate.shrinkage.fill_(weight)
                train(candidate, fit_on, self.config.max_iter)
                with torch.no_grad():
                    losses[i] += -F.logsigmoid(candidate.margins(score_on)).sum()
        best = len(grid) - 1
        for i in reversed(range(len(grid))):  # strongest first: a tie keeps the stronger
            if losses[i] < losses[best]:
                best = i
        self.shrinkage.fill_(grid[best])
        self.heldout_loss.copy_(losses)


class HistoryHead(Heads):
    """``history_bt``'s head, ``r_u = (w + (s + d) * m_u) . h``, ``m_u`` the user's mean
    standardised feature difference, mapped by the learnt matrix ``s I + diag(d)`` (unknown
    users: ``m = 0``, the head ``w``); ``config``: its ``HistoryBTConfig``."""

    history: torch.Tensor  # a buffer (register_buffer), typed for the readers below

    def __init__(self, n_users: int, dim: int, config: Any) -> None:
        super().__init__()
        self.config = config
        self.w = torch.nn.Parameter(torch.zeros(dim, dtype=DTYPE))
        self.scale = torch.nn.Parameter(torch.zeros((), dtype=DTYPE))
        self.diagonal = torch.nn.Parameter(torch.zeros(dim, dtype=DTYPE))
        # m_u of every training user over all their pairs, saved with the parameters
        self.register_buffer("history", torch.zeros(n_users, dim, dtype=DTYPE))
        self.train_history = torch.zeros(0, dim, dtype=DTYPE)  # (P, H), leave-one-out m

    def mapping(self) -> torch.Tensor:
        """The diagonal of the matrix that maps a history to its head, ``s + d`` ``(H,)``."""
        return self.scale + self.diagonal

    def forward(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        m = user_rows(self.history, user, torch.zeros_like(self.w))
        return dot(self.w + self.mapping() * m, h)

    def margins(self, data: TrainPairs) -> torch.Tensor:
        head = self.w + self.mapping() * self.train_history
        return dot(head, data.chosen - data.rejected)

    def penalty(self, data: TrainPairs) -> torch.Tensor:
        return (
            self.config.l2 * self.w.square().sum()
            + self.config.l2_scale * self.scale.square()
            + self.config.l2_embed * self.diagonal.square().sum()
        )

    def prepare(self, data: TrainPairs) -> None:
        diff = data.chosen - data.rejected
        sums = torch.zeros_like(self.history).index_add_(0, data.user, diff)
        counts = torch.bincount(data.user, minlength=self.history.shape[0]).to(DTYPE)[:, None]
        self.history.copy_(sums / counts.clamp(min=1))
        # leave one out: each pair is given the mean of its user's other pairs (0 if none)
        others = counts[data.user] - 1
        self.train_history = (sums[data.user] - diff) / others.clamp(min=1)
