"""``profile_overlap``: a response rewarded by the idf-weighted share of its words that occur in
the user's own profile outputs, a bag-of-words reading of LaMP's profile retrieval (Salemi et
al., 2023).

``r_u(x, y) = sum_{w in W(y) & V_u} idf(w) / sum_{w in W(y)} idf(w)``, ``W(y)`` the distinct
words of ``y`` (``pytest_prefalign.bm25.tokens``: lower case, English stop words out), ``V_u``
the words of ``u``'s profile outputs, ``idf(w) = log((N + 1) / (df(w) + smoothing))`` over every
user's profile outputs, each document once (co-authors share papers; a document is its
``doc_id`` and output). The prompt's own source document is left out of both ``V_u`` and the
document counts (``profile_reward``). A response with no word counted gets 0. In [0, 1]:
whatever its length, a title that says only the person's words gets 1. The training pairs are
not read.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from prefalign_methods.rewards.profile_reward import ProfileRewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from pytest_prefalign.api import ProfileEntry


@dataclass(frozen=True)
class ProfileOverlapConfig:
    smoothing: float = 0.5  # added to a word's document count in its idf

    def __post_init__(self) -> None:
        if not self.smoothing > 0:
            raise ValueError(f"smoothing must be > 0, got {self.smoothing}")


class ProfileOverlap(ProfileRewardMethod):
    name = "profile_overlap"
    Config = ProfileOverlapConfig

    def prepare(self, profiles: dict[str, tuple[ProfileEntry, ...]]) -> None:
        from pytest_prefalign import bm25

        every = [(user, e) for user, entries in profiles.items() for e in entries]
        words = [frozenset(w) for w in bm25.tokens([e.output for _, e in every])]
        self._entries: dict[str, list[tuple[tuple[str, str], frozenset[str]]]] = {}
        documents: dict[tuple[str, str], frozenset[str]] = {}
        for (user, entry), found in zip(every, words, strict=True):
            document = (entry.doc_id, entry.output)
            documents[document] = found
            self._entries.setdefault(user, []).append((document, found))
        self._df = Counter(w for found in documents.values() for w in found)
        self._n = len(documents)

    def similarities(self, user: str, kept: tuple[int, ...], texts: list[str]) -> np.ndarray:
        import numpy as np

        from pytest_prefalign import bm25

        entries = self._entries[user]
        vocabulary = frozenset().union(*(entries[i][1] for i in kept))
        # the left-out documents leave the counts too, each once
        left = {entries[i][0]: entries[i][1] for i in range(len(entries)) if i not in kept}
        removed = Counter(w for found in left.values() for w in found)
        n = self._n - len(left)
        smoothing = self.config.smoothing

        def idf(word: str) -> float:
            return math.log((n + 1) / (self._df[word] - removed[word] + smoothing))

        shares = []
        for found in bm25.tokens(texts):
            distinct = set(found)
            total = sum(idf(w) for w in distinct)
            shares.append(sum(idf(w) for w in distinct & vocabulary) / total if total else 0.0)
        return np.array(shares)
