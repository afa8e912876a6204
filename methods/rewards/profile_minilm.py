"""``profile_minilm``: a response rewarded by the cosine similarity of its all-MiniLM-L6-v2
sentence vector to those of the user's own profile outputs, LaMP's profile retrieval
(Salemi et al., 2023) with a dense retriever in place of BM25.

``r_u(x, y)`` is the mean cosine of ``e(y)`` with the ``k`` most similar of ``e(o)`` over the
outputs ``o`` of ``u``'s profile, the prompt's own source document left out
(``profile_reward``); ``e`` is the encoder's unit vector (``sentence_vectors``, the model the
independent judge loads: so this method and the judge share their features, docs/plugins.md).
The training pairs are not read. Its default row is best-of-N (``default_decoder``): under
ARGS every candidate's text is an encoder pass. ``k`` = 1 (the nearest output) was chosen over 3
and every output by the macro RM accuracy on the main job's training pairs (0.707, 0.668 and
0.580; ``benchmarks/rm_accuracy.py`` with ``profile_minilm.k`` set).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from prefalign_methods.rewards.profile_reward import ProfileRewardMethod, top_mean

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from pytest_prefalign.api import ProfileEntry


@dataclass(frozen=True)
class ProfileMiniLMConfig:
    k: int = 1  # the reward: the mean cosine of the k most similar profile outputs

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"k must be >= 1, got {self.k}")


class ProfileMiniLM(ProfileRewardMethod):
    name = "profile_minilm"
    Config = ProfileMiniLMConfig
    # the default row, as the MiniLM heads' (minilm_bt): under ARGS each candidate's text is
    # an encoder pass; args[profile_minilm] runs when named
    default_decoder: ClassVar[str] = "bon"

    def fingerprint(self) -> str:
        from prefalign_methods.rewards.sentence_vectors import encoder_version

        return f"{super().fingerprint()}{json.dumps(encoder_version(), sort_keys=True)}"

    def prepare(self, profiles: dict[str, tuple[ProfileEntry, ...]]) -> None:
        from prefalign_methods.rewards.sentence_vectors import vectors

        outputs = [e.output for entries in profiles.values() for e in entries]
        found = iter(vectors(outputs))
        self._vectors = {user: [next(found) for _ in entries] for user, entries in profiles.items()}

    def ahead(self, texts: list[str]) -> None:
        from prefalign_methods.rewards.sentence_vectors import vectors

        vectors(texts)  # encoded in one go, kept in the memo that ``similarities`` reads

    def similarities(self, user: str, kept: tuple[int, ...], texts: list[str]) -> np.ndarray:
        import numpy as np

        from prefalign_methods.rewards.sentence_vectors import vectors

        profile = np.stack([self._vectors[user][i] for i in kept]).astype(np.float64)
        cosines = vectors(texts).astype(np.float64) @ profile.T
        return top_mean(cosines, self.config.k)
