"""Pref-LaMP pairs written for the same abstract by a fixed writer model.

The writer (Gemma-3-270M base by default: not the embedded 135M model that the main job
evaluates) is shown a few papers as examples, ``Abstract:``/``Title:`` pairs, and then the
abstract of the pair's paper; it writes a title. Two sets of examples make two briefs per paper:

- **own**: the author's own profile papers most similar to this one (BM25 over abstracts), the
  paper itself left out;
- **others**: as many papers of one other person, sharing no author with this one and no test
  item of the run: of the people with enough papers, the one whose most similar papers are as
  similar to this abstract as the author's own (the nearest total BM25 score). The two prompts
  then differ in whose titles they show, not in how close their examples are to the abstract.

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
from prefalign_suites.pref_lamp.corpus import fold_of
from prefalign_suites.pref_lamp.negatives import (
    Source,
    add_pairs,
    cached_outputs,
    design,
    paper_source,
    same_title,
)
from pytest_prefalign import bm25, cache, storage, versions

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
    from pytest_prefalign.api import Suite, SuiteData

WRITER = "embedded:gemma3-270m"
DESIGNS = ("style", "written")
LABELS = {
    "style": "style: {writer}'s titles from the author's own examples over another person's",
    "written": "written: the real title over {writer}'s from another person's examples",
}
EXAMPLE_WORDS = 16  # an example's abstract is cut to its first words (its topic, cheaply)
ABSTRACT_WORDS = 100  # the pair's own abstract, cut to this many words


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
class Brief:
    """One pair to write: its source paper and the two prompts."""

    source: Source
    own: str
    others: str
    shown: tuple[str, ...]  # the example titles shown in either prompt (a copy is no answer)
    # the keys of the paper and of the example papers (cross-fitting: ``fold_briefs``)
    key: str = ""
    examples: tuple[str, ...] = ()
    # more rejected sides (``rivals`` > 1): each further person's prompt, and the example
    # titles shown in its pair (the author's own and that person's)
    rivals: tuple[str, ...] = ()
    rival_shown: tuple[tuple[str, ...], ...] = ()

    def rival(self, r: int) -> Brief:
        """The brief of the pair against rival ``r`` (0: the first, this brief itself): its
        others' prompt and the titles shown in that pair."""
        if r == 0:
            return self
        return replace(self, others=self.rivals[r - 1], shown=self.rival_shown[r - 1])


def briefs(
    users: dict[str, UserPapers],
    pool: Sequence[Paper],
    held_out: frozenset[str],
    *,
    max_train: int,
    shots: int,
    folds: int = 1,
    rivals: int = 1,
) -> tuple[list[Brief], list[Brief]]:
    """The training briefs (profile papers, the last ``max_train`` per user; 0 = all) and the
    test briefs (test papers). ``held_out``: the test papers no example may be (every user's
    the rules saw, not only this run's: an author's briefs do not depend on the run's limit).

    Cross-fitting (``folds`` > 1, ``held_out`` empty): a brief's examples, the author's own and
    the other person's, are papers of its own paper's fold (``corpus.fold_of``), the author's
    own from all their papers. A brief is a training brief in every other fold, so no fold's
    training pairs were written after a title of that fold's test papers.

    ``rivals`` > 1: every brief also holds the prompts of the next nearest people
    (``_rivals``); a run writes them for its test briefs only."""
    import numpy as np

    shown = [p for p in pool if p.key not in held_out]  # papers an example may come from
    position = {p.key: i for i, p in enumerate(shown)}
    fold_at = np.array([fold_of(p, folds) for p in shown], dtype=np.int64)
    retriever = bm25.index([p.abstract for p in shown])
    written_by = _people(shown)
    people = {name: at for name, at in written_by.items() if len(at) >= shots}
    train: list[Brief] = []
    test: list[Brief] = []
    for user, papers in users.items():
        chosen = papers.profile[-max_train:] if max_train else papers.profile
        history = papers.profile if folds == 1 else [*papers.profile, *papers.tests]
        for paper, into in [*((p, train) for p in chosen), *((p, test) for p in papers.tests)]:
            scores = bm25.scores(retriever, paper.abstract)
            same_fold = fold_at == fold_of(paper, folds)
            own = [position[p.key] for p in history if p.key != paper.key]
            own = [i for i in own if same_fold[i] and _may_show(shown[i], paper, True)]
            mine = _best(scores, own, shots)
            allowed = _others_allowed(shown, written_by, paper) & same_fold
            found = _rivals(scores, people, allowed, mine, rivals)
            theirs = [[shown[i] for i in positions] for positions in found]
            into.append(_brief(user, paper, [shown[i] for i in mine], theirs))
    return train, test


def _people(papers: Sequence[Paper]) -> dict[str, np.ndarray]:
    """Each person, by name in order, and the positions of their papers."""
    import numpy as np

    found: dict[str, list[int]] = {}
    for i, paper in enumerate(papers):
        for name in paper.people:
            found.setdefault(name, []).append(i)
    return {name: np.array(found[name], dtype=np.int64) for name in sorted(found)}


def _may_show(example: Paper, query: Paper, own: bool) -> bool:
    """Whether ``example`` may be shown when the writer answers ``query``: never the paper
    itself or its title; another person's example shares no author with it."""
    if example.key == query.key or same_title(example.title, query.title):
        return False
    return own or not (example.people & query.people)


def _others_allowed(
    shown: Sequence[Paper], written_by: dict[str, np.ndarray], query: Paper
) -> np.ndarray:
    """Which of ``shown`` another person's examples for ``query`` may be (``_may_show``'s rule
    for them, for every paper at once): no paper of the query's authors, not the query itself
    or its title."""
    import numpy as np

    allowed = np.ones(len(shown), dtype=bool)
    for name in query.people:
        allowed[written_by.get(name, [])] = False
    for i in map(int, np.flatnonzero(allowed)):
        if shown[i].key == query.key or same_title(shown[i].title, query.title):
            allowed[i] = False
    return allowed


def _best(scores: Any, positions: Sequence[int], k: int) -> list[int]:
    """The ``k`` positions with the highest scores (the earlier among equals), the most
    similar last (nearest the abstract the writer answers)."""
    ranked = sorted(positions, key=lambda i: (-float(scores[i]), i))[:k]
    return ranked[::-1]


def _rivals(
    scores: Any, people: dict[str, np.ndarray], allowed: np.ndarray, mine: list[int], k: int
) -> list[list[int]]:
    """Other people's examples, as many as the author's own and as similar to the query, for
    ``k`` people: of the people with enough ``allowed`` papers, those whose most similar
    papers' total score is nearest the author's own examples' (by name among equals), each
    with those papers; a person whose papers would repeat an earlier rival's example is
    passed over (co-authors show the same papers), and so is a further rival showing one of
    the author's own examples (a paper whose author list spells the author otherwise). The
    first is the one pair's ``others``; fewer than ``k`` where fewer people qualify, none
    where nobody does, one where the author has no example (every rival's prompt would be
    the same)."""
    import numpy as np

    n, target = len(mine), float(sum(scores[i] for i in mine))
    values = np.asarray(scores)
    ranked: list[tuple[float, int, np.ndarray]] = []
    for order, positions in enumerate(people.values()):
        eligible = positions[allowed[positions]]
        if len(eligible) < n:
            continue
        # the n highest scores, summed as the target is: from the lowest up, in their dtype
        total = float(sum(np.sort(values[eligible])[len(eligible) - n :]))
        ranked.append((abs(total - target), order, eligible))
    ranked.sort(key=lambda found: found[:2])
    k = k if n else 1
    picked: list[list[int]] = []
    used: set[int] = set()
    for _, _, eligible in ranked:
        chosen = _best(scores, eligible.tolist(), n)
        if used.intersection(chosen) or (picked and not set(mine).isdisjoint(chosen)):
            continue
        picked.append(chosen)
        used.update(chosen)
        if len(picked) == k:
            break
    return picked


def _brief(user: str, paper: Paper, mine: list[Paper], rivals: list[list[Paper]]) -> Brief:
    """The brief of ``paper``: its own prompt, the first rival's (no prompt of others where
    nobody qualifies: an empty one, as before), and the further rivals'."""
    theirs, *more = rivals or [[]]
    own_titles = tuple(p.title for p in mine)
    return Brief(
        paper_source(user, paper),
        prompt(mine, paper.abstract),
        prompt(theirs, paper.abstract),
        own_titles + tuple(p.title for p in theirs),
        key=paper.key,
        examples=tuple(p.key for p in (*mine, *theirs, *(p for r in more for p in r))),
        rivals=tuple(prompt(r, paper.abstract) for r in more),
        rival_shown=tuple(own_titles + tuple(p.title for p in r) for r in more),
    )


def fold_briefs(
    briefs: Sequence[Brief], tested: frozenset[str], *, max_train: int
) -> tuple[list[Brief], list[Brief]]:
    """Cross-fitting: the training and test briefs of one fold, from the briefs of every
    paper of the fold's users (oldest first per user). ``tested``: the keys of the fold's
    test papers, every kept author's (not only the run's). A brief of a tested paper is a
    test brief; a training brief is one whose prompts showed none of them (its sides were
    written after no test paper's title), the last ``max_train`` per user (0 = all)."""
    test = [b for b in briefs if b.key in tested]
    train = [b for b in briefs if b.key not in tested and tested.isdisjoint(b.examples)]
    if max_train:
        per_user: dict[str, list[Brief]] = {}
        for brief in train:
            per_user.setdefault(brief.source.user, []).append(brief)
        kept = {id(b) for found in per_user.values() for b in found[-max_train:]}
        train = [b for b in train if id(b) in kept]
    return train, test


def prompt(examples: Sequence[Paper], abstract: str) -> str:
    """The writer's prompt: the examples, then the abstract, ending where the title goes."""
    shots = "".join(
        f"Abstract:\n{_head(p.abstract, EXAMPLE_WORDS)}\nTitle:\n{p.title}\n\n" for p in examples
    )
    return f"{shots}Abstract:\n{_head(abstract, ABSTRACT_WORDS)}\nTitle:"


def _head(text: str, words: int) -> str:
    split = text.split()
    return " ".join(split[:words]) + (" ..." if len(split) > words else "")


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
    theirs = _answers(found[_key(brief.others)], brief)
    if options.design == "written":
        own = [brief.source.title]
    else:
        own = _answers(found[_key(brief.own)], brief)
    if many and options.pairing == "matched":
        within = [
            (replace(brief.source, pair_id=f"{brief.source.pair_id}#{i}-{j}"), a, b)
            for i, a in enumerate(own)
            for j, b in enumerate(theirs)
            if not same_title(a, b) and abs(length(a) - length(b)) <= options.length_slack
        ]
        if within:
            return within
    pick = _nearest(own, theirs, length)
    return [(brief.source, *pick)] if pick else []


def _one_pair(
    brief: Brief, found: dict[str, list[str]], length: Any, options: Options
) -> list[tuple[Source, str, str]]:
    """The brief's one pair: its candidates nearest in length."""
    return _sides(brief, found, length, replace(options, rivals=1), many=False)


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
