"""The synthetic suite's papers: an "abstract" made of topic words, a fixed set of candidate
titles made from templates, the title a user's rule ranks best, and preference pairs that only
the rule decides.

Every candidate of an item is built from the item's words (three topics, two method words, two
vocabulary words, a lead word and a tail word) by one of six templates of a given length in
words:

- ``plain`` (2 to 8 words): ``Bayesian Latent Dialogue for Retrieval``;
- ``colon`` (3 to 8): an acronym and a colon, then the plain title one word shorter,
  ``BDR: Bayesian Dialogue Retrieval``; ``lead``, its counterpart without the rule's feature: a
  four-letter word instead, ``Fast Bayesian Dialogue Retrieval``;
- ``acronym`` (3 to 8): the plain title one word shorter, then the acronym in parentheses,
  ``Bayesian Dialogue Retrieval (BDR)``; ``tail``, its counterpart: a five-letter word instead,
  ``Bayesian Dialogue Retrieval Redux``;
- ``vocab`` (3 to 8, with 1 or 2 vocabulary words): the plain title with its method words
  replaced by vocabulary words, ``Sparse Robust Dialogue Retrieval``. The item's method words are
  drawn with the lengths of its vocabulary words, so that the two titles have the same length.

The pairs: ``short``, a plain title over a plain title at least two words longer; ``colon``, a
colon title over its ``lead`` counterpart or an acronym title over its ``tail`` counterpart;
``vocab``, a vocabulary title over the plain title of the same length. So, where the rule is not
about length, chosen and rejected have the same number of words and of characters, and differ
only in what the rule looks at (which the suite's tests check).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from prefalign_suites.synthetic.rules import Rule

TOPICS = (
    "dialogue parsing retrieval summarization translation tagging speech morphology entailment "
    "coreference sentiment grounding segmentation paraphrasing"
).split()
# method words: at least two of each length that a vocabulary word has (5 to 9 letters)
METHODS = (
    "joint dense naive local latent stable greedy active global unified dynamic shallow generic "
    "bayesian scalable discrete iterative efficient recurrent universal"
).split()
# the vocabulary rules draw from these; no topic or method word is among them, nor any word of
# the tiny test model's tokenizer corpus (which would make them cheap to write)
VOCABULARY = (
    "sparse robust causal hybrid lexical modular implicit temporal symbolic adaptive federated "
    "fuzzy"
).split()
LEADS = ("Fast", "Open", "Safe", "Lean", "Bold")  # as long as an acronym and its colon, "BDR:"
TAILS = ("Redux", "Study", "Notes", "Views", "Again")  # as long as "(BDR)"
VOCAB_SIZE = 3  # words in a vocab user's vocabulary

# the plain title of each length; M1 and M2 are the slots that vocabulary words can take
PLAIN = {
    2: "{A} {B}",
    3: "{M1} {A} {B}",
    4: "{M1} {M2} {A} {B}",
    5: "{M1} {M2} {A} for {B}",
    6: "Towards {M1} {M2} {A} for {B}",
    7: "Towards {M1} {M2} {A} for {B} {C}",
    8: "Towards {M1} and {M2} {A} for {B} {C}",
}
SHORTEST, LONGEST = min(PLAIN), max(PLAIN)
OPENINGS = ("We study {a} and {b}", "This paper addresses {a} for {b}", "We revisit {a} in {b}")
SENTENCES = (
    "Our {m1} approach links {a} to {c}.",
    "A {m2} model of {b} is trained on {c} data.",
    "Experiments on {b} benchmarks show consistent gains.",
    "We release code and data for {c} and {a}.",
)


@dataclass(frozen=True)
class Candidate:
    """One candidate title: its text, how many words, its template and vocabulary words."""

    text: str
    words: int
    template: str  # plain, colon, lead, acronym, tail, vocab
    vocab: int = 0  # vocabulary words in it (vocab template only)


@dataclass(frozen=True)
class Paper:
    """One synthetic paper of a user: the abstract and its candidate titles."""

    abstract: str
    candidates: tuple[Candidate, ...]

    def find(self, template: str, words: int, vocab: int = 0) -> Candidate:
        return next(
            c for c in self.candidates if (c.template, c.words, c.vocab) == (template, words, vocab)
        )


def paper(rng: random.Random, vocabulary: tuple[str, ...]) -> Paper:
    """A paper drawn with ``rng``; its vocabulary titles use two of ``vocabulary``."""
    a, b, c = rng.sample(TOPICS, 3)
    v1, v2 = rng.sample(vocabulary, 2)
    m1 = rng.choice([m for m in METHODS if len(m) == len(v1)])
    m2 = rng.choice([m for m in METHODS if len(m) == len(v2) and m != m1])
    lead, tail = rng.choice(LEADS), rng.choice(TAILS)
    sentences = list(SENTENCES)
    rng.shuffle(sentences)
    words = {"a": a, "b": b, "c": c, "m1": m1, "m2": m2}
    opening = rng.choice(OPENINGS).format(**words) + f" with {m1} {m2} models."
    abstract = " ".join([opening, *(s.format(**words) for s in sentences[:3])])
    return Paper(abstract, tuple(candidates(a, b, c, (m1, m2), (v1, v2), (lead, tail))))


def candidates(
    a: str,
    b: str,
    c: str,
    methods: tuple[str, str],
    vocab: tuple[str, str],
    fillers: tuple[str, str],
) -> list[Candidate]:
    """The fixed candidate set of an item, in a fixed order."""

    def plain(n: int, slots: tuple[str, str]) -> str:
        filled = {"A": a, "B": b, "C": c, "M1": slots[0], "M2": slots[1]}
        return PLAIN[n].format(**{k: v.capitalize() for k, v in filled.items()})

    acronym = (methods[0][0] + a[0] + b[0]).upper()
    found = [Candidate(plain(n, methods), n, "plain") for n in PLAIN]
    for n in range(SHORTEST + 1, LONGEST + 1):
        shorter = plain(n - 1, methods)
        found.append(Candidate(f"{acronym}: {shorter}", n, "colon"))
        found.append(Candidate(f"{fillers[0]} {shorter}", n, "lead"))
        found.append(Candidate(f"{shorter} ({acronym})", n, "acronym"))
        found.append(Candidate(f"{shorter} {fillers[1]}", n, "tail"))
        for k in range(1, slots(n) + 1):
            mixed = (*vocab[:k], *methods[k:])
            found.append(Candidate(plain(n, (mixed[0], mixed[1])), n, "vocab", k))
    return found


def slots(n: int) -> int:
    """How many method words the plain title of ``n`` words has."""
    return PLAIN[n].count("{M")


def reference(rule: Rule, paper: Paper, length: int) -> Candidate:
    """The candidate the rule ranks best; ties go to the one closest to the user's preferred
    length in words, then to the first in the candidate order."""
    ranked = sorted(
        enumerate(paper.candidates),
        key=lambda ic: (-rule.score(ic[1].text), abs(ic[1].words - length), ic[0]),
    )
    return ranked[0][1]


def pair(rule: Rule, paper: Paper, rng: random.Random) -> tuple[Candidate, Candidate]:
    """``(chosen, rejected)``: a title the rule prefers and one it does not, drawn with ``rng``;
    the same number of words unless the rule is about length."""
    if rule.kind == "short":
        short = rng.randint(SHORTEST, LONGEST - 2)
        long = rng.randint(short + 2, LONGEST)
        return paper.find("plain", short), paper.find("plain", long)
    n = rng.randint(SHORTEST + 1, LONGEST)
    if rule.kind == "colon":
        chosen, rejected = rng.choice((("colon", "lead"), ("acronym", "tail")))
        return paper.find(chosen, n), paper.find(rejected, n)
    return paper.find("vocab", n, rng.randint(1, slots(n))), paper.find("plain", n)
