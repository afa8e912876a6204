"""``history_bt``: a reward conditioned on a user embedding computed from the user's own
preference history (a P-RM-style personalised reward model).

The user's embedding is their mean preference direction, the mean standardised feature
difference of their training pairs ``m_u = mean(h(y_w) - h(y_l))`` ``(H,)``; a learnt diagonal
matrix ``D = s I + diag(d)`` maps it to the head it adds to a shared one:
``r_u(x, y) = (w + (s + d) * m_u) . h(x, y)``. The one scale ``s`` says how far a person's
past direction predicts their next choice as a whole (cheap to learn: one number), ``d`` which
dimensions of it do more or less. Training gives each pair the mean of its user's *other*
pairs (leave one out), so the map learns to predict, not to copy the answer. The reward is
linear in ``(w, s, d)``, so the fit is convex. A user with no training pairs has ``m = 0``:
the shared head ``w``.

Where ``vpl`` squeezes the same mean through a learnt encoder to a small latent (``tanh(E m)``,
``Z`` numbers) and learns how the latent moves the head, ``history_bt`` keeps every dimension
of the user's direction and learns one weight for each: ``2 H + 1`` parameters in all, whatever
the number of users.

References: a reward model conditioned on a user embedding (Li et al., 2024, "Personalized
Language Modeling from Personalized Human Feedback", P-RM); the embedding read from the user's
own labelled pairs, as in VPL (Poddar et al., 2024).

Its heads are ``more_heads.HistoryHead``, the torch module that ``bt_heads.HeadRewardMethod``
trains and reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.rewards.bt_heads import HeadRewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from prefalign_methods.rewards.heads import Heads


@dataclass(frozen=True)
class HistoryBTConfig:
    l2: float = 0.05  # weight of ||w||^2, the shared head (as in global_bt)
    l2_scale: float = 0.05  # weight of s^2, the map's one shared scale
    l2_embed: float = 0.05  # weight of ||d||^2, the map's own weight for each dimension
    max_iter: int = 300  # L-BFGS iterations (convex: converges before that)
    seed: int = 0  # initialisation seed (w and d start at zero, so unused; kept for the key)


class HistoryBT(HeadRewardMethod):
    name = "history_bt"
    Config = HistoryBTConfig

    def build(self, n_users: int, dim: int, generator: torch.Generator) -> Heads:
        from prefalign_methods.rewards.more_heads import HistoryHead

        return HistoryHead(n_users, dim, self.config)
