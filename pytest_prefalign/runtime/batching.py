"""How prompts and their responses are cut into batches (the LM's generation and scoring)."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from pytest_prefalign.runtime.prefill import chunks, length_batches
from pytest_prefalign.runtime.window import DEFAULT_BOUNDS, Bounds, read_rows


def by_length(seqs: list[list[int]]) -> list[int]:
    """Indices, longest first: similar lengths share a batch and an oversized batch fails early."""
    return sorted(range(len(seqs)), key=lambda i: -len(seqs[i]))


def plan(
    order: list[int], groups: list[list[int]], batch_size: int
) -> Iterator[list[tuple[int, list[int]]]]:
    """Batches of ``(prompt, its pairs)`` with at most ``batch_size`` pairs each; a prompt with
    more pairs than that is split (and prefilled once per batch it lands in)."""
    batch: list[tuple[int, list[int]]] = []
    used = 0
    for prompt in order:
        for chunk in chunks(groups[prompt], batch_size):
            if used + len(chunk) > batch_size:
                yield batch
                batch, used = [], 0
            batch.append((prompt, chunk))
            used += len(chunk)
    if batch:
        yield batch


def read_batches(
    encoded: list[list[int]],
    prompt_of: list[int],
    answers: list[list[int]],
    size: int,
    device: torch.device,
    *,
    kept: bool,
    bounds: Bounds = DEFAULT_BOUNDS,
) -> list[list[int]]:
    """Batches of responses (indices into ``answers``; response ``n`` follows prompt
    ``encoded[prompt_of[n]]``) for teacher forcing. With every prompt ``kept`` in the prefill
    store: by response length, cut where padding costs more than a pass (``length_batches``).
    Otherwise a prompt's responses share a batch, so that it is prefilled once (``plan``).
    At most ``size`` responses a batch, fewer where the longest prompt and response would make
    a pass longer than the model's ``bounds`` (``window.read_rows``)."""
    size = read_rows(
        max(map(len, encoded), default=1), max(map(len, answers), default=1), size, bounds
    )
    if kept:
        return length_batches([len(a) for a in answers], size, device, bounds)
    groups: list[list[int]] = [[] for _ in encoded]
    for n, i in enumerate(prompt_of):
        groups[i].append(n)
    batches = plan(by_length(encoded), groups, size)
    return [[n for _, chunk in batch for n in chunk] for batch in batches]


def check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
