"""The rejected side of Pref-LaMP pairs: a title that is not the author's own.

- ``generated``: the reference LM's zero-shot greedy title for the same instruction (the first
  design; when the reference is the evaluated model, policy accuracy measures distance from its
  own greedy output, and the summary says so).
  Every model size sees the same pairs because the reference is fixed. Titles are generated once
  per paper and cached in one JSON file per reference fingerprint, keyed by paper id and a hash
  of the instruction; the file is rewritten after every batch, under a lock shared by
  pytest-xdist workers, so an interrupted run resumes where it stopped.
- ``other_author`` (default): the title of a similar paper (BM25 over abstracts) that shares no
  author with the paper and is no test item of the run, and whose title is as long as the
  real one give or take ``length_slack`` words: neither side is a model's output, and length
  cannot decide. Needs no model, so every size sees the same pairs.

A pair whose negative is missing or equals the real title (case-insensitively, whitespace
normalised) is skipped and counted in ``data.dropped``.
"""

from __future__ import annotations

import functools
import hashlib
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefalign_suites.pref_lamp.titles import clean_title
from prefalign_suites.raw_records import Problems, normalise_ws
from pytest_prefalign import bm25, cache, storage, versions
from pytest_prefalign.api import Pair

if TYPE_CHECKING:  # pragma: no cover
    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
    from pytest_prefalign.api import Suite, SuiteData

CHUNK = 64  # prompts generated between two writes of the cache file
TURN = 0.2  # seconds between two chunks without the lock: longer than filelock's polling
CANDIDATES = 50  # BM25 neighbours tried before ranking the whole pool


@dataclass(frozen=True)
class Source:
    """What a pair is made from: the user's paper with its real title."""

    pair_id: str
    user: str
    paper_id: str
    abstract: str
    title: str


def sources(data: SuiteData, max_train: int) -> tuple[list[Source], list[Source]]:
    """Training sources from the profiles (the last ``max_train`` per user; 0 = all), test
    sources from the generation items."""
    train = [
        Source(f"{user}/{e.doc_id}", user, e.doc_id, e.input, e.output)
        for user, entries in data.profiles.items()
        for e in (entries[-max_train:] if max_train else entries)
    ]
    test = [
        Source(
            item.item_id,
            item.user,
            item.item_id[len(item.user) + 1 :],
            item.input,
            item.reference or "",
        )
        for item in data.items
    ]
    return train, test


def add_pairs(
    suite: Suite,
    data: SuiteData,
    train: Sequence[Source],
    test: Sequence[Source],
    negative: dict[str, str | None],
    chosen: dict[str, str] | None = None,
) -> None:
    """Pairs from sources and their negatives (by pair id); the chosen side is the real title
    unless ``chosen`` gives another (the writer's, in ``writer.py``). Skipped pairs are
    counted."""
    problems = Problems()
    data.train_pairs = list(_pairs(suite, train, negative, chosen or {}, problems))
    data.test_pairs = list(_pairs(suite, test, negative, chosen or {}, problems))
    problems.report(data)


def _pairs(
    suite: Suite,
    srcs: Iterable[Source],
    negative: dict[str, str | None],
    chosen: dict[str, str],
    problems: Problems,
) -> Iterator[Pair]:
    for src in srcs:
        rejected = negative.get(src.pair_id)
        preferred = chosen.get(src.pair_id, src.title)
        if not rejected:
            problems.drop("pair:no_negative")
        elif same_title(rejected, preferred):
            problems.drop("pair:negative_equals_real")
        else:
            prompt = suite.instruction(src.abstract)
            yield Pair(src.pair_id, src.user, prompt, preferred, rejected)


def design(
    label: str, writer_fingerprint: str | None, note: str = "", *, weights: str | None = None
) -> dict[str, Any]:
    """The pairs' design as the leaderboard reads it from the provenance (``design``): a
    label, a note, and the fingerprint of the model that wrote a side (None: no model did),
    with its weights' own where known (``writer_weights``: released pairs were written by
    another version of the code, so only the weights tell whether the evaluated model wrote
    them)."""
    found = {"label": label, "note": note, "writer_fingerprint": writer_fingerprint}
    if weights is not None:
        found["writer_weights"] = weights
    return found


def same_title(a: str, b: str) -> bool:
    return _title_key(a) == _title_key(b)


@functools.lru_cache(maxsize=1 << 16)
def _title_key(title: str) -> str:
    """A title as ``same_title`` compares it, once per title: loading the suite compares
    each paper's title with each query's (277,505 comparisons at 8 users, 4.8 of the
    10.6 s of its load when each normalised both sides every time)."""
    return normalise_ws(title).casefold()


# -- generated -----------------------------------------------------------------------------------


def generated(
    suite: Suite,
    data: SuiteData,
    reference: Any,
    cache_dir: Path,
    *,
    max_train: int,
    max_new_tokens: int,
    batch_size: int,
) -> None:
    """Fill the pairs with the reference LM's titles (cached) as negatives."""
    train, test = sources(data, max_train)
    keys = {src.pair_id: _cache_key(src, suite) for src in (*train, *test)}
    prompts = {_cache_key(src, suite): suite.instruction(src.abstract) for src in (*train, *test)}
    # one file per way of generating: the titles in it are keyed by paper and instruction
    key = cache.make_key(
        "negatives",
        reference=reference.fingerprint,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        code=versions.code_version(cached_generations),
    )
    path = cache_dir / f"titles-{key.digest}.json"
    titles, generated_now = cached_generations(
        reference, prompts, path, max_new_tokens=max_new_tokens, batch_size=batch_size
    )
    papers = storage.content_key(sorted(prompts.items()))
    cache.note(cache.make_key("negatives", **key.inputs, papers=papers), hit=not generated_now)
    add_pairs(suite, data, train, test, {pid: titles.get(key) for pid, key in keys.items()})
    data.provenance.update(
        {
            "negatives": "generated",
            "design": design(
                f"generated: {reference.name}'s zero-shot titles as the rejected side",
                reference.fingerprint,
            ),
            "reference_model": reference.name,
            "reference_fingerprint": reference.fingerprint,
            "negatives_cache": str(path),
        }
    )


def _cache_key(src: Source, suite: Suite) -> str:
    digest = hashlib.sha256(suite.instruction(src.abstract).encode("utf-8")).hexdigest()[:16]
    return f"{src.paper_id}:{digest}"


def cached_generations(
    reference: Any, prompts: dict[str, str], path: Path, *, max_new_tokens: int, batch_size: int
) -> tuple[dict[str, str], int]:
    """Cleaned greedy titles for every key of ``prompts``, and how many were generated now."""

    def produce(batch: list[str]) -> list[str]:
        outputs = reference.generate(batch, max_new_tokens=max_new_tokens, batch_size=batch_size)
        return [clean_title(out[0]) for out in outputs]

    header = {
        "reference_model": reference.name,
        "reference_fingerprint": reference.fingerprint,
        "max_new_tokens": max_new_tokens,
    }
    return cached_outputs(path, prompts, produce, header)


def cached_outputs(
    path: Path,
    prompts: dict[str, str],
    produce: Any,
    header: dict[str, Any],
    progress: Any = None,
) -> tuple[dict[str, Any], int]:
    """``produce``'s output for every key of ``prompts`` (a list of prompts in, one output
    each out), and how many were produced now; produces only what the cache file lacks,
    ``CHUNK`` prompts at a time, rewriting the file after each. The file's lock is held for
    one chunk at a time, and what is missing is read again under it before each: processes
    that need the same outputs (xdist workers, the folds of a cross-fitted suite run side by
    side) take turns by chunk, none produces an output twice, and none waits on the lock for
    longer than one chunk takes. ``header`` is written beside the outputs (what made them);
    ``progress(done, missing)`` is told before each chunk and at the end."""
    produced = 0
    first: int | None = None  # what was missing when this call began
    while True:
        with storage.locked(path):
            outputs = _read_outputs(path)
            missing = [key for key in prompts if key not in outputs]
            first = len(missing) if first is None else first
            if progress is not None and first:
                progress(max(0, first - len(missing)), first)
            if not missing:
                break
            chunk = missing[:CHUNK]
            made = produce([prompts[k] for k in chunk])
            outputs.update(zip(chunk, made, strict=True))
            storage.atomic_write_json(path, {**header, "titles": outputs})
            produced += len(chunk)
        time.sleep(TURN)  # a process waiting on the lock (it polls) takes the next chunk
    return {key: outputs[key] for key in prompts}, produced


def _read_outputs(path: Path) -> dict[str, Any]:
    """The cached outputs; a file that cannot be read is started afresh (it is only a cache)."""
    if not path.exists():
        return {}
    try:
        doc = storage.read_json(path)
    except (OSError, ValueError) as exc:  # JSON and UTF-8 errors are ValueErrors
        cache.discard(path, exc)
        return {}
    titles = doc.get("titles") if isinstance(doc, dict) else None
    return dict(titles) if isinstance(titles, dict) else {}


# -- other author --------------------------------------------------------------------------------


def other_author(
    suite: Suite,
    data: SuiteData,
    users: dict[str, UserPapers],
    pool: Sequence[Paper],
    *,
    held_out: frozenset[str],
    max_train: int,
    length_slack: int | None = 1,
) -> None:
    """Fill the pairs with the title of a similar paper by somebody else as negatives: the
    best-ranked by BM25 over abstracts whose title has as many words as the real one, give or
    take ``length_slack`` (None: any length), so that length cannot tell the two apart.
    ``held_out``: the keys of the test papers no negative may be (every user's the rules saw)."""
    candidates = [p for p in pool if p.key not in held_out]
    retriever = bm25.index([p.abstract for p in candidates])
    train = [(u, p) for u, up in users.items() for p in _last(up.profile, max_train)]
    test = [(u, p) for u, up in users.items() for p in up.tests]
    both = [*train, *test]
    nearest = _nearest_other(retriever, candidates, [paper for _, paper in both], length_slack)
    found = {f"{u}/{p.paper_id}": neg for (u, p), neg in zip(both, nearest, strict=True)}
    add_pairs(
        suite, data, [paper_source(*t) for t in train], [paper_source(*t) for t in test], found
    )
    data.provenance.update(
        {
            "negatives": "other_author",
            "design": design("other_author: a similar paper's title by somebody else", None),
            "negatives_pool": len(candidates),
            "length_slack": length_slack,
        }
    )


def paper_source(user: str, paper: Paper) -> Source:
    """The pair source of one user's paper (its pair id ``{user}/{paper id}``)."""
    return Source(f"{user}/{paper.paper_id}", user, paper.paper_id, paper.abstract, paper.title)


def _last(papers: list[Paper], n: int) -> list[Paper]:
    return papers[-n:] if n else papers


def _nearest_other(
    retriever: Any, candidates: Sequence[Paper], queries: Sequence[Paper], slack: int | None
) -> list[str | None]:
    """For each query paper, the title of the best-ranked candidate sharing none of its
    people and not its title (and within ``slack`` words of its length); the top
    ``CANDIDATES`` first, the whole ranking if need be. Equal scores rank in the pool's order
    (``bm25.ranking``), so every machine makes the same pairs."""
    if not candidates:
        return [None] * len(queries)
    found: list[str | None] = []
    for query in queries:
        scores = bm25.scores(retriever, query.abstract)
        top = bm25.order(scores, k=CANDIDATES)
        best = _first_other(query, (candidates[i] for i in top), slack)
        if best is None and len(top) < len(candidates):
            best = _first_other(query, (candidates[i] for i in bm25.order(scores)), slack)
        found.append(best)
    return found


def _first_other(query: Paper, ranked: Iterable[Paper], slack: int | None) -> str | None:
    """The first eligible candidate within ``slack`` words of the query's title length; if
    none is, the eligible one nearest in length (the better-ranked among equals)."""
    eligible = [
        c.title
        for c in ranked
        if not (c.people & query.people) and not same_title(c.title, query.title)
    ]
    if not eligible or slack is None:
        return eligible[0] if eligible else None
    words = len(query.title.split())
    gap = [abs(len(t.split()) - words) for t in eligible]
    within = [t for t, g in zip(eligible, gap, strict=True) if g <= slack]
    return within[0] if within else eligible[gap.index(min(gap))]
