"""Titles from a model: a generated text cleaned into a title, and the writer's sampled titles.

Kept apart from the pairing rules (``writer.py``): the writer's cached titles are keyed by this
module's code, so a change to how the titles are paired does not make the writer write again.
"""

from __future__ import annotations

import re
from typing import Any

from prefalign_suites.raw_records import normalise_ws

_TITLE_LABEL = re.compile(r"^\s*(?:\*\*)?title(?:\*\*)?\s*[:\-]\s*", re.IGNORECASE)


def clean_title(text: str) -> str:
    """A generated title as a title: its first non-empty line without a ``Title:`` label,
    surrounding quotes or markdown emphasis."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "")
    line = _TITLE_LABEL.sub("", line).strip().strip("*").strip()
    if len(line) >= 2 and line[0] == line[-1] and line[0] in "\"'":
        line = line[1:-1]
    return normalise_ws(line)


def sampled(
    writer: Any,
    prompts: list[str],
    *,
    samples: int,
    temperature: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
) -> list[list[str]]:
    """Each prompt's ``samples`` sampled titles, cleaned (one pass: the samples of a prompt
    share its prefill)."""
    drawn = writer.generate(
        prompts,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        sample=True,
        temperature=temperature,
        num_samples=samples,
        seed=seed,
    )
    return [[clean_title(t) for t in texts] for texts in drawn]
