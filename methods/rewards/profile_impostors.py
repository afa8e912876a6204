"""``profile_impostors``: a response rewarded by how much more it reads like the user's own
profile outputs than like anyone else's, the impostors method of authorship verification
(Koppel and Winter, 2014, "Determining if two documents are written by the same author", JASIST
65(1)) on character n-gram profiles (Kešelj et al., 2003, "N-gram-based author profiles for
authorship attribution", PACLING; Stamatatos, 2009, "A survey of modern authorship attribution
methods", JASIST 60(3)).

``r_u(x, y) = max_{o in P_u} cos(v(y), v(o)) - max_{o in I_u} cos(v(y), v(o))``

``v`` is a text's tf-idf vector of character ``n``-grams (case kept, the text padded with one
space each side, so a word's first and last letters count): a gram counted ``c`` times weighs
``(1 + ln c) * idf``, ``idf(g) = ln((N + 1) / (df(g) + smoothing))`` over every user's profile
outputs, each document once (co-authors share papers; a document is its ``doc_id`` and output).
``P_u`` are ``u``'s profile outputs, ``I_u`` the impostors: every other user's. The prompt's own
source document is left out of ``P_u``, of the impostors (a co-author holds the same paper) and
of the document counts (``profile_reward``). With no other user with a profile, the reward is
the first term alone; a response with no gram, 0. In [-1, 1].

What it learns from: the profiles only (the training pairs are not read; the run standardises
the rewards on them like any method's). Where ``profile_overlap`` asks whether a response uses
the person's words, this asks whether it is nearer the person than the nearest other person of
the run: a title written in the manner of somebody else scores low even where it shares the
topic's words with the user's own. The impostors are the run's users, so the reward of a text
depends on who else is in the run (``--prefalign-limit``), as the verification method's
impostor set does. ``n`` = 3 is the literature's usual character n-gram length (Stamatatos,
2009), not chosen on this project's pairs.

No torch at import; scipy and numpy are imported when the profiles are prepared.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prefalign_methods.rewards.profile_reward import ProfileRewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from pytest_prefalign.api import ProfileEntry

# the documents' weightings remembered, one per set of documents left out (a test pair leaves
# none out; each training pair its own paper): a few MB each at 40 users
WEIGHTINGS = 32


@dataclass(frozen=True)
class ProfileImpostorsConfig:
    n: int = 3  # the character n-grams' length
    smoothing: float = 0.5  # added to a gram's document count in its idf

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if not self.smoothing > 0:
            raise ValueError(f"smoothing must be > 0, got {self.smoothing}")


def grams(text: str, n: int) -> Counter[str]:
    """The character ``n``-grams of ``text`` padded with a space each side, counted."""
    padded = f" {text} "
    return Counter(padded[i : i + n] for i in range(len(padded) - n + 1))


@dataclass(frozen=True)
class Documents:
    """Every profile document once, as sublinear gram counts over one vocabulary: ``tf`` (a
    sparse documents x grams matrix of ``1 + ln c``, stored where a gram occurs), ``vocabulary``
    (gram -> column)."""

    tf: Any
    vocabulary: dict[str, int]

    @property
    def count(self) -> int:
        return int(self.tf.shape[0])


class ProfileImpostors(ProfileRewardMethod):
    name = "profile_impostors"
    Config = ProfileImpostorsConfig

    def prepare(self, profiles: dict[str, tuple[ProfileEntry, ...]]) -> None:
        """Index every profile document's grams, and which document each user's entries are."""
        index: dict[tuple[str, str], int] = {}
        counts: list[Counter[str]] = []
        self._documents_of: dict[str, list[int]] = {}
        for user, entries in profiles.items():
            at = []
            for entry in entries:
                key = (entry.doc_id, entry.output)
                if key not in index:
                    index[key] = len(counts)
                    counts.append(grams(entry.output, self.config.n))
                at.append(index[key])
            self._documents_of[user] = at
        self._doc_ids = [doc_id for doc_id, _ in index]
        # each user's impostors: every other user's documents (a shared paper among them)
        self._others = {
            user: sorted(
                {d for other, theirs in self._documents_of.items() if other != user for d in theirs}
            )
            for user in self._documents_of
        }
        self._documents = _matrices(counts)
        self._weighted: dict[frozenset[int], tuple[Any, Any]] = {}

    def similarities(self, user: str, kept: tuple[int, ...], texts: list[str]) -> np.ndarray:
        import numpy as np

        mine = self._documents_of[user]
        left = frozenset(mine[i] for i in range(len(mine)) if i not in kept)
        left_ids = {self._doc_ids[d] for d in left}
        own = sorted({mine[i] for i in kept})
        impostors = [d for d in self._others[user] if self._doc_ids[d] not in left_ids]
        cosines = self._cosines(left, texts)
        reward = cosines[:, own].max(axis=1)
        if impostors:
            reward = reward - cosines[:, impostors].max(axis=1)
        return np.asarray(reward, dtype=np.float64)

    def _cosines(self, left: frozenset[int], texts: list[str]) -> np.ndarray:
        """The cosine of each text with every document (texts x documents), under the idf of
        the documents ``left`` out removed from the counts."""
        import numpy as np

        idf, documents = self._weights(left)
        vocabulary = self._documents.vocabulary
        unseen = math.log((self._documents.count - len(left) + 1) / self.config.smoothing)
        rows, columns, values, norms = [], [], [], []
        for r, text in enumerate(texts):
            squared = 0.0
            for gram, c in grams(text, self.config.n).items():
                tf = 1 + math.log(c)
                at = vocabulary.get(gram)
                weight = tf * (idf[at] if at is not None else unseen)
                squared += weight * weight
                if at is not None:
                    rows.append(r)
                    columns.append(at)
                    values.append(weight)
            norms.append(math.sqrt(squared))
        from scipy import sparse

        found = sparse.csr_matrix((values, (rows, columns)), shape=(len(texts), len(vocabulary)))
        dots = np.asarray((found @ documents.T).todense(), dtype=np.float64)
        norm = np.array(norms)
        return np.divide(dots, norm[:, None], out=np.zeros_like(dots), where=norm[:, None] > 0)

    def _weights(self, left: frozenset[int]) -> tuple[np.ndarray, Any]:
        """The grams' idf with the documents ``left`` out of the counts, and every document's
        unit tf-idf vector under it (remembered per set left out)."""
        if left not in self._weighted:
            import numpy as np
            from scipy import sparse

            docs = self._documents
            # a gram's document count: the documents where it is stored, the left ones out
            df = docs.tf.getnnz(axis=0).astype(np.float64)
            if left:
                df -= docs.tf[sorted(left)].getnnz(axis=0)
            n = docs.count - len(left)
            idf = np.log((n + 1) / (df + self.config.smoothing))
            weighted = sparse.csr_matrix(docs.tf.multiply(idf[None, :]))
            norms = np.sqrt(np.asarray(weighted.multiply(weighted).sum(axis=1))).ravel()
            scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
            if len(self._weighted) >= WEIGHTINGS:
                self._weighted.clear()
            self._weighted[left] = (idf, sparse.csr_matrix(weighted.multiply(scale[:, None])))
        return self._weighted[left]


def _matrices(counts: list[Counter[str]]) -> Documents:
    """The documents' gram counts as ``Documents``' sparse matrices."""
    import numpy as np
    from scipy import sparse

    vocabulary: dict[str, int] = {}
    rows, columns, values = [], [], []
    for r, found in enumerate(counts):
        for gram, c in found.items():
            rows.append(r)
            columns.append(vocabulary.setdefault(gram, len(vocabulary)))
            values.append(1 + math.log(c))
    shape = (len(counts), len(vocabulary))
    tf = sparse.csr_matrix((np.array(values, dtype=np.float64), (rows, columns)), shape=shape)
    return Documents(tf, vocabulary)
