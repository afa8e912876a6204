"""How prompts and their responses are cut into batches (the LM's generation and scoring)."""

from __future__ import annotations

from collections.abc import Iterator

from pytest_prefalign.runtime.prefill import chunks


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


def check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
