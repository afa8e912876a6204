"""Sentence vectors of all-MiniLM-L6-v2, the encoder the independent judge loads
(``judge.load_encoder``: one model per process, shared with it), for the reward methods that read
texts through it (``profile_minilm``, ``global_bt_minilm``, ``per_user_bt_minilm``): unit vectors
(mean pooling, L2 normalisation, as sentence-transformers uses the model), each text encoded
once per process and kept while the memo's budget allows, so that ARGS's candidates, which
share their prefixes from step to step and from one method to the next, are mostly encoded
once. The texts to encode are sorted by length first, so that a batch pads little.

Imported when such a method is fitted or scores, not when it is registered.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from prefalign_methods.rewards.judge import ENCODER_PACKAGE, load_encoder
from pytest_prefalign import cache, versions

MEMO_BUDGET_MB = 256  # vectors kept per process: 1.5 KB each (384 float32)

VECTORS = cache.Slot(
    "sentence vectors",
    lambda: cache.Lru[tuple[str, str], np.ndarray](MEMO_BUDGET_MB * 2**20, lambda v: v.nbytes),
)


def encoder_version() -> dict[str, str | None]:
    """The installed encoder package's version (no model loaded): part of a method's
    fingerprint."""
    return versions.library_versions(ENCODER_PACKAGE.replace("_", "-"))


def vectors(texts: Sequence[str]) -> np.ndarray:
    """``(len(texts), 384)`` float32 unit vectors; raises ``api.JudgeUnavailable`` (naming the
    package to install) where the encoder is not installed."""
    encoder = load_encoder()
    memo = cache.PROCESS[VECTORS]
    found: dict[str, np.ndarray] = {}
    for text in dict.fromkeys(texts):
        vector = memo.get((encoder.fingerprint, text))
        if vector is not None:
            found[text] = vector
    missing = sorted((t for t in dict.fromkeys(texts) if t not in found), key=len)
    if missing:
        for text, vector in zip(missing, encoder.encode(missing), strict=True):
            found[text] = vector.astype(np.float32)
            memo.put((encoder.fingerprint, text), found[text])
    if not texts:
        return np.zeros((0, encoder.model.config.hidden_size), dtype=np.float32)
    return np.stack([found[t] for t in texts])
