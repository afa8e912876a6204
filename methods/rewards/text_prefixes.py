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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

MEMO_TEXTS = 500_000  # prefix texts a memo keeps, by the model and their token ids

Memo = dict[tuple[str, tuple[int, ...]], str]


def prefix_texts(lm: LM, responses: Sequence[str], memo: Memo | None = None) -> list[list[str]]:
    """For each response, the texts of its prefixes: as many as ``lm.response_ids(response)``
    (its tokens and ``eos_id``), the last one the response itself. ``memo``: the texts of
    earlier calls by (model, token ids), kept up to ``MEMO_TEXTS``: ARGS's candidates extend
    the prefixes of the step before, so all but a candidate's last prefix are known there."""
    memo = {} if memo is None else memo
    owner = lm.fingerprint
    found, missing = [], {}
    for response, ids in zip(responses, response_tokens(lm, responses), strict=True):
        keys = [(owner, ids[: t + 1]) for t in range(len(ids))]
        missing.update((k, None) for k in keys if k not in memo)
        found.append((keys, response))
    if len(memo) + len(missing) > MEMO_TEXTS:
        memo.clear()
        missing = {k: None for keys, _ in found for k in keys}
    memo.update(zip(missing, decode_all(lm.tokenizer, [k[1] for k in missing]), strict=True))
    return [[*(memo[k] for k in keys), response] for keys, response in found]


def response_tokens(lm: LM, responses: Sequence[str]) -> list[tuple[int, ...]]:
    """``lm.response_ids(response)`` without its ``eos_id``, for each response: the responses
    the window does not cut (``window.cut_text_end`` keeps the text, and its tokens fit) are
    tokenized in one call, as ``response_ids`` tokenizes one; any other through
    ``response_ids``, which cuts it and says so."""
    from pytest_prefalign.runtime.window import CHARS_PER_TOKEN

    limit = lm.window.response - 1
    short = [r for r in dict.fromkeys(responses) if len(r) <= CHARS_PER_TOKEN * limit]
    encoded = lm.tokenizer(short, add_special_tokens=False)["input_ids"] if short else []
    known = {r: tuple(ids) for r, ids in zip(short, encoded, strict=True) if len(ids) <= limit}
    return [known[r] if r in known else tuple(lm.response_ids(r)[:-1]) for r in responses]


def decode_all(tokenizer: Any, sequences: list[tuple[int, ...]]) -> list[str]:
    """``tokenizer.decode`` of each token sequence, nothing skipped, in one call: the fast
    tokenizer's own batch decoding where the tokenizer does nothing after it (no clean-up of
    spaces), which skips the Python layer's per-call conversions; ``batch_decode`` otherwise."""
    if not sequences:
        return []
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and getattr(tokenizer, "clean_up_tokenization_spaces", True) is False:
        return list(backend.decode_batch([list(s) for s in sequences], skip_special_tokens=False))
    return list(tokenizer.batch_decode([list(s) for s in sequences]))
