"""The known preferences of the synthetic suite: each user prefers titles by one rule, written in
the user's id so that anyone (a reward method, a test, a reader of the run file) can recover it.

A user id is ``RULE#N``: ``short#0``, ``colon#1``, ``vocab:neural+graph#2`` (``N`` tells users of
the same rule apart). The rules, each a score over a title (higher is preferred):

- ``short``: fewer words is better (minus the number of words);
- ``colon``: a colon or an acronym (a word of two or more capitals, e.g. ``BDR``) is better
  (1 with one, 0 without);
- ``vocab:W1+W2+...``: more words from the user's own vocabulary is better (how many of the
  title's words, lowercased and stripped of punctuation, are in it).

The id carries the rule on purpose: the oracle reward method (``oracle.py``) reads it from there,
the only channel every reward method has, so a third-party method could do the same.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Literal

Kind = Literal["short", "colon", "vocab"]
KINDS: tuple[Kind, ...] = typing.get_args(Kind)
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]*[A-Z][A-Z0-9]*")  # two capitals or more: BDR, GPT4
_STRIP = "()[]{}:;,.!?\"'"
_WORD = re.compile(r"^[a-z]+$")


class NoRule(ValueError):
    """A user id that encodes no rule of this suite."""


@dataclass(frozen=True)
class Rule:
    """One user's preference. ``words``: the vocabulary of a ``vocab`` rule."""

    kind: str
    words: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise NoRule(f"unknown rule {self.kind!r}; rules: {', '.join(KINDS)}")
        if (self.kind == "vocab") != bool(self.words):
            raise NoRule(f"rule {self.kind!r}: a vocabulary goes with 'vocab' and only with it")
        bad = [w for w in self.words if not _WORD.match(w)]
        if bad:
            raise NoRule(f"vocabulary word {bad[0]!r} is not a lowercase word of letters")

    @classmethod
    def parse(cls, text: str) -> Rule:
        """``short``, ``colon`` or ``vocab:W1+W2``."""
        kind, _, words = text.partition(":")
        return cls(kind, tuple(words.split("+")) if words else ())

    def __str__(self) -> str:
        return f"vocab:{'+'.join(self.words)}" if self.kind == "vocab" else self.kind

    def score(self, text: str) -> float:
        """The rule's score of a title: higher is preferred."""
        words = text.split()
        if self.kind == "short":
            return -float(len(words))
        if self.kind == "colon":
            return float(":" in text or any(_ACRONYM.fullmatch(w.strip(_STRIP)) for w in words))
        vocab = set(self.words)
        return float(sum(w.strip(_STRIP).lower() in vocab for w in words))


def user_id(rule: Rule, index: int) -> str:
    """The id of the ``index``-th user, holding the rule: ``vocab:neural+graph#2``."""
    return f"{rule}#{index}"


def rule_of(user: str) -> Rule:
    """The rule a user id holds; ``NoRule`` for an id of another suite."""
    text, sep, index = user.rpartition("#")
    if not sep or not index.isdigit():
        raise NoRule(
            f"user {user!r} encodes no rule (expected RULE#N, e.g. 'colon#1'; "
            "only the synthetic suite's users do)"
        )
    try:
        return Rule.parse(text)
    except NoRule as exc:
        raise NoRule(f"user {user!r}: {exc}") from None
