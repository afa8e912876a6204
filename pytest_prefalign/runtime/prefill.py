"""Prompt prefills: each prompt's KV cache computed once per session, common prefixes once.

All the methods of a (suite, size) start from the same prompts: the decoders generate from them,
the policy-accuracy scorers teacher-force the pairs' responses on them, the reward methods and
the judges read hidden states after them, and the suite's reference generator wrote its negatives
from them. ``PrefillStore`` keeps each prompt's cache (the keys and values of its real tokens,
per layer) and its final hidden state under a memory budget, so that a prompt is prefilled once
however many of these ask for it. Prompts that begin with the same tokens (a user's ICL examples,
shown before each of the user's inputs; the chat template's opening) have their common prefix
prefilled once, and each prompt continues from it.

For models whose attention layers all see the whole sequence, and for models with sliding-window
layers (Gemma 3) as long as every row stays within the narrowest window (``attention_reach``):
there a sliding layer sees the whole sequence too, and its cache is kept as a full layer's, limited
to the window (``roomy.RoomyLayer``). A batch that would reach past the window (its prompts and
the ``then`` tokens a caller will add) gets one plain pass, the model's own sliding cache, and
nothing is kept.
The results are those of a plain pass up to floating-point rounding (the same attention over the
same keys, computed in other batches).
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from transformers.modeling_outputs import BaseModelOutputWithPast

from pytest_prefalign import events
from pytest_prefalign.runtime import memory
from pytest_prefalign.runtime.roomy import ROOM, RoomyLayer, roomy_cache
from pytest_prefalign.runtime.window import (
    DEFAULT_BOUNDS,
    Bounds,
    fixed_passes,
    rows_for,
    run_rows,
)

MIN_SHARED = 32  # tokens: a shorter common prefix is not worth a pass of its own
# what a pass costs beyond its rows on the CPU, in rows of its width: SmolLM2-135M prefilled
# 463 tokens/s one prompt of 250 tokens at a time and 660 sixteen at a time (2 threads), i.e.
# a pass of n rows of width w costs about (n + 0.5) * w token-times
PASS_OVERHEAD_ROWS = 0.5
MAX_DEPTH = 16  # levels of prefixes of prefixes; deeper nesting runs whole
# the store's memory budget in MiB (0 keeps nothing); unset, a share of the memory available
# (``memory.prefill_budget``)
BUDGET_ENV = memory.PREFILL_ENV

Key = tuple[int, ...]
T = TypeVar("T")

# The keyword a model takes its KV cache by, and the field of its output that returns it:
# ``cache`` from transformers 5.24 on (``past_key_values`` is deprecated there), and
# ``past_key_values`` before, where a ``cache=`` keyword would be ignored without a word.
CACHE = "cache" if "cache" in BaseModelOutputWithPast.__dataclass_fields__ else "past_key_values"


@dataclass(frozen=True)
class Row:
    """One prompt's prefill: per layer ``(kv_heads, L, head_dim)`` keys and values of its ``L``
    tokens, and the final hidden state ``(H,)`` (after the final norm) at its last token."""

    keys: tuple[torch.Tensor, ...]
    values: tuple[torch.Tensor, ...]
    last: torch.Tensor

    @property
    def length(self) -> int:
        return int(self.keys[0].shape[1])

    @property
    def nbytes(self) -> int:
        tensors = (*self.keys, *self.values, self.last)
        return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class Prefill:
    """A batch of prompts, left-padded: ``cache`` (one row per prompt), ``mask`` ``(B, W)`` and
    ``last`` ``(B, H)``, the final hidden state at each prompt's last token. Position ids count
    real tokens only, so the next one of row ``b`` is ``mask[b].sum()``."""

    cache: Any
    mask: torch.Tensor
    last: torch.Tensor


class PrefillStore:
    """Prefills of one model, kept by token ids; least recently used rows go first when the
    budget is exceeded. ``stats`` counts prompts asked for, prompts run and tokens run."""

    def __init__(
        self,
        model: Any,
        pad_id: int,
        device: torch.device,
        *,
        budget_bytes: int | None = None,
        min_shared: int = MIN_SHARED,
        bounds: Bounds = DEFAULT_BOUNDS,
    ) -> None:
        self.model, self.pad_id, self.device = model, pad_id, device
        self.bounds = bounds  # how much one of its passes may run (``window.Bounds``)
        # columns within which every layer sees the whole sequence (inf: full attention)
        self.reach = attention_reach(model.config)
        self.enabled = self.reach > 0
        if budget_bytes is None:
            budget_bytes = budget_from_env(device)
        self.budget, self.min_shared = budget_bytes, min_shared
        self.rows: OrderedDict[Key, Row] = OrderedDict()
        self.size = 0
        self.stats = {"asked": 0, "computed": 0, "tokens_run": 0, "passes": 0}

    @torch.inference_mode()
    def prefill(
        self, seqs: Sequence[Sequence[int]], *, batch_size: int = 16, then: int = 0
    ) -> Prefill:
        """The batch's prefill, from kept rows where there are any. ``then``: the columns the
        caller will add to the cache (new tokens, queries); a model with sliding-window layers
        gets a plain pass where the batch would reach past its window."""
        if not seqs:
            raise ValueError("prefill() needs at least one sequence")
        if not self.fits(seqs, then):
            return self._plain([list(s) for s in seqs])
        return assemble(
            self.model.config,
            self._rows([tuple(s) for s in seqs], batch_size),
            self.device,
            reach=self.reach,
        )

    def fits(self, seqs: Sequence[Sequence[int]], then: int = 0) -> bool:
        """Whether these prompts, left-padded to the longest, and ``then`` more columns stay
        where every layer sees the whole sequence (kept prefills apply)."""
        return self.enabled and max(map(len, seqs), default=0) + then <= self.reach

    @torch.inference_mode()
    def warm(self, seqs: Sequence[Sequence[int]], *, batch_size: int = 16, then: int = 0) -> None:
        """Compute the prefills of all these prompts now, together, so that those sharing a
        prefix are grouped whatever batches they are asked for in later. Only when they all
        fit in the budget: otherwise each batch computes its own when it comes (sharing
        prefixes within the batch), and memory holds one batch at a time. Prompts that with
        ``then`` more columns would reach past a sliding window are left out."""
        if not self.enabled or not seqs:
            return
        keys = list(dict.fromkeys(tuple(s) for s in seqs if self.fits([s], then)))
        if sum(map(len, keys)) * self.bytes_per_token > self.budget:
            return
        self._rows(keys, batch_size)

    def holds(self, seqs: Sequence[Sequence[int]], then: int = 0) -> bool:
        """Whether every one of these prompts is kept (a ``prefill`` of them runs nothing)."""
        return self.fits(seqs, then) and all(tuple(s) in self.rows for s in seqs)

    @property
    def bytes_per_token(self) -> int:
        """Bytes of one token's keys and values over all layers (46 KB for SmolLM2-135M)."""
        size = next(self.model.parameters()).element_size()
        return memory.Shape.of(self.model.config, size).kv_bytes

    def clear(self) -> None:
        self.rows.clear()
        self.size = 0

    # -----------------------------------------------------------------------------------------

    def _rows(self, keys: list[Key], batch_size: int, depth: int = 0) -> list[Row]:
        found: dict[Key, Row] = {}
        for key in dict.fromkeys(keys):
            row = self.rows.get(key)
            if row is not None:
                self.rows.move_to_end(key)
                found[key] = row
        self.stats["asked"] += len(keys)
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing:
            found.update(self._compute(missing, batch_size, depth))
        return [found[k] for k in keys]

    def _compute(self, keys: list[Key], batch_size: int, depth: int = 0) -> dict[Key, Row]:
        """Rows for prompts not kept: their shared prefixes first (those they share with each
        other or with a kept row; through ``_rows``, so that prefixes shared by prefixes are run
        once too), then what follows each prefix. Prompts nested deeper than ``MAX_DEPTH``
        levels of prefixes run whole."""
        order = sorted(keys)
        if depth < MAX_DEPTH:
            shared = [
                max(n, self._kept_prefix(k))
                for k, n in zip(order, shared_lengths(order, self.min_shared), strict=True)
            ]
        else:
            shared = [0] * len(order)
        prefixes = list(dict.fromkeys(k[:n] for k, n in zip(order, shared, strict=True) if n))
        heads = dict(zip(prefixes, self._rows(prefixes, batch_size, depth + 1), strict=True))
        # a prompt that is also the prefix of others was run as such
        out: dict[Key, Row] = {k: heads[k] for k in order if k in heads}
        # by the length still to run, longest first: similar lengths share a batch
        todo = [i for i, k in enumerate(order) if k not in out]
        tails = [len(order[i]) - shared[i] for i in todo]
        counted = events.step("prefill", total=len(todo), unit="prompts")
        with counted if depth == 0 else events.unseen() as progress:
            for batch in self._batches(tails, [len(order[i]) for i in todo], batch_size):
                chunk = [todo[j] for j in batch]
                rows = self._extend(
                    [heads.get(order[i][: shared[i]]) if shared[i] else None for i in chunk],
                    [order[i][shared[i] :] for i in chunk],
                )
                for i, row in zip(chunk, rows, strict=True):
                    out[order[i]] = row
                    self._keep(order[i], row)
                progress.advance(len(chunk))
        self.stats["computed"] += len(keys)
        return out

    def _batches(self, tails: list[int], widths: list[int], most: int) -> list[list[int]]:
        """Indices of the prompts to run in passes: by the ``tails`` each runs
        (``length_batches``, within ``bounds.computed``), each pass then cut within
        ``bounds.positions`` of its rows' ``widths`` (a tail and the head it is run on)."""
        cut = []
        for batch in length_batches(tails, most, self.device, self.bounds):
            held = rows_for(max(widths[j] for j in batch), len(batch), self.bounds)
            cut += list(chunks(batch, held))
        return cut

    def _kept_prefix(self, key: Key) -> int:
        """The length of the longest kept row that is a proper prefix of ``key`` (a prefix run
        earlier for other prompts), or 0."""
        lengths = sorted(
            {len(k) for k in self.rows if self.min_shared <= len(k) < len(key)}, reverse=True
        )
        return next((n for n in lengths if key[:n] in self.rows), 0)

    def _extend(self, heads: list[Row | None], tails: list[Key]) -> list[Row]:
        """Run each tail on its head's cache (``None``: no head) and return the whole rows.
        Where the padded pass would reach past a sliding window, the rows run one at a time
        (each within it: ``prefill`` keeps only rows that are)."""
        lengths = [0 if h is None else h.length for h in heads]
        if len(tails) > 1 and max(lengths) + max(map(len, tails)) > self.reach:
            return [
                row for h, t in zip(heads, tails, strict=True) for row in self._extend([h], [t])
            ]
        starts = [Row((), (), torch.empty(0)) if h is None else h for h in heads]
        if any(lengths):
            state = assemble(
                self.model.config, starts, self.device, lengths=lengths, reach=self.reach
            )
            cache, head_mask = state.cache, state.mask
        else:
            # a sliding layer of the model's own cache would drop what is past its window
            own = (
                None if math.isinf(self.reach) else roomy_cache(self.model.config, reach=self.reach)
            )
            cache, head_mask = (
                own,
                torch.zeros((len(tails), 0), dtype=torch.long, device=self.device),
            )
        ids, tail_mask = pad([list(t) for t in tails], self.pad_id, left=True, device=self.device)
        mask = torch.cat([head_mask, tail_mask], dim=1)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, head_mask.shape[1] :]
        out = self.model.base_model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{CACHE: cache},
        )
        self.stats["tokens_run"] += int(tail_mask.sum())
        self.stats["passes"] += 1
        layers = getattr(out, CACHE).layers
        rows = []
        for b in range(len(tails)):
            real = mask[b].nonzero()[:, 0]  # columns of real tokens (one device sync per row)
            rows.append(
                Row(
                    tuple(layer.keys[b].index_select(1, real) for layer in layers),
                    tuple(layer.values[b].index_select(1, real) for layer in layers),
                    out.last_hidden_state[b, -1].clone(),
                )
            )
        return rows

    def _keep(self, key: Key, row: Row) -> None:
        if key in self.rows or row.nbytes > self.budget:
            return
        self.rows[key] = row
        self.size += row.nbytes
        while self.size > self.budget:
            _, old = self.rows.popitem(last=False)
            self.size -= old.nbytes

    def _plain(self, seqs: list[list[int]]) -> Prefill:
        ids, mask = pad(seqs, self.pad_id, left=True, device=self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model.base_model(
            input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
        )
        return Prefill(getattr(out, CACHE), mask, out.last_hidden_state[:, -1])


# -------------------------------------------------------------------------------------------
# Helpers
# -------------------------------------------------------------------------------------------


def assemble(
    config: Any,
    rows: list[Row],
    device: torch.device,
    *,
    lengths: list[int] | None = None,
    reach: float = math.inf,
) -> Prefill:
    """A left-padded batch (cache, mask, last) from kept rows. With ``lengths``, rows of
    length 0 (placeholders without tensors) are all padding. The cache's layers append in
    place (``runtime.roomy``): each gets room for what will follow the prompts; with a finite
    ``reach`` (sliding windows) every layer is one, limited to it."""
    lengths = [r.length for r in rows] if lengths is None else lengths
    width = max(lengths)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    filled = [b for b, n in enumerate(lengths) if n]
    for b in filled:
        mask[b, width - lengths[b] :] = 1
    cache = roomy_cache(config, reach=reach)
    model_row = rows[filled[0]]
    padded = width - min(lengths)  # the columns that are padding in some row
    for layer, (k0, v0) in enumerate(zip(model_row.keys, model_row.values, strict=True)):
        # the padding columns are zeros (masked, but read): zeroed in one op for every row up to
        # the widest padding (a row's own columns are then written over them), not one op per
        # row (an op's fixed cost, times rows and layers, was a fifth of this function's time);
        # the room is written before it is read, so it is left as allocated
        keys = k0.new_empty((len(rows), k0.shape[0], width + ROOM, k0.shape[2]))
        values = v0.new_empty((len(rows), v0.shape[0], width + ROOM, v0.shape[2]))
        keys[:, :, :padded].zero_()
        values[:, :, :padded].zero_()
        for b in filled:
            n = lengths[b]
            keys[b, :, width - n : width] = rows[b].keys[layer]
            values[b, :, width - n : width] = rows[b].values[layer]
        place = cache.layers[layer]
        if isinstance(place, RoomyLayer):
            place.hold(keys, values, width)
        else:  # a layer of another kind: given its part as transformers' own would be
            cache.update(keys[:, :, :width], values[:, :, :width], layer)
    hidden = model_row.last
    last = hidden.new_zeros((len(rows), hidden.shape[0]))
    for b in filled:
        last[b] = rows[b].last
    return Prefill(cache, mask, last)


def shared_lengths(order: list[Key], min_shared: int) -> list[int]:
    """For prompts in sorted order, the length of the longest prefix each shares with another
    prompt that does not start with it whole (a prompt that does is run on top of it instead),
    at most its length minus one so that something is left to run; 0 where that is shorter
    than ``min_shared``. The sorted neighbours have that prefix: the one before, and the first
    after that is not an extension."""
    out = []
    for i, key in enumerate(order):
        n = _common(order[i - 1], key) if i else 0
        j = i + 1
        while j < len(order) and order[j][: len(key)] == key:
            j += 1
        if j < len(order):
            n = max(n, _common(key, order[j]))
        n = min(n, len(key) - 1)
        out.append(n if n >= min_shared else 0)
    return out


def attention_reach(config: Any) -> float:
    """The columns within which every attention layer sees the whole sequence: infinite where
    every layer is full attention, the narrowest sliding window where some layers slide, 0
    where a layer is of another kind or its window is unknown."""
    if full_attention(config):
        return math.inf
    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    if not window or any(t not in ("full_attention", "sliding_attention") for t in layer_types):
        return 0
    return int(window)


def full_attention(config: Any) -> bool:
    """Whether every attention layer sees the whole sequence (no sliding window)."""
    config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None:
        return all(t == "full_attention" for t in layer_types)
    return getattr(config, "sliding_window", None) is None


def budget_from_env(device: torch.device | None = None) -> int:
    """The store's budget in bytes: ``PREFALIGN_PREFILL_MB`` where set, else, on the CPU, its
    share of the memory the process may use (``memory.prefill_budget``); on another device the
    store is that device's memory, of which the machine's says nothing: the fixed
    ``memory.PREFILL_MOST``."""
    if device is not None and device.type != "cpu" and not os.environ.get(BUDGET_ENV, "").strip():
        return memory.PREFILL_MOST
    return memory.prefill_budget()


def pad(
    seqs: list[list[int]], pad_id: int, *, left: bool, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of shape ``(B, L)``; pads on the left for prompts, right for responses."""
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for k, s in enumerate(seqs):
        span = slice(width - len(s), width) if left else slice(0, len(s))
        ids[k, span] = torch.tensor(s, dtype=torch.long)
        mask[k, span] = 1
    return ids.to(device), mask.to(device)


def length_batches(
    lengths: Sequence[int], most: int, device: torch.device, bounds: Bounds = DEFAULT_BOUNDS
) -> list[list[int]]:
    """Indices of ``lengths`` in batches for the passes that run them: longest first (equal
    lengths keep their order), cut by ``passes``."""
    order = sorted(range(len(lengths)), key=lambda n: -lengths[n])
    return [order[a:b] for a, b in passes([lengths[n] for n in order], most, device, bounds)]


def passes(
    lengths: list[int], most: int, device: torch.device, bounds: Bounds = DEFAULT_BOUNDS
) -> list[tuple[int, int]]:
    """Sequences of ``lengths`` (longest first) cut into passes ``[a, b)`` of at most ``most``,
    and of at most the bounds' positions (``window.run_rows``): on the CPU, where a
    padding token costs as much as a real one, where the padding saved pays for another pass
    (``snug``); elsewhere in fixed chunks."""
    if device.type != "cpu":
        return fixed_passes(lengths, most, bounds)
    return snug(lengths, most, PASS_OVERHEAD_ROWS, bounds)


def snug(
    lengths: list[int], most: int, overhead: float, bounds: Bounds = DEFAULT_BOUNDS
) -> list[tuple[int, int]]:
    """Cut ``lengths`` (longest first) into consecutive batches ``[a, b)`` of at most ``most``
    rows and at most ``window.run_rows`` its longest length, that minimise the padded work: a
    batch costs ``(rows + overhead) * its longest length``. Exact, by dynamic programming over
    where the last batch starts."""
    if most < 1:
        raise ValueError(f"most must be >= 1, got {most}")
    cost = [0.0] + [float("inf")] * len(lengths)
    start = [0] * (len(lengths) + 1)
    for b in range(1, len(lengths) + 1):
        for a in range(max(0, b - most), b):
            if b - a > run_rows(lengths[a], most, bounds):
                continue
            total = cost[a] + (b - a + overhead) * lengths[a]
            if total < cost[b]:
                cost[b], start[b] = total, a
    cuts, b = [], len(lengths)
    while b:
        cuts.append((start[b], b))
        b = start[b]
    return cuts[::-1]


def _common(a: Key, b: Key) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def chunks(items: list[T], size: int) -> Iterator[list[T]]:
    """Consecutive slices of at most ``size`` items (batches)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]
