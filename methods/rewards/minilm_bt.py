"""``global_bt_minilm`` and ``per_user_bt_minilm``: the Bradley-Terry heads of ``global_bt`` and
``per_user_bt`` on a second frozen backbone, the all-MiniLM-L6-v2 sentence vector of the response
(``sentence_vectors``), in place of the base LM's final hidden state.

The heads, their penalties, their training (L-BFGS on the standardised features of the training
pairs) and their cache are the LM-state methods' own (``bt_heads.HeadRewardMethod``,
``heads.GlobalHead``, ``heads.PerUserHeads``): the variants differ from them only in what they
see, a 384-dimensional unit vector of the response's text alone (not the prompt, and not the
policy model's reading of it). So they declare ``"prefix"`` and not ``"hidden"``: under ARGS a
candidate's reward comes from the encoder's vector of its text (``text_prefixes``), on the
decoder's general path, an encoder pass per candidate; their default row is best-of-N
(``default_decoder``), which encodes whole samples only. The independent judge reads the same
encoder (docs/plugins.md).

No torch at import, as the LM-state methods.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from prefalign_methods.rewards.bt_heads import HeadRewardMethod
from prefalign_methods.rewards.global_bt import GlobalBT
from prefalign_methods.rewards.per_user_bt import PerUserBT
from pytest_prefalign.api import Batch

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

    from pytest_prefalign.runtime.lm import LM


class SentenceHeads(HeadRewardMethod):
    """A ``HeadRewardMethod`` whose features are the response's MiniLM sentence vector."""

    capabilities: ClassVar[frozenset[str]] = frozenset({"prefix"})
    # the default row: under ARGS every candidate of every step is a text to encode (ten a
    # row a step), which costs minutes a row on a 2-core CPU (docs/plugins.md); best-of-N
    # scores whole samples. args[...] runs when named
    default_decoder: ClassVar[str] = "bon"

    def __init__(self, config: Any | None = None) -> None:
        super().__init__(config)
        self._prefix_memo: dict[tuple[str, tuple[int, ...]], str] = {}  # text_prefixes.Memo

    def fingerprint(self) -> str:
        from prefalign_methods.rewards.sentence_vectors import encoder_version

        return f"{super().fingerprint()}{json.dumps(encoder_version(), sort_keys=True)}"

    def features(self, lm: LM, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """``(N, 384)`` float32: each response's sentence vector (the prompts are not read)."""
        import torch

        from prefalign_methods.rewards.sentence_vectors import vectors

        return torch.from_numpy(vectors(responses))

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """The reward of the text of every prefix of each response (``text_prefixes``), the
        last one (at ``eos_id``) the response's own: ``score``'s."""
        from prefalign_methods.rewards.text_prefixes import prefix_texts

        texts = prefix_texts(lm, batch.responses, self._prefix_memo)
        users = [u for u, t in zip(batch.users, texts, strict=True) for _ in t]
        flat = self._rewards(users, self.features(lm, [], [x for t in texts for x in t]))
        values = flat.cpu().numpy()
        found, start = [], 0
        for t in texts:
            found.append(values[start : start + len(t)])
            start += len(t)
        return found


class GlobalBTMiniLM(SentenceHeads, GlobalBT):
    name = "global_bt_minilm"


class PerUserBTMiniLM(SentenceHeads, PerUserBT):
    name = "per_user_bt_minilm"
