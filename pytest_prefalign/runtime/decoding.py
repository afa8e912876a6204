"""Forward passes over a KV cache, and the one decode loop every decoder runs.

``KV`` holds a batch of rows on the base model's cache (left-padded prompts, then whatever
followed) and is the only code that feeds the model a cache: one token per row (``step``),
right-padded responses (``extend``), or a block of query tokens that see chosen cached columns
and themselves only (``queries``; ARGS's candidates), of which one can become the next token
(``accept``) or all be dropped (``drop_queries``).

``decode`` is the loop: each step a ``Rule`` (the decoder's scoring rule) looks at the rows still
running and chooses a token for each, rows whose response ended leave the batch, and the cache
advances. Plain greedy or sampled generation, GenARM and ARGS are rules; nothing else decodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from pytest_prefalign import events
from pytest_prefalign.runtime.attention import GROUPED
from pytest_prefalign.runtime.prefill import CACHE, Prefill, pad

Finished = Callable[[list[int]], bool]  # does a generated token list end the response?


class Model(Protocol):
    """What ``KV`` needs of the LM (``runtime.lm.LM``): its model, its padding id and its
    prompt prefills."""

    model: Any
    pad_id: int

    def prefill(self, seqs: list[list[int]], *, batch_size: int = 16, then: int = 0) -> Prefill: ...


@dataclass
class KV:
    """Rows on the base model's KV cache. ``mask`` ``(B, W)`` marks real tokens (prompts are
    left-padded), ``positions`` ``(B,)`` is each row's next position id (real tokens only),
    ``last`` ``(B, H)`` the final hidden state after each row's last token, and ``pending``
    ``(B, Q, H)`` the hidden states of query tokens appended by ``queries`` and not yet
    accepted or dropped (their keys and values sit in the cache after column ``W``)."""

    lm: Model
    cache: Any
    mask: torch.Tensor
    positions: torch.Tensor
    last: torch.Tensor
    pending: torch.Tensor | None = None

    @classmethod
    def start(cls, lm: Model, seqs: list[list[int]], *, then: int = 0) -> KV:
        """The prompts' prefill (from the LM's prefill store where kept). ``then``: the most
        columns the caller will add (new tokens, pending queries), which decides whether a
        model with sliding-window layers can use kept prefills (``PrefillStore.fits``)."""
        state = lm.prefill(seqs, batch_size=len(seqs), then=then)
        return cls(lm, state.cache, state.mask, state.mask.sum(-1), state.last)

    def _run(
        self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, **kwargs: Any
    ) -> Any:
        return self.lm.model.base_model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{CACHE: self.cache},
            **kwargs,
        )

    def select(self, rows: torch.Tensor | list[int]) -> None:
        """Keep these rows, in this order (repeats allowed: a prompt's row copied for each of
        its responses)."""
        index = torch.as_tensor(rows, device=self.mask.device)
        # a model spread over devices (accelerate) keeps each layer's cache on its own device,
        # which a CPU index can select from
        self.cache.batch_select_indices(index.cpu() if spread(self.lm.model) else index)
        self.mask, self.positions, self.last = (
            self.mask[index],
            self.positions[index],
            self.last[index],
        )
        if self.pending is not None:
            self.pending = self.pending[index]

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Append one token per row; returns the new ``last`` ``(B, H)``."""
        self._check_no_pending()
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        out = self._run(tokens.to(self.mask.device)[:, None], self.mask, self.positions[:, None])
        self.positions = self.positions + 1
        self.last = out.last_hidden_state[:, -1]
        return self.last

    def extend(self, seqs: list[list[int]]) -> torch.Tensor:
        """Append right-padded sequences (teacher forcing); returns the hidden state after each
        of their tokens ``(B, T, H)`` (padding rows beyond each length)."""
        self._check_no_pending()
        ids, seq_mask = pad(seqs, self.lm.pad_id, left=False, device=self.mask.device)
        mask = torch.cat([self.mask, seq_mask], dim=1)
        positions = self.positions[:, None] + torch.arange(ids.shape[1], device=ids.device)
        out = self._run(ids, mask, positions)
        self.mask = mask
        self.positions = self.positions + seq_mask.sum(-1)
        return out.last_hidden_state

    def queries(
        self, ids: torch.Tensor, positions: torch.Tensor, sees: torch.Tensor
    ) -> torch.Tensor:
        """Run query tokens ``ids`` ``(B, Q)`` at ``positions`` ``(B, Q)``, each seeing the
        cached columns where ``sees`` ``(B, Q, W)`` is true, and itself, not the other
        queries. Their hidden states ``(B, Q, H)`` are returned and kept as ``pending``."""
        self._check_no_pending()
        rows, n = ids.shape
        own = torch.eye(n, dtype=torch.bool, device=ids.device).expand(rows, n, n)
        mask = torch.cat([sees, own], dim=-1)[:, None]  # (B, 1, Q, W + Q)
        out = self._run(ids, mask, positions, **{GROUPED: True})
        self.pending = out.last_hidden_state
        return self.pending

    def candidates(self, ids: torch.Tensor) -> torch.Tensor:
        """``queries`` for k candidate next tokens per row ``(B, k)``: all at the row's next
        position, each seeing the row's real cached tokens."""
        rows, k = ids.shape
        sees = self.mask.bool()[:, None, :].expand(rows, k, self.mask.shape[1])
        return self.queries(ids, self.positions[:, None].expand(rows, k), sees)

    def accept(self, win: torch.Tensor) -> torch.Tensor:
        """Make each row's pending query ``win`` ``(B,)`` its next token: its key and value
        move to the next column, the other queries are dropped; returns the new ``last``
        (the query's own hidden state: no further pass)."""
        if self.pending is None:
            raise RuntimeError("accept() without pending queries")
        width, n = self.mask.shape[1], self.pending.shape[1]
        rows = torch.arange(len(win), device=win.device)
        for layer in self.cache.layers:
            for name in ("keys", "values"):
                states = getattr(layer, name)  # (B, heads, width + n, head_dim)
                at = states.device  # the layer's own, where a model is spread over devices
                states[:, :, width] = states[rows.to(at), :, width + win.to(at)]
        if n > 1:
            self.cache.crop(-(n - 1))
        self.last = self.pending[rows, win]
        self.pending = None
        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)
        self.positions = self.positions + 1
        return self.last

    def drop_queries(self) -> None:
        """Remove the pending queries from the cache."""
        if self.pending is not None:
            self.cache.crop(-self.pending.shape[1])
            self.pending = None

    def _check_no_pending(self) -> None:
        if self.pending is not None:
            raise RuntimeError("accept() or drop_queries() before running more tokens")


def spread(model: Any) -> bool:
    """Whether accelerate placed the model's layers on more than one device."""
    placement = getattr(model, "hf_device_map", None) or {}
    return len(set(placement.values())) > 1


# --------------------------------------------------------------------------------------------
# The decode loop
# --------------------------------------------------------------------------------------------


@dataclass
class Step:
    """What a rule sees at one step: the cache, and which of the batch's rows are still
    running (``active``, indices into the batch) with the tokens each has so far."""

    kv: KV
    active: list[int]
    tokens: list[list[int]]  # per batch row, all of it; index with ``active``

    @property
    def hidden(self) -> torch.Tensor:
        """``(A, H)``: the final hidden state that predicts each running row's next token."""
        return self.kv.last


@dataclass
class Choice:
    """A rule's choice for the running rows: a token each, and where the rule ran them as
    pending queries of the cache (``KV.candidates``), which one each row takes."""

    tokens: list[int]
    query: torch.Tensor | None = field(default=None)


class Rule(Protocol):
    """A decoder's scoring rule: chooses the next token of every running row."""

    def choose(self, step: Step) -> Choice: ...


@torch.inference_mode()
def decode(kv: KV, rule: Rule, max_new_tokens: int, finished: Finished) -> list[list[int]]:
    """Token ids generated after each row of ``kv`` (a batch of prompts), stop token included
    where one was reached. Rows whose response ``finished`` leave the batch (and the cache).
    At most the model's ``window.response`` tokens (runtime/window.py), whatever is asked."""
    window = getattr(kv.lm, "window", None)
    if window is not None:
        max_new_tokens = min(max_new_tokens, window.response)
    with events.step("decode", total=max_new_tokens, unit="tokens") as progress:
        return _decode(kv, rule, max_new_tokens, finished, progress)


def _decode(
    kv: KV, rule: Rule, max_new_tokens: int, finished: Finished, progress: events.Step
) -> list[list[int]]:
    tokens: list[list[int]] = [[] for _ in range(kv.mask.shape[0])]
    active = list(range(len(tokens)))
    for n in range(max_new_tokens):
        choice = rule.choose(Step(kv, active, tokens))
        progress.advance()
        keep = []
        for j, (row, tok) in enumerate(zip(active, choice.tokens, strict=True)):
            tokens[row].append(tok)
            if not finished(tokens[row]):
                keep.append(j)
        if not keep or n == max_new_tokens - 1:
            break
        query = choice.query
        if len(keep) < len(active):
            order = compacted(keep)
            kv.select(order)
            active = [active[j] for j in order]
            query = query[order] if query is not None else None
        if query is not None:
            kv.accept(query)
        else:
            kv.step(torch.tensor([tokens[row][-1] for row in active]))
    return tokens


def compacted(keep: list[int]) -> list[int]:
    """The batch rows that stay when only ``keep`` (increasing) go on, in the order that moves
    the fewest: a kept row stays in its slot, and each slot a leaving row frees among the first
    ``len(keep)`` takes a kept row from beyond them, the last first. The cache then copies one
    row per row that left (``roomy.select_rows``), not every row after the first to leave: for
    ICL prompts of a thousand tokens a row is 46 MB of SmolLM2-135M's cache. A row's numbers
    do not depend on its slot (each row's sampling has its own generator)."""
    size = len(keep)
    kept = set(keep)
    beyond = [j for j in keep if j >= size]
    return [j if j in kept else beyond.pop() for j in range(size)]


# --------------------------------------------------------------------------------------------
# Picking tokens from logits
# --------------------------------------------------------------------------------------------


def greedy(logits: torch.Tensor) -> list[int]:
    return logits.argmax(-1).tolist()


def generator(seed: int) -> torch.Generator:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def gumbel_choice(
    logits: torch.Tensor, temperature: float, gens: list[torch.Generator]
) -> list[int]:
    """A draw from ``softmax(logits / T)`` per row: argmax of scaled logits plus Gumbel noise,
    the noise from each row's own generator.

    Every row draws a whole vocabulary of uniforms (its generator's stream, so a sample does
    not depend on the batch or on a nucleus cut). Where ``logits`` hold ``-inf`` (a nucleus
    cut) the noise is computed only at the other tokens: ``-log(-log u)`` of a clamped ``u``
    is finite, so a ``-inf`` token's score is ``-inf`` whatever its noise, and the draw is the
    same as with the noise everywhere (a tested identity). With the nucleus ranked on the
    logits, a best-of-N step's cut and draw at 64 rows of SmolLM2's logits ran 1.08x and 1.11x
    faster in two runs on this machine's CPU (benchmarks/README.md, "A sampled step's nucleus cut
    and draw")."""
    if logits.dim() != 2 or logits.shape[0] != len(gens):
        raise ValueError(f"one row of logits per generator: {tuple(logits.shape)}, {len(gens)}")
    vocab = logits.shape[-1]
    uniforms = torch.empty((len(gens), vocab), dtype=torch.float64)
    for row, g in zip(uniforms, gens, strict=True):
        torch.rand(vocab, generator=g, dtype=torch.float64, out=row)
    scaled = logits.cpu()
    kept = scaled != float("-inf")  # +inf and NaN score as they did with noise everywhere
    if bool(kept.all()):
        # in place, in one buffer: the same numbers as -log(-log(u)) + logits / T computed
        # out of place, without four (rows, V) float64 temporaries
        uniforms.clamp_(min=1e-300).log_().neg_().log_().neg_()
        uniforms.add_(scaled.double() / temperature)
        return uniforms.argmax(-1).tolist()
    rows, cols = kept.nonzero(as_tuple=True)
    noise = uniforms[rows, cols].clamp_(min=1e-300).log_().neg_().log_().neg_()
    scores = torch.full((len(gens), vocab), float("-inf"), dtype=torch.float64)
    scores[rows, cols] = noise.add_(scaled[rows, cols].double() / temperature)
    return scores.argmax(-1).tolist()


NUCLEUS_FIRST = 64  # the likeliest tokens a nucleus is first looked for among


def check_top_p(top_p: float) -> None:
    """A nucleus share must be in (0, 1]."""
    if not (0 < top_p <= 1):
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def nucleus(logits: torch.Tensor, top_p: float, temperature: float = 1.0) -> torch.Tensor:
    """``logits`` with every token outside each row's nucleus set to ``-inf``: the nucleus is
    the fewest most likely tokens whose probability under ``softmax(logits / temperature)``
    reaches ``top_p`` (Holtzman et al., 2020, "The Curious Case of Neural Text Degeneration"),
    a token kept while the tokens more likely than it hold less than ``top_p``; the most likely
    token always stays. Among tokens of equal probability at its edge the lower ids are kept, so
    the cut is the same on every run. ``top_p = 1`` cuts nothing and returns ``logits`` itself.

    The nucleus is found from the largest probabilities alone (``topk``, widened until they
    reach ``top_p``) instead of a sort of the whole vocabulary: its size ``m`` and its least
    probability, the edge; every token above the edge is in, and as many at the edge as ``m``
    leaves room for, by id. A sort of SmolLM2's 49,152 logits for 64 rows took 0.26 s a step on
    this machine's CPU, this 0.06 s."""
    check_top_p(top_p)
    if top_p >= 1:
        return logits
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    vocab = probs.shape[-1]
    k = min(vocab, NUCLEUS_FIRST)
    while True:
        # descending; tokens of equal probability give the same values whatever their order.
        # Ranked on the logits, which softmax keeps in order given a monotone exp (never
        # reversing two, at most rounding them equal), so the values are the same as ranking
        # the float64 probabilities, which costs more.
        top = probs.gather(-1, logits.topk(k, dim=-1).indices.to(probs.device))
        mass = top.cumsum(-1)
        if k == vocab or bool((mass[..., -1] >= top_p).all()):
            break
        k = min(vocab, k * 8)
    reached = mass >= top_p
    # the nucleus's size: the first rank whose mass reaches top_p (all k where none does,
    # a total short of top_p by rounding)
    size = torch.where(reached.any(-1), reached.int().argmax(-1) + 1, k)
    edge = top.gather(-1, (size - 1)[..., None])
    keep = probs >= edge
    if bool((keep.sum(-1) > size).any()):  # ties at the edge beyond the size: lower ids first
        above, ties = probs > edge, probs == edge
        room = size[..., None] - above.sum(-1, keepdim=True)
        keep = above | (ties & (ties.cumsum(-1) <= room))
    return logits.masked_fill(~keep.to(logits.device), float("-inf"))


def multinomial_choice(
    logits: torch.Tensor, temperature: float, gens: list[torch.Generator]
) -> list[int]:
    """One draw per row from ``softmax(logits / temperature)`` with the row's own
    generator."""
    probs = torch.softmax(logits.double().cpu() / temperature, dim=-1)
    return [int(torch.multinomial(p, 1, generator=g)) for p, g in zip(probs, gens, strict=True)]


class Plain:
    """Plain generation's rule: greedy, or a draw at ``temperature`` from the nucleus of
    ``top_p`` (``nucleus``, of the tempered distribution) with each row's own generator (so
    that a sample does not depend on the batch it ran in). ``lm``: what gives next-token logits
    from hidden states (``LM.logits_from_hidden``)."""

    def __init__(
        self,
        lm: Any,
        temperature: float | None,
        gens: list[torch.Generator] | None,
        *,
        top_p: float = 1.0,
    ) -> None:
        check_top_p(top_p)
        self.lm, self.temperature, self.gens, self.top_p = lm, temperature, gens, top_p

    def choose(self, step: Step) -> Choice:
        logits = self.lm.logits_from_hidden(step.hidden)
        if self.gens is None:
            return Choice(greedy(logits))
        temperature = self.temperature or 1.0
        # the nucleus of the tempered distribution, the order samplers apply the two in
        kept = nucleus(logits, self.top_p, temperature)
        return Choice(gumbel_choice(kept, temperature, [self.gens[r] for r in step.active]))
