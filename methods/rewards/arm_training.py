"""How the ``arm`` reward method is trained (see ``arm`` for what it is, ``arm_config`` for its
configuration): the adapter's parameters, the training pairs as token rows over the frozen base
LM's hidden states, and AdamW on the GenARM loss plus the KL anchor and the users' L2 prior."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from prefalign_methods.rewards.arm_config import ARMConfig
from pytest_prefalign import events
from pytest_prefalign.api import Pair
from pytest_prefalign.runtime.hidden import predicting_hidden

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

ROWS_PER_CHUNK = 256  # token rows per (rows, V) logits block: bounds the memory


@dataclass
class TokenData:
    """The training pairs as token rows: ``hidden`` ``(N, H)`` (the states that predict each
    token), ``target`` ``(N,)``, and for pair ``p`` the row indices of its chosen and its
    rejected response; ``user`` ``(P,)`` the pair's user index."""

    hidden: torch.Tensor
    target: torch.Tensor
    chosen_rows: list[torch.Tensor]
    rejected_rows: list[torch.Tensor]
    user: torch.Tensor
    base_logits: torch.Tensor | None  # ``(N, V)``, or None when it would not fit the budget
    base_lse: torch.Tensor  # ``(N,)`` logsumexp of each row's base logits


class Adapter(torch.nn.Module):
    """The ARM's trainable part; users are indexed ``0..U-1`` and ``U`` means unknown."""

    def __init__(
        self, hidden_size: int, rank: int, n_users: int, generator: torch.Generator
    ) -> None:
        super().__init__()
        init = torch.randn((rank, hidden_size), generator=generator) / math.sqrt(hidden_size)
        self.A = torch.nn.Parameter(init)
        self.B = torch.nn.Parameter(torch.zeros((hidden_size, rank)))
        self.user_scale = torch.nn.Parameter(torch.zeros((n_users, rank)))
        self.user_shift = torch.nn.Parameter(torch.zeros((n_users, rank)))

    def codes(self, user: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """``v_u(h)`` ``(N, M, r)`` for user indices ``(N,)`` and states ``(N, M, H)``."""
        zero = torch.zeros_like(self.user_scale[:1])  # the unknown user's row
        scale = torch.cat([self.user_scale, zero])[user][:, None]
        shift = torch.cat([self.user_shift, zero])[user][:, None]
        return (h @ self.A.T) * (1 + scale) + shift

    def penalty(self) -> torch.Tensor:
        return self.user_scale.square().sum() + self.user_shift.square().sum()


def output_head(lm: LM) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The base LM's output head as float32 ``(W (V, H), b (V,) or None)``, detached."""
    head = lm.model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(
            f"arm: the model's output head is a {type(head).__name__}, not a "
            "linear layer; this ARM reads hidden states through it"
        )
    bias = head.bias.detach().float() if head.bias is not None else None
    return head.weight.detach().float(), bias


def token_data(
    lm: LM,
    pairs: Sequence[Pair],
    users: dict[str, int],
    head: tuple[torch.Tensor, torch.Tensor | None],
    config: ARMConfig,
) -> TokenData:
    """The training pairs' token rows; responses are laid out chosen, rejected, pair by pair."""
    prompts = [p.prompt for p in pairs for _ in range(2)]
    responses = [r for p in pairs for r in (p.chosen, p.rejected)]
    hidden = predicting_hidden(lm, prompts, responses)
    target = torch.tensor([t for r in responses for t in lm.response_ids(r)], dtype=torch.long)
    starts = np.concatenate([[0], np.cumsum([h.shape[0] for h in hidden])])
    rows = [torch.arange(int(starts[i]), int(starts[i + 1])) for i in range(len(hidden))]
    flat = torch.cat(hidden)
    weight, bias = head
    fits = flat.shape[0] * weight.shape[0] * 4 <= config.logit_cache_mb * 2**20
    base = _base_logits(flat, weight, bias) if fits else None
    lse = torch.cat(
        [
            torch.logsumexp(
                _base_logits(flat[i : i + ROWS_PER_CHUNK], weight, bias)
                if base is None
                else base[i : i + ROWS_PER_CHUNK],
                dim=-1,
            )
            for i in range(0, flat.shape[0], ROWS_PER_CHUNK)
        ]
    )
    return TokenData(
        flat,
        target,
        rows[0::2],
        rows[1::2],
        torch.tensor([users[p.user] for p in pairs], dtype=torch.long),
        base,
        lse,
    )


@torch.no_grad()
def _base_logits(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    return torch.cat(
        [
            F.linear(hidden[i : i + ROWS_PER_CHUNK], weight, bias)
            for i in range(0, hidden.shape[0], ROWS_PER_CHUNK)
        ]
    )


def train(
    adapter: Adapter,
    data: TokenData,
    head: tuple[torch.Tensor, torch.Tensor | None],
    config: ARMConfig,
    generator: torch.Generator,
) -> list[dict[str, float]]:
    """AdamW on the GenARM loss plus the KL anchor and the users' L2 prior; the pair order of
    each epoch comes from ``generator``, so a seed gives the same parameters. Returns, per
    epoch, the mean pairwise loss and accuracy (``margin > 0``) of the training pairs as each
    step saw them (before its update; a full extra pass would cost a third of the training),
    and the mean KL(p_arm || p_base) per response."""
    shared = [adapter.A, adapter.B]
    personal = [adapter.user_scale, adapter.user_shift]
    optimiser = torch.optim.AdamW(
        [
            {"params": shared, "weight_decay": config.weight_decay},
            {"params": personal, "weight_decay": 0.0},
        ],
        lr=config.lr,
    )
    history = []
    with events.step("train", total=config.epochs, unit="epochs") as progress:
        for _ in range(config.epochs):
            history.append(_epoch(adapter, data, head, config, generator, optimiser))
            progress.advance()
    return history


def _epoch(
    adapter: Adapter,
    data: TokenData,
    head: tuple[torch.Tensor, torch.Tensor | None],
    config: ARMConfig,
    generator: torch.Generator,
    optimiser: torch.optim.Optimizer,
) -> dict[str, float]:
    """One pass over the pairs in the order ``generator`` draws; the epoch's figures."""
    n_pairs = len(data.chosen_rows)
    order = torch.randperm(n_pairs, generator=generator)
    seen, kls = [], []
    for start in range(0, n_pairs, config.batch_pairs):
        batch = order[start : start + config.batch_pairs]
        optimiser.zero_grad()
        margin, kl = margins(adapter, data, head, batch, config.beta)
        loss = -F.logsigmoid(margin).mean() + config.kl * kl
        (loss + config.user_l2 * adapter.penalty() / n_pairs).backward()
        optimiser.step()
        seen.append(margin.detach())
        kls.append(float(kl.detach()) * len(batch))
    epoch = torch.cat(seen)
    return {
        "loss": float(-F.logsigmoid(epoch).mean()),
        "accuracy": float((epoch > 0).double().mean()),
        "kl": sum(kls) / n_pairs,
    }


def margins(
    adapter: Adapter,
    data: TokenData,
    head: tuple[torch.Tensor, torch.Tensor | None],
    batch: torch.Tensor,
    beta: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``beta * (sum log p_arm(y_w) - sum log p_arm(y_l))`` of the pairs in ``batch``, and the
    mean over their responses of ``sum_t KL(p_arm || p_base)``."""
    index = batch.tolist()
    groups = [data.chosen_rows[p] for p in index] + [data.rejected_rows[p] for p in index]
    rows = torch.cat(groups)
    owner = torch.repeat_interleave(
        torch.arange(len(groups)), torch.tensor([len(g) for g in groups])
    )
    user = data.user[batch].repeat(2)[owner]
    weight, bias = head

    def base_rows(at: torch.Tensor) -> torch.Tensor:  # a new (rows, V) tensor: written in place
        if data.base_logits is not None:
            return data.base_logits[at]
        return _base_logits(data.hidden[at], weight, bias)

    # W (h + B v) + b = (W h + b) + v (W B)^T: the gradient never multiplies by the (V, H) W
    codes = adapter.codes(user, data.hidden[rows][:, None])[:, 0]
    token, kl = TokenTerms.apply(codes, adapter.B.T @ weight.T, base_rows, rows, data.target)
    sums = token.new_zeros(len(groups)).index_add(0, owner, token)
    kl = kl + data.base_lse[rows]
    return beta * (sums[: len(index)] - sums[len(index) :]), kl.sum() / len(groups)


class TokenTerms(torch.autograd.Function):
    """Per token row, with ``s = codes @ shift_t`` (the ARM's shift of the logits) and
    ``z = base + s``: ``log p_arm(y) = z_y - lse(z)`` and ``E_p[s] - lse(z)`` (the row's
    ``KL(p_arm || p_base)`` less the base logits' ``lse``), where ``p = softmax(z)``.

    What autograd would do with these few lines keeps a dozen ``(rows, V)`` tensors for the
    backward pass and runs each operation over all of them. Here the ``(rows, V)`` blocks are
    made ``ROWS_PER_BLOCK`` rows at a time, used while they are in the cache, and made again for
    the backward pass, whose gradient with respect to ``s`` is written out:
    ``d/ds [g_y (z_y - lse) + g_k (E_p[s] - lse)] = g_y (onehot(y) - p) + g_k p (s - E_p[s])``.
    The same figures to float rounding, about three times faster (a test checks values and
    gradients against the autograd expression)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        codes: torch.Tensor,
        shift_t: torch.Tensor,
        base_rows: Callable[[torch.Tensor], torch.Tensor],
        rows: torch.Tensor,
        target: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = rows.shape[0]
        token, lse, expected = (codes.new_empty(n) for _ in range(3))
        for j in _blocks(n):
            s = codes[j] @ shift_t
            z = base_rows(rows[j]).add_(s)
            picked = z.gather(-1, target[rows[j], None])[:, 0]
            top = z.amax(-1, keepdim=True)
            e = z.sub_(top).exp_()
            total = e.sum(-1)
            lse[j] = top[:, 0] + total.log()
            expected[j] = torch.linalg.vecdot(e, s) / total
            token[j] = picked - lse[j]
        ctx.save_for_backward(codes, shift_t, rows, target, lse, expected)
        ctx.base_rows = base_rows
        return token, expected - lse

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: Any, grad_token: torch.Tensor, grad_kl: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None, None, None]:
        codes, shift_t, rows, target, lse, expected = ctx.saved_tensors
        grad_codes = torch.empty_like(codes)
        grad_shift = torch.zeros_like(shift_t)
        for j in _blocks(rows.shape[0]):
            s = codes[j] @ shift_t
            p = ctx.base_rows(rows[j]).add_(s).sub_(lse[j, None]).exp_()
            g = s.sub_(expected[j, None]).mul_(grad_kl[j, None]).sub_(grad_token[j, None])
            g.mul_(p).scatter_add_(-1, target[rows[j], None], grad_token[j, None])
            grad_codes[j] = (shift_t @ g.T).T
            grad_shift.addmm_(codes[j].T, g)
        return grad_codes, grad_shift, None, None, None


ROWS_PER_BLOCK = 16  # token rows per (rows, V) block in TokenTerms: 3 MB at a 49k vocabulary


def _blocks(n: int) -> list[slice]:
    return [slice(i, i + ROWS_PER_BLOCK) for i in range(0, n, ROWS_PER_BLOCK)]
