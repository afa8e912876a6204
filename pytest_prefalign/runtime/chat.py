"""A prompt with earlier turns (``Dialogue``): the exchanges a decoder shows before the task
prompt, such as in-context examples, and how each is laid out for the model.

A prompt is a string (one user turn) or a ``Dialogue``: earlier (user, assistant) exchanges,
then the user's task prompt. With a chat template the exchanges are earlier turns of the
conversation and the model answers the last one in its own turn, which ends at its end-of-turn
token; without one (a base model) each exchange is the user text, a newline, the answer and a
blank line, and the task prompt is followed by a newline, as a plain prompt is, so the answer
comes next and ends at the line's end (every response is cut to its first line). A dialogue
without turns reads as its task prompt alone. A dialogue is hashable and compares by value, so
it keys memos as a string does; its turns come before the task prompt, so a user's dialogues
that share their turns share their tokens up to the task prompt (one prefill for the prefix).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias


@dataclass(frozen=True)
class Dialogue:
    """Earlier ``(user, assistant)`` exchanges, then the user's task ``prompt``."""

    turns: tuple[tuple[str, str], ...]
    prompt: str

    def __post_init__(self) -> None:
        turns = tuple((str(user), str(answer)) for user, answer in self.turns)
        object.__setattr__(self, "turns", turns)


Prompt: TypeAlias = str | Dialogue


def messages(prompt: Prompt) -> list[dict[str, str]]:
    """The chat messages of a prompt: each exchange as a user and an assistant turn, then the
    task prompt as the last user turn."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    out = []
    for user, answer in prompt.turns:
        out += [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
    return [*out, {"role": "user", "content": prompt.prompt}]


def plain_text(prompt: Prompt) -> str:
    """The text a model without a chat template reads, up to where the response starts: each
    exchange as ``user\\nanswer\\n\\n``, then the task prompt and a newline."""
    if isinstance(prompt, str):
        return prompt + "\n"
    shown = "".join(f"{user}\n{answer}\n\n" for user, answer in prompt.turns)
    return f"{shown}{prompt.prompt}\n"


def text(prompt: Prompt) -> str:
    """The prompt as one string (a plain prompt is itself; a dialogue its plain layout): what
    logs show, what orders prompts and what a sample's seed is drawn from."""
    return prompt if isinstance(prompt, str) else plain_text(prompt)


def key(prompt: Prompt) -> Any:
    """A JSON-serialisable form of the prompt that tells a dialogue from a string: a plain
    prompt is itself (the keys of plain prompts stay as they were), a dialogue a list."""
    if isinstance(prompt, str):
        return prompt
    return ["dialogue", [list(turn) for turn in prompt.turns], prompt.prompt]
