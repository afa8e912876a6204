"""What Pref-LaMP's writer is asked: a brief per paper, its prompts and the papers they show.

A brief holds two prompts for one paper's abstract (``writer.py`` says what is written from
them): **own**, the author's own papers most similar to this one (BM25 over abstracts, the paper
itself left out), and **others**, as many papers of one other person sharing no author with it:
of the people with enough papers, the one whose most similar papers are as similar to this
abstract as the author's own (the nearest total BM25 score). With rivals (``writer_rivals``) a
brief also holds the prompts of the next nearest people (``_rivals``). Cross-fitting
(``folds`` > 1): a brief's examples are papers of its own paper's fold, and ``fold_briefs``
takes a fold's training and test briefs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from prefalign_suites.pref_lamp.corpus import fold_of
from prefalign_suites.pref_lamp.negatives import Source, paper_source, same_title
from pytest_prefalign import bm25

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers

EXAMPLE_WORDS = 16  # an example's abstract is cut to its first words (its topic, cheaply)
ABSTRACT_WORDS = 100  # the pair's own abstract, cut to this many words


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
        """The brief of the pair against further rival ``r`` (1 to ``len(rivals)``; the first
        is this brief's own ``others``): its others' prompt and the titles shown in that
        pair."""
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
