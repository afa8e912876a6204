"""Whether a generated output is an answer to its item at all, by seven stated rules.

Pure Python (no numpy, no model): ``not_an_answer(output, input=..., prompt=...)`` names the
first rule of ``RULES`` that the output breaks, or None. ``input`` is the item's raw input (the
abstract, the post, the topic), ``prompt`` the plain task prompt the item carries. The rules,
in the order they are checked (``DESCRIPTIONS`` says each in one line; docs/metrics.md, "Fluency
and answers", gives each its known-answer test):

- ``empty``: no letter or digit at all.
- ``label``: nothing but field labels: the usual ones ("Abstract:", "Title:", "Summary:", ...)
  or a word that the prompt puts before a colon.
- ``copy``: the output opens with the input's first ``COPY_WORDS`` words (or, when it is
  shorter, is the input's opening of at least ``COPY_MIN_WORDS`` words), or echoes the
  prompt's instruction: it opens with the prompt's first ``COPY_MIN_WORDS`` words.
- ``language``: not in the input's language, judged by a character trigram model of the
  prompt (which holds the input) and a short English background text: the output's letters
  cost more than ``LANGUAGE_BITS`` bits each on average. Judged only on outputs of at least
  ``LANGUAGE_MIN_LETTERS`` letters.
- ``loop``: a unit of one to four words repeated at least three times in a row, a phrase of
  three words or more twice in a row, or a run of letters repeated five times ("lalalala").
- ``off_task``: a statement about the paper, the reader or the task instead of an answer:
  it shares no content word with the input, or it opens like a chat reply or a meta statement
  ("This is ...", "Here is ...", "Sounds great", "Translate ...") and shares fewer than
  ``OFF_TASK_SHARED`` content words with it. Judged only where the input holds at least
  ``OFF_TASK_MIN_INPUT`` content words (an abstract, a post; not a one-line topic).
- ``unfinished``: a lead-in with nothing after it: the output ends with a colon ("Our
  Progress Towards:", "Lemmatization and Part-of-Speech (POS) tagging:"), the model having
  stopped where its answer was to begin. No title of the ACL Anthology set and no Polis
  statement of ``../shared/data`` ends so.

A field label at the output's start ("Title: ...") is taken off before the rules after
``label`` look at it. The thresholds were set on the ACL Anthology titles against their own
abstracts (docs/metrics.md gives the false-positive rate of each rule on them).
"""

from __future__ import annotations

import functools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Callable

RULES: tuple[str, ...] = ("empty", "label", "copy", "language", "loop", "off_task", "unfinished")

DESCRIPTIONS: dict[str, str] = {
    "empty": "nothing but whitespace and punctuation",
    "label": "only field labels, the usual ones or the prompt's (e.g. 'Abstract:', 'Title:')",
    "copy": "opens with the input's first words, or the prompt's, verbatim",
    "language": "not in the input's language (its letters improbable under the prompt's own)",
    "loop": "a word or phrase repeated in a row ('Aysha, Aysha, Aysha')",
    "off_task": "about the paper, reader or task, not an answer: no content word of the input, "
    "or a chat or meta opening ('This is ...', 'Here is ...') with almost none",
    "unfinished": "a lead-in with nothing after it: ends with a colon ('Our Progress Towards:')",
}

# the usual field labels of prompts and in-context examples
LABELS = frozenset(
    "abstract title summary tl dr tldr statement vote answer output input response assistant "
    "user question text paper post comment headline keywords".split()
)
COPY_WORDS = 6  # the input's opening copied when the output starts with this many of its words
COPY_MIN_WORDS = 4  # ... or is, whole, the input's opening of at least this many words; or
# opens with this many of the prompt's first words (its instruction echoed)
LANGUAGE_BITS = 4.0  # bits per letter above which the output is not in the input's language
LANGUAGE_BITS_SHORT = 4.5  # ... where the input is short and the background does most of it
LANGUAGE_INPUT_LETTERS = 300  # an input with fewer letters is short
LANGUAGE_MIN_LETTERS = 12  # shorter outputs are not judged by ``language``
OFF_TASK_MIN_INPUT = 10  # content words the input needs for ``off_task`` to judge
OFF_TASK_SHARED = 2  # a chat or meta opening passes with at least this many shared words

# Openings of a chat reply or of a statement about the paper, the reader or the task, matched
# at the start of the lowercased output (after a leading label) up to a word boundary.
OPENINGS = (
    "this is",
    "this was",
    "here is",
    "here are",
    "here's",
    "here’s",
    "below is",
    "the following",
    "sounds great",
    "sounds good",
    "sure",
    "of course",
    "certainly",
    "absolutely",
    "great",
    "okay",
    "ok",
    "yes",
    "no,",
    "hello",
    "hi",
    "thank",
    "thanks",
    "sorry",
    "i'm sorry",
    "i am sorry",
    "as an ai",
    "i can",
    "i cannot",
    "i can't",
    "i will",
    "i would",
    "i'd",
    "let me",
    "please",
    "translate",
    "summarize",
    "summarise",
    "generate",
    "write",
    "note",
    "in this paper",
    "this paper",
    "the paper",
    "this abstract",
    "the abstract",
    "this article",
    "the article",
    "the title",
    "this title",
)

# Words that never count as content: function words, and the words a statement about the
# paper or the task is made of ("the full abstract of the original paper").
STOPWORDS = frozenset(
    """a about above after again against all also am an and any are aren't as at be because
    been before being below between both but by can can't cannot could did do does doing don't
    down during each few for from further had has have having he her here here's hers him his
    how i i'm if in into is isn't it it's its itself just let's me more most my no nor not now
    of off on once only or other our ours out over own same she should so some such than that
    that's the their theirs them then there there's these they this those through to too under
    until up very was we were what when where which while who whom why will with would you
    your yours via using use used based new towards toward""".split()
)
META_WORDS = frozenset(
    """abstract abstracts title titles paper papers article articles report reports author
    authors written write writes writing wrote sentence sentences summary text version
    original full answer answers question reader readers translate translation supported
    support available please check sounds great interesting insightful following here sure
    thank thanks sorry okay hello note""".split()
)

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")  # letters and digits, with an inner apostrophe
_LETTERS = re.compile(r"[^\W\d_]+")
_LEADING_LABEL = re.compile(r"^\s*([^\W\d_]+(?:[ ;][^\W\d_]+)?)\s*:\s*")
_LETTER_RUN = re.compile(r"([^\W\d_]{1,4}?)\1{4,}")
_PROMPT_LABEL = re.compile(r"([^\W\d_]+)\s*:")

# A short text of ordinary English, the background of the ``language`` rule's trigram model:
# it keeps a short prompt (a one-line topic) from making every ordinary word look foreign.
BACKGROUND = (
    "We describe how people write and read short texts in everyday life. Most of the time a "
    "reader looks at the first words of a sentence and then decides whether the rest is worth "
    "the effort. Good writing states one thing clearly, gives the reasons for it, and shows "
    "what follows from them. This study compares several methods that were proposed for the "
    "same problem, measures their results on public data, and reports which of them work "
    "better, which are faster and which should not be used at all. Our findings suggest that "
    "simple models, trained on enough examples with care, often perform as well as large "
    "systems. The government, the schools and the local community should work together, "
    "because everybody benefits when information is shared openly and questions are answered "
    "honestly. Which approach would you choose, and why? I always thought my family needed "
    "a bigger house near the city, with a garden for the children and a quiet street where "
    "they could play. My neighbours agree that the town should build more roads, parks and "
    "shops, improve public transport, and keep taxes low for small businesses. Many workers "
    "feel their wages are too low, while others worry about jobs, health care, housing prices "
    "and the cost of living. Voters expect their leaders to listen, to explain each decision "
    "and to protect the environment for the next generation. Yesterday we walked along the "
    "river to the old market, bought fresh bread, fruit and vegetables, and talked with "
    "friends about music, sports, movies, books and the weather. Technology changes quickly: "
    "computers, phones and networks help us learn, communicate and find knowledge, but they "
    "also raise problems of privacy, security and trust. Students need teachers who support "
    "them, schools that are safe, and enough time to think."
)


# the rules that say an output is not text at all (whatever else it is or is not)
TEXT_RULES: tuple[str, ...] = ("empty", "label", "language", "loop")


def not_an_answer(output: str, *, input: str, prompt: str) -> str | None:
    """The name of the first rule of ``RULES`` that ``output`` breaks, or None when it is an
    answer. ``input``: the item's raw input; ``prompt``: the plain task prompt shown."""
    if not any(ch.isalnum() for ch in output):
        return "empty"
    labels = _labels(prompt)
    words = [w.lower() for w in _WORD.findall(output)]
    if all(w in labels for w in words):
        return "label"
    text = _without_leading_labels(output, labels)
    checks: tuple[tuple[str, Callable[[], bool]], ...] = (
        ("copy", lambda: _copies_opening(text, input, prompt)),
        ("language", lambda: _foreign(text, input, prompt)),
        ("loop", lambda: _loops(text)),
        ("off_task", lambda: _off_task(text, input)),
        ("unfinished", lambda: _unfinished(text)),
    )
    for rule, broken in checks:
        if broken():
            return rule
    return None


def not_text(output: str, *, input: str, prompt: str) -> str | None:
    """The first rule of ``TEXT_RULES`` that ``output`` breaks, or None when it is text: the
    rules of ``not_an_answer`` that say it is not text at all, each checked whatever other rule
    it breaks first (an output that copies the input's opening and then loops is a loop)."""
    rule = not_an_answer(output, input=input, prompt=prompt)
    if rule != "copy":  # the checks after ``copy`` ran, or the rule is one of these
        return rule if rule in TEXT_RULES else None
    text = _without_leading_labels(output, _labels(prompt))
    if _foreign(text, input, prompt):
        return "language"
    return "loop" if _loops(text) else None


def _labels(prompt: str) -> frozenset[str]:
    """The usual field labels and the words the prompt puts before a colon."""
    return LABELS | frozenset(w.lower() for w in _PROMPT_LABEL.findall(prompt))


def _without_leading_labels(output: str, labels: frozenset[str] | set[str]) -> str:
    text = output
    while (m := _LEADING_LABEL.match(text)) and all(
        w.lower() in labels for w in re.split(r"[ ;]", m.group(1))
    ):
        text = text[m.end() :]
    return text


def _copies_opening(text: str, input: str, prompt: str) -> bool:
    out = [w.lower() for w in _WORD.findall(text)]
    source = [w.lower() for w in _WORD.findall(input)]
    instruction = [w.lower() for w in _WORD.findall(prompt)][:COPY_MIN_WORDS]
    if len(instruction) == COPY_MIN_WORDS and out[:COPY_MIN_WORDS] == instruction:
        return True  # the prompt's instruction echoed ("Write a statement you ...")
    if len(out) >= COPY_WORDS:
        return len(source) >= COPY_WORDS and out[:COPY_WORDS] == source[:COPY_WORDS]
    return len(out) >= COPY_MIN_WORDS and out == source[: len(out)]


# --- language: a character trigram model of the prompt -----------------------------------------

_TRIGRAM, _BIGRAM, _UNIGRAM = 0.5, 0.3, 0.2  # interpolation weights
_UNSEEN = 0.5  # add-this smoothing of the letter counts
_ALPHABET = 60  # letters the smoothing spreads its mass over


def letter_bits(text: str, reference: str) -> float:
    """The mean cost in bits of each letter of ``text`` (and of each word's end), under an
    interpolated character trigram model of ``reference`` and the English background. Words
    are lowercased letters (NFC), digits and punctuation dropped."""
    model = _TrigramModel(_reference_counts(reference), _BACKGROUND_COUNTS)
    costs = [model.bits(ctx, ch) for ctx, ch in _events(text)]
    return sum(costs) / len(costs) if costs else 0.0


def _events(text: str) -> list[tuple[str, str]]:
    """Each letter of each word, and its end, with the two characters before it."""
    found = []
    for word in _LETTERS.findall(unicodedata.normalize("NFC", text).lower()):
        padded = f"  {word} "
        found += [(padded[i - 2 : i], padded[i]) for i in range(2, len(padded))]
    return found


class _Counts:
    """The trigram, bigram and letter counts of a text, and of their contexts."""

    def __init__(self, text: str) -> None:
        self.tri: Counter[tuple[str, str]] = Counter()
        self.bi: Counter[tuple[str, str]] = Counter()
        self.uni: Counter[str] = Counter()
        self.tri_ctx: Counter[str] = Counter()
        self.bi_ctx: Counter[str] = Counter()
        for ctx, ch in _events(text):
            self.tri[ctx, ch] += 1
            self.tri_ctx[ctx] += 1
            self.bi[ctx[1], ch] += 1
            self.bi_ctx[ctx[1]] += 1
            self.uni[ch] += 1
        self.total = sum(self.uni.values())


_BACKGROUND_COUNTS = _Counts(BACKGROUND)


@functools.lru_cache(maxsize=256)
def _reference_counts(reference: str) -> _Counts:
    """``_Counts(reference)``, counted once per reference: every row of a run checks its outputs
    against the same items' prompts and inputs (3.9 s of the main job counted them again and
    again). The counts are only read."""
    return _Counts(reference)


class _TrigramModel:
    """The interpolated trigram model of the pooled counts of several texts."""

    def __init__(self, *parts: _Counts) -> None:
        self.parts = parts
        self.total = sum(c.total for c in parts)

    def bits(self, ctx: str, ch: str) -> float:
        parts = self.parts
        p1 = (sum(c.uni[ch] for c in parts) + _UNSEEN) / (self.total + _UNSEEN * _ALPHABET)
        n2 = sum(c.bi_ctx[ctx[1]] for c in parts)
        n3 = sum(c.tri_ctx[ctx] for c in parts)
        p2 = sum(c.bi[ctx[1], ch] for c in parts) / n2 if n2 else 0.0
        p3 = sum(c.tri[ctx, ch] for c in parts) / n3 if n3 else 0.0
        return -math.log2(_TRIGRAM * p3 + _BIGRAM * p2 + _UNIGRAM * p1)


def _foreign(text: str, input: str, prompt: str) -> bool:
    if _letters(text) < LANGUAGE_MIN_LETTERS:
        return False
    short = _letters(input) < LANGUAGE_INPUT_LETTERS
    limit = LANGUAGE_BITS_SHORT if short else LANGUAGE_BITS
    return letter_bits(text, prompt + " " + input) > limit


def _letters(text: str) -> int:
    return sum(len(w) for w in _LETTERS.findall(text))


# --- loop ------------------------------------------------------------------------------------


def _loops(text: str) -> bool:
    words = [w.lower() for w in _WORD.findall(text)]
    for n in range(1, len(words) // 2 + 1):
        repeats = 3 if n < 3 else 2
        for i in range(len(words) - repeats * n + 1):
            unit = words[i : i + n]
            if all(words[i + k * n : i + (k + 1) * n] == unit for k in range(1, repeats)):
                return True
    return _LETTER_RUN.search(text.lower()) is not None


# --- off the task ----------------------------------------------------------------------------


def content_words(text: str) -> set[str]:
    """The text's content words, each cut to its first five letters (a crude stem: "translate"
    and "translation" meet): words of three letters or more that are neither function words
    nor the words statements about a paper or a task are made of (``META_WORDS``)."""
    found = set()
    for word in _LETTERS.findall(text.lower()):
        if len(word) >= 3 and word not in STOPWORDS and word not in META_WORDS:
            found.add(word[:5])
    return found


def _off_task(text: str, input: str) -> bool:
    source = content_words(input)
    if len(source) < OFF_TASK_MIN_INPUT:
        return False
    shared = len(content_words(text) & source)
    if shared == 0:
        return True
    return shared < OFF_TASK_SHARED and _meta_opening(text)


# --- unfinished ------------------------------------------------------------------------------

_COLONS = (":", "\uff1a")  # the colon and the full-width colon


def _unfinished(text: str) -> bool:
    return text.rstrip().endswith(_COLONS)


def _meta_opening(text: str) -> bool:
    start = " ".join(text.lower().split())
    for opening in OPENINGS:
        if start.startswith(opening):
            rest = start[len(opening) :]
            if not rest or opening.endswith(",") or not (rest[0].isalnum() or rest[0] in "'’"):
                return True
    return False
