"""Whole-response features for the reward heads: the base LM's final hidden state after the
response's last token (row -1 of ``LM.response_hidden``, the state after ``eos_id``).

Every reward method over the frozen backbone, and every decoder that scores candidates with
one, asks for the features of the same (prompt, response) texts, so they are computed once per
(model fingerprint, prompt, response): in an in-process memo, and optionally in safetensors files
under a cache folder keyed by content, so that a rerun does not repeat the forward passes.
``LM.response_hidden`` already batches and prefills each distinct prompt once (a pair's two
responses share it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from pytest_prefalign import cache, storage, versions

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

Key = tuple[str, str, str]  # (model fingerprint, prompt, response)

CHUNK = 256  # texts per forward request and per cache file

MEMO_BUDGET_MB = 512  # features kept in memory per process: ~2 KB each at H = 576


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


# one (H,) float32 tensor per (model fingerprint, prompt, response), most recently used kept
FEATURES = cache.Slot(
    "whole-response features", lambda: cache.Lru[Key, torch.Tensor](MEMO_BUDGET_MB * 2**20, _nbytes)
)


def response_features(
    lm: LM,
    prompts: Sequence[str],
    responses: Sequence[str],
    *,
    batch_size: int = 48,  # responses per pass at most (runtime/batching.py cuts by length)
    cache_dir: Path | None = None,
) -> torch.Tensor:
    """``(N, H)`` float32: the final hidden state after each response's ``eos_id``.

    Texts seen before (in this process, or in the disk cache on an earlier run: ``cache_dir``,
    else the active one, ``cache.active``) are not run through the model again.
    """
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    keys = [(lm.fingerprint, p, r) for p, r in zip(prompts, responses, strict=True)]
    memo = cache.PROCESS[FEATURES]
    found = {k: v for k in dict.fromkeys(keys) if (v := memo.get(k)) is not None}
    missing = [k for k in dict.fromkeys(keys) if k not in found]
    if missing:
        for key, value in zip(missing, _compute(lm, missing, batch_size, cache_dir), strict=True):
            found[key] = value
            memo.put(key, value)
    if not keys:
        return torch.zeros((0, _hidden_size(lm)), dtype=torch.float32)
    return torch.stack([found[k] for k in keys])


def remember(
    lm: LM, prompts: Sequence[str], responses: Sequence[str], hidden: Sequence[torch.Tensor]
) -> None:
    """Keep the last rows of ``response_hidden`` output computed elsewhere (prefix rewards), so
    that scoring the same texts later needs no forward pass."""
    memo = cache.PROCESS[FEATURES]
    for p, r, h in zip(prompts, responses, hidden, strict=True):
        key = (lm.fingerprint, p, r)
        if key not in memo:
            memo.put(key, h[-1].detach().float().cpu().clone())


def clear_memo() -> None:
    """Forget the in-process features (tests use it to check the disk cache)."""
    cache.PROCESS[FEATURES].clear()


def _compute(
    lm: LM, keys: list[Key], batch_size: int, cache_dir: Path | None
) -> list[torch.Tensor]:
    """Features of ``keys``, chunk by chunk, so that an interrupted run keeps what it did."""
    disk = cache.Disk(cache_dir) if cache_dir is not None else cache.active()
    rows: list[torch.Tensor] = []
    for start in range(0, len(keys), CHUNK):
        chunk = keys[start : start + CHUNK]
        # the model's fingerprint is in every text's key
        key = cache.make_key(
            "features", code=versions.code_version(_forward), texts=storage.content_key(chunk)
        )

        def compute(chunk: list[Key] = chunk) -> list[torch.Tensor]:
            return _forward(lm, chunk, batch_size)

        def read(path: Path, n: int = len(chunk)) -> list[torch.Tensor]:
            stacked = load_tensors(path.read_bytes())["features"]
            if stacked.shape[0] != n:
                raise ValueError("cached features of another size")
            return list(stacked)

        rows += disk.load_or_compute(key, compute, suffix=".safetensors", read=read, write=_write)
    return rows


def _write(path: Path, rows: Iterable[torch.Tensor]) -> None:
    storage.atomic_write_bytes(path, save_tensors({"features": torch.stack(list(rows))}))


def _forward(lm: LM, keys: list[Key], batch_size: int) -> list[torch.Tensor]:
    hidden = lm.response_hidden([k[1] for k in keys], [k[2] for k in keys], batch_size=batch_size)
    # clone: a row view would keep the whole (T, H) tensor alive in the memo
    return [h[-1].float().clone() for h in hidden]


def _hidden_size(lm: LM) -> int:
    return int(lm.model.get_input_embeddings().embedding_dim)
