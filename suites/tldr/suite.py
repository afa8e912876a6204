"""The TL;DR suite: OpenAI's summarize-from-feedback comparisons, one user per labelling worker,
with the protocol LoRe uses. See docs/suites.md for the rules, options and field names."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from prefalign_suites import hf_source
from prefalign_suites.raw_records import Problems, Record
from prefalign_suites.splits import user_rng
from pytest_prefalign import storage, suite_options
from pytest_prefalign.api import DataError, Item, Pair, ProfileEntry, SuiteData
from pytest_prefalign.suite_options import AtLeast, Count

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from pytest_prefalign.runtime.lm import LM

DATASET = hf_source.HubDataset("openai/summarize_from_feedback", "comparisons")
SPLITS = {
    "train": "train",
    "valid1": "validation",
    "valid2": "validation",
    "validation": "validation",
}  # record ``split`` values -> the dataset's two splits


@dataclass(frozen=True)
class TldrOptions:
    """TL;DR's options, set in ``suite.toml``'s ``[options]`` (docs/suites.md)."""

    path: str = ""  # a local file or folder of the published JSON Lines batches
    # seen, unseen or all (LoRe's halves of the workers in both splits)
    users: Literal["seen", "unseen", "all"] = "seen"
    max_train_pairs: Annotated[int, AtLeast(1)] = 150  # training pairs per seen user (LoRe: 150)
    # training pairs per unseen user (LoRe's few-shot: 50)
    max_train_pairs_unseen: Annotated[int, AtLeast(1)] = 50
    max_test_pairs: Count = 0  # test pairs per user, the first in file order; 0 = all
    items_per_user: Count = 5  # generation items (distinct test posts) per user
    seed: Count = 0  # the user split and the draw of training pairs


@dataclass(frozen=True)
class Comparison:
    worker: str
    split: str  # train or validation
    pair_key: str  # origin:index, unique in the run
    post_id: str
    text: str  # SUBREDDIT / TITLE / POST, whitespace-normalised
    chosen: str
    rejected: str


class Tldr:
    name = "tldr"
    description = (
        "TL;DR: Reddit post summaries compared by labelling workers (OpenAI "
        "summarize-from-feedback); one user per worker, no ground-truth text"
    )
    licence = "MIT (OpenAI summarize-from-feedback); Reddit posts from the TL;DR corpus"
    attribution = (
        "Stiennon et al., Learning to summarize from human feedback, NeurIPS 2020 "
        "(github.com/openai/summarize-from-feedback)"
    )
    source = DATASET.dataset_id
    fetcher = "prefalign_suites.tldr.fetch"  # a local copy: prefalign data fetch tldr
    requires_data_dir = False  # the datasets library can find it in the Hugging Face cache
    options = TldrOptions

    def instruction(self, input: str) -> str:
        return f"Summarize the following Reddit post in one sentence.\n\n{input}\n\nTL;DR:"

    def example(self, entry: ProfileEntry) -> str:
        return f"{entry.input}\nTL;DR: {entry.output}"

    def load(
        self,
        data_dir: Path | None,
        *,
        limit: int | None,
        options: TldrOptions | Mapping[str, str],
    ) -> SuiteData:
        opts = suite_options.parse(TldrOptions, options)
        problems = Problems()
        rows, where = hf_source.rows(DATASET, path=opts.path, data_dir=data_dir, problems=problems)
        by_worker = _by_worker(rows, problems)
        seen, unseen = _lore_users(by_worker, opts.seed, problems)
        caps = {u: opts.max_train_pairs for u in seen}
        caps |= {u: opts.max_train_pairs_unseen for u in unseen}
        order = {"seen": seen, "unseen": unseen, "all": seen + unseen}[opts.users]
        data = SuiteData(
            self.name,
            where,
            {},
            [],
            provenance={
                "options": suite_options.as_strings(opts),
                "seen_users": len(seen),
                "unseen_users": len(unseen),
            },
        )
        for worker in order[:limit]:
            self._add_user(data, worker, by_worker[worker], caps[worker], opts)
        problems.report(data)
        return data

    def build_pairs(self, data: SuiteData, reference: LM, cache_dir: Path) -> None:
        """Nothing to do: the pairs are the workers' comparisons (``load`` made them)."""

    def _add_user(
        self, data: SuiteData, worker: str, comps: list[Comparison], cap: int, opts: TldrOptions
    ) -> None:
        user = f"tldr:{worker}"
        train = [c for c in comps if c.split == "train"]
        if len(train) > cap:
            picks = user_rng(opts.seed, user).choice(len(train), size=cap, replace=False)
            train = [train[i] for i in sorted(picks)]
        test = [c for c in comps if c.split == "validation"]
        test = test[: opts.max_test_pairs] if opts.max_test_pairs else test
        data.profiles[user] = [ProfileEntry(c.pair_key, c.text, c.chosen) for c in train]
        data.train_pairs += [self._pair(user, c) for c in train]
        data.test_pairs += [self._pair(user, c) for c in test]
        firsts: dict[str, Comparison] = {}  # the first comparison of each post, in order
        for c in test:
            firsts.setdefault(c.post_id, c)
        data.items += [
            Item(f"{user}/{c.post_id}", user, c.text, self.instruction(c.text), None)
            for c in list(firsts.values())[: opts.items_per_user]
        ]

    def _pair(self, user: str, c: Comparison) -> Pair:
        return Pair(f"{user}/{c.pair_key}", user, self.instruction(c.text), c.chosen, c.rejected)


def _by_worker(rows, problems: Problems) -> dict[str, list[Comparison]]:
    found: dict[str, list[Comparison]] = defaultdict(list)
    for row in rows:
        try:
            comp = comparison(row.record, row.split, row.origin)
        except DataError as exc:
            problems.bad("record:bad_comparison", exc)
            continue
        if comp is None:
            problems.drop("record:not_a_reddit_post")
        elif comp.chosen == comp.rejected:
            problems.drop("pair:identical_summaries")
        else:
            found[comp.worker].append(comp)
    return found


def comparison(rec: Record, split: str | None, origin: str) -> Comparison | None:
    """One record checked; ``None`` for a comparison of news articles (CNN/DM), not posts."""
    raw = rec.get("info")
    if not isinstance(raw, dict):
        raise rec.error("info", "expected an object")
    info = rec.child("info", raw)
    raw_split = split or rec.text("split")
    if raw_split not in SPLITS:
        raise rec.error("split", f"expected one of {', '.join(SPLITS)}, got {raw_split!r}")
    summaries = rec.listing("summaries")
    if len(summaries) != 2:
        raise rec.error("summaries", f"expected 2 summaries, got {len(summaries)}")
    texts = [rec.child(f"summaries[{n}]", s).text("text") for n, s in enumerate(summaries)]
    choice = rec.integer("choice", (0, 1))
    worker = rec.text("worker")
    if raw.get("post") is None and raw.get("article") is not None:
        return None
    post = info.text("post")
    head = [
        f"{label}: {prefix}{value}"
        for label, prefix, value in (
            ("SUBREDDIT", "r/", _optional(info, "subreddit")),
            ("TITLE", "", _optional(info, "title")),
        )
        if value
    ]
    post_id = _optional(info, "id") or storage.content_key(post)
    return Comparison(
        worker,
        SPLITS[raw_split],
        f"{origin}:{rec.index}",
        post_id,
        "\n".join([*head, f"POST: {post}"]),
        texts[choice],
        texts[1 - choice],
    )


def _optional(rec: Record, name: str) -> str:
    """A string field that may be missing or null (then ''), checked where present."""
    return rec.text(name) if rec.data.get(name) not in (None, "") else ""


def _lore_users(
    by_worker: dict[str, list[Comparison]], seed: int, problems: Problems
) -> tuple[list[str], list[str]]:
    """LoRe's users: workers with comparisons in both splits, shuffled with the seed, the first
    half seen (trained on), the second unseen (few-shot)."""
    import numpy as np

    both = sorted(
        w for w, comps in by_worker.items() if {c.split for c in comps} == {"train", "validation"}
    )
    problems.drop("user:not_in_both_splits", len(by_worker) - len(both))
    shuffled = [both[i] for i in np.random.default_rng(seed).permutation(len(both))]
    half = len(shuffled) // 2
    return shuffled[:half], shuffled[half:]
