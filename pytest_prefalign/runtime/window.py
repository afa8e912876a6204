"""How much text a model reads: one rule for every decoder and scorer (docs/usage.md, "Long
texts"), applied where the LM turns text into token ids (``LM.prompt_ids``, ``LM.response_ids``)
and where it plans its passes.

- ``context``: the model's real number of positions, ``max_position_embeddings`` of its (text)
  config, or its tokenizer's ``model_max_length`` where that is smaller (a tokenizer that sets
  none says ``10**30``).
- ``response = min(RESPONSE_MOST, context // 4)`` tokens at most for a response, its final
  end-of-turn id included: a longer response keeps its first ``response - 1`` tokens and the
  end-of-turn id (scoring reads a response from its start); generation stops there too.
- ``prompt = context - response`` tokens at most for a rendered prompt: a longer one loses its
  middle, keeping its first and last halves, so that the task instruction and the first
  examples at the start and the chat template's assistant header at the end (which the answer
  follows) survive.
- A text more than ``CHARS_PER_TOKEN`` times its limit in characters is cut the same way
  before it is tokenized, so that a tokenizer never reads a megabyte.
- A pass runs at most ``Bounds.positions`` positions (rows times its longest row, prompt and
  response) and computes next-token logits at most at ``Bounds.logits`` response positions;
  a single row always runs (it is at most ``context`` positions). The bounds are at most
  ``PASS_TOKENS`` and ``LOGIT_POSITIONS``; on the CPU each model's are sized from the memory
  its process may use (``memory.pass_bounds``).

So a prompt plus its response never exceeds the context, and no pass exceeds the bound whatever
the data. Light (no torch): the evaluation reads the limits to name the items they cut.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_prefalign import events

RESPONSE_MOST = 1024  # tokens a response may keep, at most (a quarter of a smaller context)
CHARS_PER_TOKEN = 32  # a text longer than its limit times this is cut before tokenizing
PASS_TOKENS = 65_536  # positions one pass may run (rows x its longest row)
LOGIT_POSITIONS = 8_192  # response positions one teacher-forced pass computes logits at
# positions one pass runs through the body on the CPU: SmolLM2-135M's body ran 600-630 tokens/s
# at 2,048-8,192 positions a pass (rows of 256 and of 1,024 tokens), 410 tokens/s at 16,384 in
# rows of 1,024 (its attention masks and MLP activations past the caches; this project's
# 2-core AMD EPYC, 2 threads); more rows a pass gain nothing there
CPU_COMPUTED = 8_192
UNSET = 10**9  # a tokenizer's model_max_length at or above this means "not set"


@dataclass(frozen=True)
class Window:
    """A model's limits: ``context`` positions, ``prompt`` tokens for a rendered prompt,
    ``response`` tokens for a response (its end-of-turn id included)."""

    context: int

    @property
    def response(self) -> int:
        return max(2, min(RESPONSE_MOST, self.context // 4))

    @property
    def prompt(self) -> int:
        return self.context - self.response


def model_window(config: Any, tokenizer: Any) -> Window:
    """The limits of a model with this config and tokenizer."""
    if hasattr(config, "get_text_config"):
        config = config.get_text_config(decoder=True)
    found = [
        int(value)
        for value in (
            getattr(config, "max_position_embeddings", None),
            getattr(tokenizer, "model_max_length", None),
        )
        if isinstance(value, int | float) and 8 <= value < UNSET
    ]
    if not found:
        raise ValueError("the model states no context length (max_position_embeddings)")
    return Window(min(found))


def cut_middle(seq: list[int], limit: int) -> list[int]:
    """``seq`` without its middle: its first ``ceil(limit / 2)`` and last ``floor(limit / 2)``
    items (``seq`` itself where it is no longer than ``limit``)."""
    if len(seq) <= limit:
        return seq
    head = (limit + 1) // 2
    return seq[:head] + seq[len(seq) - (limit - head) :] if limit > head else seq[:head]


def cut_text_middle(text: str, tokens: int) -> str:
    """``text`` without its middle where it has more than ``CHARS_PER_TOKEN * tokens``
    characters (before tokenizing: the token cut then decides)."""
    most = CHARS_PER_TOKEN * tokens
    if len(text) <= most:
        return text
    head = most // 2
    return text[:head] + text[len(text) - (most - head) :]


def cut_text_end(text: str, tokens: int) -> str:
    """``text``'s first ``CHARS_PER_TOKEN * tokens`` characters (the token cut then decides)."""
    return text[: CHARS_PER_TOKEN * tokens]


@dataclass
class Cuts:
    """The texts a model's window cut, by kind (``prompt``, ``response``) and text: their
    tokens before and after. Each is logged once, with the model's ``label``."""

    label: str
    seen: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)

    def note(
        self,
        kind: str,
        text: str,
        ids: Sequence[int],
        cut: Callable[[list[int], int], list[int]],
        limit: int,
    ) -> list[int]:
        """``cut(ids, limit)`` where ``ids`` are more than ``limit``; else ``ids``."""
        ids = list(ids)
        if len(ids) <= limit:
            return ids
        kept = cut(ids, limit)
        if (kind, text) not in self.seen:
            self.seen[(kind, text)] = (len(ids), len(kept))
            events.LOGGER.warning(
                "model %s: a %s of %d+ tokens cut to %d (%r...)",
                self.label,
                kind,
                len(ids),
                len(kept),
                text[:60],
            )
        return kept


@dataclass(frozen=True)
class Bounds:
    """How much one pass of a model may run: ``positions`` it holds (rows times its widest row:
    prompt, cache and new positions; what its memory is sized by), ``computed`` positions it
    runs through the body (rows times its longest run of new positions; what its speed is
    sized by) and next-token logits at ``logits`` response positions."""

    positions: int = PASS_TOKENS
    logits: int = LOGIT_POSITIONS
    computed: int = PASS_TOKENS

    def __post_init__(self) -> None:
        if min(self.positions, self.logits, self.computed) < 1:
            raise ValueError(f"bounds must be >= 1, got {self}")


DEFAULT_BOUNDS = Bounds()


def rows_for(width: int, most: int, bounds: Bounds = DEFAULT_BOUNDS) -> int:
    """How many rows of ``width`` positions one pass may run: at most ``most``, at most
    ``bounds.positions`` positions, at least one."""
    return max(1, min(most, bounds.positions // max(1, width)))


def run_rows(width: int, most: int, bounds: Bounds = DEFAULT_BOUNDS) -> int:
    """How many rows of ``width`` new positions one pass may run through the body: ``rows_for``
    them, and at most ``bounds.computed`` positions."""
    return max(1, min(rows_for(width, most, bounds), bounds.computed // max(1, width)))


def fixed_passes(
    lengths: Sequence[int], most: int, bounds: Bounds = DEFAULT_BOUNDS
) -> list[tuple[int, int]]:
    """``lengths`` (longest first, the new positions of each) in consecutive passes ``[a, b)``
    of ``run_rows`` the longest of each."""
    cuts, a = [], 0
    while a < len(lengths):
        b = min(a + run_rows(lengths[a], most, bounds), len(lengths))
        cuts.append((a, b))
        a = b
    return cuts


def read_rows(
    prompt_width: int, response_width: int, most: int, bounds: Bounds = DEFAULT_BOUNDS
) -> int:
    """Rows of one teacher-forced pass: ``rows_for`` the prompt and response together, at most
    ``bounds.computed`` response positions run and ``bounds.logits`` response positions'
    logits (the prompts come from their prefills)."""
    rows = rows_for(prompt_width + response_width, most, bounds)
    most_run = min(bounds.computed, bounds.logits)
    return max(1, min(rows, most_run // max(1, response_width)))
