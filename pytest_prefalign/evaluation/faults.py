"""The faults of a (suite, size)'s data, named once: the records its loader dropped or altered
(``SuiteData.faults``) and the texts longer than the model's window (``runtime/window.py``),
which the model reads cut. All of them go in every result's ``data["faults"]`` (the run file);
the first ``SHOWN``, with the count of the rest, in one warning in pytest's warnings summary.

A text longer than the window is named by the record that holds it (an item's ``prompt`` or
``reference``, a pair's ``prompt``, ``chosen`` or ``rejected``, by the item or pair id) in the
suite's data source; its rule is ``context:prompt`` or ``context:response``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pytest_prefalign import cache, versions
from pytest_prefalign.api import describe_fault, fault
from pytest_prefalign.errors import PrefalignWarning
from pytest_prefalign.runtime.window import CHARS_PER_TOKEN

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import SuiteData
    from pytest_prefalign.runtime.lm import LM

SHOWN = 5  # faults shown in the warning; the run file has them all
SLACK = 2  # tokens a tokenizer may add to a text beyond one per byte (a leading space mark)
# the faults of a (suite, size), computed and announced once
KEPT = cache.Slot("faults of the data with the model", dict[str, list[dict[str, Any]]])


def of_group(
    group: cache.Scope,
    suite: str,
    size: str,
    data: SuiteData,
    lm: LM,
    *,
    disk: cache.Disk,
    data_key: str,
) -> list[Any]:
    """The faults of the (suite, size): the data's own and the texts the model reads cut
    (``cached_oversize``, from the disk cache where they were counted before); the first time
    it is asked, one warning names them."""
    kept = group[KEPT]
    if "faults" not in kept:
        cut = cached_oversize(disk, data, data_key, lm)
        found = [*data.faults, *cut]
        total = int(data.provenance.get("faults_total", len(data.faults))) + len(cut)
        kept["faults"] = found
        if found:
            text = message(suite, size, found, total)
            warnings.warn_explicit(PrefalignWarning(text), PrefalignWarning, "prefalign", 0)
    return kept["faults"]


def message(suite: str, size: str, faults: list[dict[str, Any]], total: int) -> str:
    """The warning: how many records were dropped or altered, the first ``SHOWN`` of them,
    the count of the rest and where they all are."""
    lines = [
        f"suite {suite} ({size}): {total} record(s) of the data dropped or altered for a "
        "fault; all are in the run file (data.faults of each result), and "
        "`prefalign data --data DIR` lists the data's own:"
    ]
    lines += [f"  {describe_fault(f)}" for f in faults[:SHOWN]]
    if total > SHOWN:
        lines.append(f"  ... and {total - SHOWN} more")
    return "\n".join(lines)


def cached_oversize(
    disk: cache.Disk, data: SuiteData, data_key: str, lm: LM
) -> list[dict[str, Any]]:
    """``oversize``, kept on disk under the model's fingerprint, its label, the data (its
    source and ``data_key``, the fingerprint of its records) and this code: counting needs the
    tokenizer, which a rerun served from the cache does not load. Not in the test's ledger of
    cached values: the faults are the data's description, written whole in each result."""
    key = cache.make_key(
        "faults",
        model=lm.fingerprint,
        label=lm.label,
        source=data.source,
        data=data_key,
        code=versions.code_version(sys.modules[__name__]),
    )
    with cache.recording():  # kept out of the test's ledger
        return disk.json(key, lambda: oversize(data, lm), valid=_valid_faults)


def _valid_faults(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(f, dict) for f in value)


def oversize(data: SuiteData, lm: LM) -> list[dict[str, Any]]:
    """A fault for each text of the data's items and pairs longer than the model reads."""
    window, memo = lm.window, {}
    limits = {"prompt": window.prompt, "response": window.response}
    overhead = len(lm.prompt_ids("")) + SLACK  # the chat template's own tokens, at most
    out = []
    for ident, name, kind, text in _texts(data):
        if (kind, text) not in memo:
            room = limits[kind] - (overhead if kind == "prompt" else SLACK + 1)
            memo[(kind, text)] = None if len(text.encode()) <= room else _count(lm, kind, text)
        count = memo[(kind, text)]
        if count is not None and count[0] > limits[kind]:
            n, capped = count
            reason = (
                f"{n:,}{'+' if capped else ''} tokens, more than the {limits[kind]:,} a {kind} "
                f"of model {lm.label} may have (context {window.context:,}): "
                + ("its middle is cut" if kind == "prompt" else "its end is cut")
            )
            out.append(fault(data.source, None, ident, name, reason, f"context:{kind}"))
    return out


def _texts(data: SuiteData) -> Iterator[tuple[str, str, str, str]]:
    """``(id, field, kind, text)`` for every text a model reads as a prompt or response."""
    for item in data.items:
        yield item.item_id, "prompt", "prompt", item.prompt
        if item.reference is not None:
            yield item.item_id, "reference", "response", item.reference
    for pair in (*data.test_pairs, *data.train_pairs):
        yield pair.pair_id, "prompt", "prompt", pair.prompt
        yield pair.pair_id, "chosen", "response", pair.chosen
        yield pair.pair_id, "rejected", "response", pair.rejected


def _count(lm: LM, kind: str, text: str) -> tuple[int, bool]:
    """The text's tokens as the model reads it (rendered, for a prompt), counted on at most
    ``CHARS_PER_TOKEN`` characters a token of the context (``True``: the text had more)."""
    most = CHARS_PER_TOKEN * lm.window.context
    capped = len(text) > most
    text = text[:most]
    if kind == "prompt":
        rendered = lm.render(text)
        ids = lm.tokenizer(rendered, add_special_tokens=not lm.has_chat_template)["input_ids"]
        return len(ids), capped
    return len(lm.tokenizer(text, add_special_tokens=False)["input_ids"]) + 1, capped
