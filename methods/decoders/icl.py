"""In-context learning decoders: ``icl`` shows k of the user's profile items (chosen with a fixed
seed, the same k for all of a user's prompts so that the prefix is shared); ``icl_rag`` shows the
k profile items most similar to the input by BM25 (``bm25s``).

The examples are shown as earlier exchanges of a conversation (``runtime/chat.Dialogue``): each
profile item as the suite's task prompt for its input and the item's output as the answer
(``example_turn``), then the task prompt; the model answers in its own turn, and stops at its
end-of-turn token (without a chat template: the answer comes on the line after the task prompt,
and every response is cut to its first line). Shown as one block of ``Abstract: ...`` /
``Title: ...`` examples before the task prompt, the examples led SmolLM2-135M to begin the next
example ("Abstract:") instead of answering for 6 of the main job's 42 items (docs/usage.md,
"Working points of icl and bon"). The policy score reads the same dialogue
(``BaseDecoder.logliks`` through ``prompts``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from prefalign_methods.decoders.base import BaseDecoder
from pytest_prefalign import bm25
from pytest_prefalign.api import CaseContext, DecodeOptions, ProfileEntry, declared
from pytest_prefalign.cache import Slot
from pytest_prefalign.runtime.chat import Dialogue

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Suite

BM25 = Slot("BM25 index per user", dict[str, Any])  # per (suite, size)
# each item's input by its (user, task prompt), per (suite, size): what icl_rag retrieves by
INPUTS = Slot("item inputs by (user, prompt)", dict[tuple[str, str], str])


def example_turn(suite: Suite, entry: ProfileEntry) -> tuple[str, str]:
    """A profile item as an earlier exchange: the suite's own ``example_turn(entry)`` where it
    has one (a suite whose profile items answer another question than its task: Polis's are
    votes), else the suite's task prompt for the item's input and the item's output."""
    own = declared(suite, "example_turn")
    if own is not None:
        user, answer = own(entry)
        return str(user), str(answer)
    return suite.instruction(entry.input), entry.output


def icl_prompt(suite: Suite, examples: Sequence[ProfileEntry], prompt: str) -> Dialogue:
    """The task prompt after the user's examples, each an earlier exchange; without examples,
    a dialogue of the task prompt alone (which reads as the plain prompt)."""
    return Dialogue(tuple(example_turn(suite, e) for e in examples), prompt)


@dataclass(frozen=True)
class ICLOptions(DecodeOptions):
    k: int = 3  # profile items shown before the task prompt

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k < 0:
            raise ValueError(f"k must be >= 0, got {self.k}")


class ICLDecoder(BaseDecoder):
    name = "icl"
    order = 1
    Options = ICLOptions

    def prompts(
        self, ctx: CaseContext, users: Sequence[str], prompts: Sequence[str]
    ) -> list[Dialogue]:
        return [
            icl_prompt(ctx.suite, self.examples(ctx, u, p), p)
            for u, p in zip(users, prompts, strict=True)
        ]

    def examples(self, ctx: CaseContext, user: str, prompt: str) -> list[ProfileEntry]:
        profile = ctx.data.profiles.get(user, [])
        k = min(ctx.options.k, len(profile))
        # one seeded draw per user, independent of the order in which users come
        rng = np.random.default_rng([ctx.seed, zlib.crc32(user.encode())])
        return [profile[i] for i in sorted(rng.choice(len(profile), size=k, replace=False))]


class RAGDecoder(ICLDecoder):
    name = "icl_rag"
    order = 2

    def examples(self, ctx: CaseContext, user: str, prompt: str) -> list[ProfileEntry]:
        profile = ctx.data.profiles.get(user, [])
        k = min(ctx.options.k, len(profile))
        if k == 0:
            return []
        # equal scores in profile order (bm25.ranking): the same examples on every machine
        found = bm25.ranking(self.index(ctx, user, profile), query(ctx, user, prompt), k=k)[:k]
        return [profile[int(i)] for i in found]

    @staticmethod
    def index(ctx: CaseContext, user: str, profile: list[ProfileEntry]):
        """A BM25 index over the user's profile inputs, built once per (suite, size, user)."""
        indexes = ctx.shared[BM25]
        if user not in indexes:
            indexes[user] = bm25.index([e.input for e in profile])
        return indexes[user]


def query(ctx: CaseContext, user: str, prompt: str) -> str:
    """What ``icl_rag`` retrieves by: the input of the item whose task prompt this is, as the
    profile items are inputs too; the prompt itself where no item has it. Retrieving by the
    whole prompt let the suite's instruction ("generate a title for the following abstract of
    a paper") rank the profile items that share its words."""
    inputs = ctx.shared[INPUTS]
    if not inputs:
        inputs.update({(it.user, it.prompt): it.input for it in ctx.data.items})
    return inputs.get((user, prompt), prompt)
