"""Pref-LaMP pairs written for the same abstract by a fixed writer model.

The writer (Gemma-3-270M base by default: not the embedded 135M model that the main job
evaluates) is shown a few papers as examples, ``Abstract:``/``Title:`` pairs, and then the
abstract of the pair's paper; it writes a title. What it is shown, two prompts a paper (the
author's own papers, and as many of one other person's, as similar to the abstract), is a
brief's (``briefs.py``).

Two designs (suite option ``negatives``):

- ``style`` (default): chosen = the writer's title from the author's own examples, rejected = the
  writer's title from the others' examples. Both sides are the same model's answer to the same
  abstract; they differ only in whose titles the writer was shown, so neither the base model nor
  a reward that knows nobody can prefer one side by construction, while a reward that knows this
  author's titles can. The author's real title stays the reference of ROUGE.
- ``written``: chosen = the author's real title, rejected = the writer's title from the others'
  examples (a human title against a model's: a reward that knows nobody can learn that contrast).

More comparisons per test paper (option ``rivals``, suite option ``writer_rivals``): a test
paper's chosen side is also paired against the titles written after the examples of the next
nearest people (the second, third, ... by the same BM25 total, each with papers none of the
earlier rivals' examples are), pair ids ``{pair_id}~{r}``. Every rival pair holds the one design
rule: the same writer, the same abstract, as many examples as similar; only whose papers they
are differs. Training pairs stay one per paper.

Length does not decide: each brief gets ``samples`` titles sampled from the writer, and the
pair takes the two candidates nearest in length (the writer's tokens; the real title's length
in ``written``), the earlier samples first among equals. A pair whose sides still differ by
more than ``length_slack`` tokens is kept and counted (provenance ``length_unmatched``).

Candidates are generated once per brief and kept in one JSON file per way of generating (the
writer's fingerprint and the generation options), keyed by a hash of the prompt; an interrupted
run resumes, and every model size sees the same pairs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefalign_suites.pref_lamp import titles
from prefalign_suites.pref_lamp.briefs import ABSTRACT_WORDS, EXAMPLE_WORDS, Brief
from prefalign_suites.pref_lamp.negatives import (
    Source,
    add_pairs,
    cached_outputs,
    design,
    same_title,
)
from pytest_prefalign import cache, storage, versions

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.api import Suite, SuiteData

WRITER = "embedded:gemma3-270m"
DESIGNS = ("style", "written")
LABELS = {
    "style": "style: {writer}'s titles from the author's own examples over another person's",
    "written": "written: the real title over {writer}'s from another person's examples",
}


@dataclass(frozen=True)
class Options:
    """How the writer is asked and how its candidates are paired."""

    design: str = "style"
    writer: str = WRITER
    shots: int = 3
    samples: int = 3
    temperature: float = 0.7
    max_new_tokens: int = 32
    batch_size: int = 48
    length_slack: int = 2  # tokens
    seed: int = 0
    # the test pairs of a paper: nearest (the one pair of candidates nearest in length) or
    # matched (every pair of an own and an other's candidate within length_slack)
    pairing: str = "nearest"
    folds: int = 1  # cross-fitting: the examples of a brief are papers of its paper's fold
    rivals: int = 1  # the rejected sides of a test paper, each after another person's examples


@dataclass(frozen=True)
class Made:
    """One brief's pairs: each pair's source (``{pair_id}#{i}-{j}`` in the matched pairing),
    sides and how many of the writer's tokens their lengths differ by; empty where no pair
    could be made."""

    pairs: tuple[tuple[Source, str, str, int], ...]


@dataclass(frozen=True)
class Written:
    """What the writer was (its name, source and fingerprint) and where its titles are cached
    (None where every brief's pairs came from a release)."""

    name: str
    source: str
    fingerprint: str
    weights: str | None = None  # its weights' and tokenizer's alone (code and dtype left out)
    cache: str | None = None


def write(
    suite: Suite,
    data: SuiteData,
    train: Sequence[Brief],
    test: Sequence[Brief],
    writer: Any,
    cache_dir: Path | None,
    options: Options,
    release: Any = None,
    taken: dict[str, Made] | None = None,
) -> None:
    """Fill the pairs with the writer's titles (cached), paired by length; the briefs a
    ``release`` (``release.Release``) holds take its pairs, and the writer writes the others
    (``writer`` may be None where the release holds them all). ``taken``: what
    ``release.taken`` gave for these briefs, where the caller has it already."""
    if taken is None:
        taken = release.taken((*train, *test)) if release is not None else {}
    todo = [b for b in (*train, *test) if b.source.pair_id not in taken]
    made = dict(taken)
    who = release.writer if release is not None else _who(writer, options)
    if todo:
        if writer is None or cache_dir is None:
            raise ValueError(
                f"{len(todo)} of the pairs' briefs are not in the release: they need the writer "
                "and a cache folder"
            )
        found, who = sides(todo, writer, cache_dir, options, tests={b.source for b in test})
        made.update(found)
    note = release.summary(taken=len(taken), written=len(todo)) if release is not None else None
    fill(suite, data, train, test, made, options, who, note)


def _who(writer: Any, options: Options, cache: str | None = None) -> Written:
    weights = getattr(writer, "weights_fingerprint", None)
    return Written(writer.name, options.writer, writer.fingerprint, weights, cache)


def sides(
    briefs: Sequence[Brief],
    writer: Any,
    cache_dir: Path,
    options: Options,
    *,
    tests: set[Source],
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, Made], Written]:
    """Each brief's pairs (by its source's pair id), from the writer's titles (cached in
    ``cache_dir``); the briefs of ``tests`` pair by ``options.pairing``, the others by the
    nearest lengths. ``progress(done, missing)``: told the prompts written (of those the cache
    lacked) before each chunk and at the end."""
    prompts = {_key(text): text for b in briefs for text in _prompts(b, options, b.source in tests)}
    key = cache.make_key(
        "written_titles",
        writer=writer.fingerprint,
        samples=options.samples,
        temperature=options.temperature,
        max_new_tokens=options.max_new_tokens,
        seed=options.seed,
        code=versions.code_version(titles),
    )
    path = cache_dir / f"written-{key.digest}.json"
    header = {"writer": writer.name, "writer_fingerprint": writer.fingerprint}

    def produce(batch: list[str]) -> list[list[str]]:
        return titles.sampled(
            writer,
            batch,
            samples=options.samples,
            temperature=options.temperature,
            max_new_tokens=options.max_new_tokens,
            batch_size=options.batch_size,
            seed=options.seed,
        )

    found, generated_now = cached_outputs(path, prompts, produce, header, progress)
    asked = storage.content_key(sorted(prompts))
    cache.note(cache.make_key("written_titles", **key.inputs, prompts=asked), hit=not generated_now)
    length = _token_counter(writer)
    made = {}
    for brief in briefs:
        pairs = _sides(brief, found, length, options, many=brief.source in tests)
        gaps = [(src, a, b, abs(length(a) - length(b))) for src, a, b in pairs]
        made[brief.source.pair_id] = Made(tuple(gaps))
    return made, _who(writer, options, str(path))


def _prompts(brief: Brief, options: Options, test: bool) -> tuple[str, ...]:
    """The prompts the writer answers for a brief: the author's own examples' (not in
    ``written``, whose chosen side is the real title), the first rival's, and on a test brief
    the further rivals' (``options.rivals``)."""
    own = (brief.own,) if options.design == "style" else ()
    more = brief.rivals[: options.rivals - 1] if test else ()
    return (*own, brief.others, *more)


def fill(
    suite: Suite,
    data: SuiteData,
    train: Sequence[Brief],
    test: Sequence[Brief],
    made: dict[str, Made],
    options: Options,
    who: Written,
    release: dict[str, Any] | None = None,
) -> None:
    """The data's pairs from each brief's ``made`` pairs (a training brief's one pair, whose
    source is the brief's; a brief without one is counted as dropped, ``pair:no_negative``),
    and the provenance: the design, the writer, its options,
    and ``release``, what the pairs' release says of itself (``Release.summary``)."""
    negative: dict[str, str | None] = {}
    chosen: dict[str, str] = {}
    sources: dict[str, list[Source]] = {"train": [], "test": []}
    gaps = []
    for split, briefs in (("train", train), ("test", test)):
        for brief in briefs:
            pairs = made[brief.source.pair_id].pairs
            if split == "train":  # one pair a paper (a release may hold a test brief's more)
                pairs = tuple(pair for pair in pairs if pair[0] == brief.source)
            if not pairs:  # counted as dropped by add_pairs
                sources[split].append(brief.source)
                negative[brief.source.pair_id] = None
            for src, preferred, rejected, gap in pairs:
                sources[split].append(src)
                chosen[src.pair_id], negative[src.pair_id] = preferred, rejected
                gaps.append(gap)
    add_pairs(suite, data, sources["train"], sources["test"], negative, chosen=chosen)
    unmatched = sum(gap > options.length_slack for gap in gaps)
    data.provenance.update(
        {
            "negatives": options.design,
            "design": design(
                LABELS[options.design].format(writer=who.name), who.fingerprint, weights=who.weights
            ),
            "writer": who.name,
            "writer_source": who.source,
            "writer_fingerprint": who.fingerprint,
            "writer_options": {
                "shots": options.shots,
                "samples": options.samples,
                "temperature": options.temperature,
                "max_new_tokens": options.max_new_tokens,
                "seed": options.seed,
                "example_words": EXAMPLE_WORDS,
                "abstract_words": ABSTRACT_WORDS,
            },
            "length_slack_tokens": options.length_slack,
            "pairing": options.pairing,
            **({"rivals": options.rivals} if options.rivals > 1 else {}),
            "length_unmatched": unmatched,
        }
    )
    if who.cache:
        data.provenance["written_cache"] = who.cache
    if release is not None:
        data.provenance["pairs_release"] = release


def _key(prompt_text: str) -> str:
    return hashlib.sha256(prompt_text.encode("utf-8")).hexdigest()[:20]


def _sides(
    brief: Brief, found: dict[str, list[str]], length: Any, options: Options, *, many: bool
) -> list[tuple[Source, str, str]]:
    """The pairs of one brief, each with its source: the candidates nearest in length (one
    pair), or with ``many`` and the ``matched`` pairing every pair of an own and an other's
    candidate within the length slack, each its own pair ``{pair_id}#{i}-{j}`` (the candidates'
    positions); where none is within the slack, the nearest. With ``many`` and ``rivals`` > 1,
    also the nearest pair against each further rival, ``{pair_id}~{r}``. Empty where no pair
    can be made (no candidate, or every candidate the same title)."""
    if many and options.rivals > 1:
        pairs = _one_pair(brief, found, length, options)
        for r in range(1, min(options.rivals, len(brief.rivals) + 1)):
            source = replace(brief.source, pair_id=f"{brief.source.pair_id}~{r}")
            rival = replace(brief.rival(r), source=source)
            pairs += _one_pair(rival, found, length, options)
        return pairs
    if many and options.pairing == "matched":
        own, theirs = _candidates(brief, found, options)
        within = [
            (replace(brief.source, pair_id=f"{brief.source.pair_id}#{i}-{j}"), a, b)
            for i, a in enumerate(own)
            for j, b in enumerate(theirs)
            if not same_title(a, b) and abs(length(a) - length(b)) <= options.length_slack
        ]
        if within:
            return within
    return _one_pair(brief, found, length, options)


def _candidates(
    brief: Brief, found: dict[str, list[str]], options: Options
) -> tuple[list[str], list[str]]:
    """The brief's candidates for each side: the author's own examples' titles (the real title
    in ``written``) and the others'."""
    theirs = _answers(found[_key(brief.others)], brief)
    if options.design == "written":
        return [brief.source.title], theirs
    return _answers(found[_key(brief.own)], brief), theirs


def _one_pair(
    brief: Brief, found: dict[str, list[str]], length: Any, options: Options
) -> list[tuple[Source, str, str]]:
    """The brief's one pair: its candidates nearest in length (none where no pair can be
    made)."""
    pick = _nearest(*_candidates(brief, found, options), length)
    return [(brief.source, *pick)] if pick else []


def _answers(texts: Sequence[str], brief: Brief) -> list[str]:
    """The candidates that are a title: not empty, not a copy of an example shown, and not the
    author's real title; each once, in order."""
    kept: list[str] = []
    for text in texts:
        copy = any(same_title(text, shown) for shown in (*brief.shown, brief.source.title))
        if text and not copy and not any(same_title(text, k) for k in kept):
            kept.append(text)
    return kept


def _nearest(left: Sequence[str], right: Sequence[str], length: Any) -> tuple[str, str] | None:
    """The (left, right) candidates nearest in length and not the same title; among equals,
    the earliest."""
    best: tuple[int, int, str, str] | None = None
    for i, a in enumerate(left):
        for j, b in enumerate(right):
            if same_title(a, b):
                continue
            score = (abs(length(a) - length(b)), i + j)
            if best is None or score < best[:2]:
                best = (*score, a, b)
    return (best[2], best[3]) if best else None


def _token_counter(writer: Any) -> Any:
    """A title's length in the writer's tokens (memoised)."""
    seen: dict[str, int] = {}

    def count(text: str) -> int:
        if text not in seen:
            seen[text] = len(writer.tokenizer(text, add_special_tokens=False)["input_ids"])
        return seen[text]

    return count
