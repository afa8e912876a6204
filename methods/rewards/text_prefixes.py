"""A response's prefixes as texts, one per token of ``LM.response_ids`` (the final ``eos_id``
included): what a reward method that reads texts, not hidden states, scores for ``prefix_rewards``.

Prefix ``t`` is the decoded text of the response's first ``t + 1`` tokens, decoded as ARGS's
general path decodes its candidates (``args_rule.text_rewards``: ``tokenizer.decode`` of the
token ids, nothing skipped), so that a candidate's text and the same prefix of a response are
one text, scored once by a method that remembers its texts. The last prefix, at ``eos_id``, is
the response itself: its reward is ``score``'s.

No torch and no numpy: the tokenizer decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM


def prefix_texts(lm: LM, responses: Sequence[str]) -> list[list[str]]:
    """For each response, the texts of its prefixes: as many as ``lm.response_ids(response)``
    (its tokens and ``eos_id``), the last one the response itself."""
    found = []
    for response in responses:
        ids = lm.response_ids(response)[:-1]  # the tokens before eos_id
        texts = lm.tokenizer.batch_decode([ids[: t + 1] for t in range(len(ids))]) if ids else []
        found.append([*texts, response])
    return found
