"""``profile_bm25``: a response rewarded by its BM25 score against the user's own profile outputs,
the retriever of LaMP's retrieval-augmented personalization (Salemi et al., 2023) read as a
reward.

``r_u(x, y)`` is the mean BM25 score (``bm25s``, through ``pytest_prefalign.bm25``) of the ``k``
profile outputs of ``u`` that ``y`` retrieves best, ``y`` the query: each query word counted
once, so a title gains nothing from repeating a word, and the index holds the user's outputs
with the prompt's own source document left out (``profile_reward``): the idf is the user's own
profile's. The training pairs are not read. ``k`` = 1 (the best match's score) was chosen over 3
and every output by the macro RM accuracy on the main job's training pairs (0.675, 0.605 and
0.568; ``benchmarks/rm_accuracy.py`` with ``profile_bm25.k`` set).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefalign_methods.rewards.profile_reward import ProfileRewardMethod, top_mean

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from pytest_prefalign.api import ProfileEntry


@dataclass(frozen=True)
class ProfileBM25Config:
    k: int = 1  # the reward: the mean BM25 score of the k best-matching profile outputs

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


class ProfileBM25(ProfileRewardMethod):
    name = "profile_bm25"
    Config = ProfileBM25Config

    def prepare(self, profiles: dict[str, tuple[ProfileEntry, ...]]) -> None:
        self._outputs = {user: [e.output for e in entries] for user, entries in profiles.items()}
        self._indexes: dict[tuple[str, tuple[int, ...]], Any] = {}

    def similarities(self, user: str, kept: tuple[int, ...], texts: list[str]) -> np.ndarray:
        from pytest_prefalign import bm25

        if (user, kept) not in self._indexes:
            outputs = self._outputs[user]
            self._indexes[(user, kept)] = bm25.index([outputs[i] for i in kept])
        found = bm25.scores_each(self._indexes[(user, kept)], texts, distinct=True)
        return top_mean(found, self.config.k)
