"""What the reward methods that read a user's profile share, ``ProfileRewardMethod``: the
profiles received before ``fit`` (``api.RewardMethod.needs_profiles``), each scored text's own
source document left out of the profile it is compared with, and prefix rewards from the texts
of a response's prefixes, each text's reward computed once.

``r_u(x, y)`` is the similarity of ``y`` to the outputs of user ``u``'s profile (their earlier
documents), the retrieval-augmented personalization of LaMP (Salemi et al., 2023, "LaMP: When
Large Language Models Meet Personalization") turned into a reward: the profile entries that
match the response best say how much it reads like the user. A subclass says what the
similarity is (``prepare``, ``similarities``): ``profile_bm25``, ``profile_overlap``,
``profile_minilm``. The training pairs are not read (``fit`` prepares the profiles); the run
standardises the rewards on them like any method's.

**Leaving the source out.** A suite's training pairs and its validation items (the users'
profile entries with the suite's instruction, ``evaluation/guidance.py``) are written about a
profile entry's input (in Pref-LaMP, a training pair is about one of the author's profile
papers): scored against a profile that holds that very entry, a reward would read the real
output of the paper it is asked about. So for a ``(user, prompt)`` every profile entry of the
user whose input (whitespace collapsed) occurs in the prompt is left out (``left_out``); the
test items and test pairs are about papers no profile holds (Pref-LaMP's leak rule), so nothing
is left out for them, except a paper published twice: at 40 users one test paper has a twin
under another Anthology id in its author's profile, with the same abstract and title, which
the suite's rule (by paper id) keeps and this one leaves out. On the main job's 8 users every
training pair and validation item leaves out exactly its own paper, and no test pair anything.

No torch or numpy at import; ``score`` and ``prefix_rewards`` import numpy.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pytest_prefalign.api import Batch, Pair, ProfileEntry, RewardMethod

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from pytest_prefalign.runtime.lm import LM

MEMO_TEXTS = 200_000  # rewards remembered per method, by (user, profile left out, text)


def collapse(text: str) -> str:
    """``text`` with its whitespace collapsed to single spaces."""
    return " ".join(text.split())


class ProfileRewardMethod(RewardMethod):
    """A reward method that scores a response by its similarity to the user's own profile.

    Subclasses set ``name`` and ``Config`` (a dataclass) and define ``prepare`` and
    ``similarities``; ``version`` is part of the fingerprint (bump it when the code changes
    what a reward is).
    """

    capabilities: ClassVar[frozenset[str]] = frozenset({"prefix"})
    needs_profiles: ClassVar[bool] = True
    Config: ClassVar[type[Any]]
    version: ClassVar[int] = 1

    def __init__(self, config: Any | None = None) -> None:
        self.config = config if config is not None else self.Config()
        self.profiles: dict[str, tuple[ProfileEntry, ...]] | None = None
        self._ready = False
        self._left_out: dict[tuple[str, str], tuple[int, ...]] = {}
        self._memo: dict[tuple[str, tuple[int, ...], str], float] = {}
        self._prefix_memo: dict[tuple[str, tuple[int, ...]], str] = {}  # text_prefixes.Memo

    def fingerprint(self) -> str:
        config = json.dumps(asdict(self.config), sort_keys=True)
        return f"{self.name}-v{self.version}{config}"

    def use_profiles(self, profiles: Mapping[str, Sequence[ProfileEntry]]) -> None:
        """Keep every user's profile (checked: user names are strings, entries ``ProfileEntry``);
        ``fit`` prepares them."""
        checked: dict[str, tuple[ProfileEntry, ...]] = {}
        for user, entries in profiles.items():
            if not isinstance(user, str):
                raise TypeError(f"{self.name}: a profile's user is a {type(user).__name__}")
            kept = tuple(entries)
            for i, entry in enumerate(kept):
                if not isinstance(entry, ProfileEntry):
                    raise TypeError(
                        f"{self.name}: profiles[{user!r}][{i}] is a {type(entry).__name__}, "
                        "expected a ProfileEntry"
                    )
            checked[user] = kept
        self.profiles = checked
        self._ready = False
        self._left_out.clear()
        self._memo.clear()

    def fit(self, lm: LM, pairs: Sequence[Pair], cache_dir: Path) -> None:
        """Prepare the profiles (the pairs are not read: the reward is the profile's)."""
        if self.profiles is None:
            raise RuntimeError(
                f"{self.name} reads the users' profiles: call use_profiles(SuiteData.profiles) "
                "before fit (the evaluation does, as the method declares needs_profiles)"
            )
        self.prepare(self.profiles)
        self._ready = True

    # -- what a subclass defines ----------------------------------------------------------------

    def prepare(self, profiles: dict[str, tuple[ProfileEntry, ...]]) -> None:
        """Whatever ``similarities`` reads of the profiles (an idf table, vectors)."""
        raise NotImplementedError

    def similarities(self, user: str, kept: tuple[int, ...], texts: list[str]) -> np.ndarray:
        """The reward of each text for ``user``, compared with the profile entries at positions
        ``kept`` (never empty) of the user's profile; one float per text."""
        raise NotImplementedError

    def ahead(self, texts: list[str]) -> None:
        """Told every text about to be scored, before ``similarities`` is asked for them
        group by group (``profile_minilm`` encodes them in one go); by default nothing."""

    # -- rewards --------------------------------------------------------------------------------

    def score(self, lm: LM, batch: Batch) -> np.ndarray:
        import numpy as np

        return np.array(self.rewards(batch.users, batch.prompts, batch.responses))

    def prefix_rewards(self, lm: LM, batch: Batch) -> list[np.ndarray]:
        """The reward of the text of every prefix of each response (``text_prefixes``), the
        last one (at ``eos_id``) the response's own: ``score``'s."""
        import numpy as np

        from prefalign_methods.rewards.text_prefixes import prefix_texts

        texts = prefix_texts(lm, batch.responses, self._prefix_memo)
        users = [u for u, t in zip(batch.users, texts, strict=True) for _ in t]
        prompts = [p for p, t in zip(batch.prompts, texts, strict=True) for _ in t]
        flat = iter(self.rewards(users, prompts, [x for t in texts for x in t]))
        return [np.array([next(flat) for _ in t]) for t in texts]

    def rewards(
        self, users: Sequence[str], prompts: Sequence[str], texts: Sequence[str]
    ) -> list[float]:
        """One reward per (user, prompt, text); a user without a profile, or whose whole
        profile is left out for this prompt, gets 0. Each text is scored once per (user,
        profile left out)."""
        if not self._ready or self.profiles is None:
            raise RuntimeError(f"{self.name}: call fit() before asking for rewards")
        keys = []
        for user, prompt, text in zip(users, prompts, texts, strict=True):
            keys.append((user, self.left_out(user, prompt), text))
        missing: dict[tuple[str, tuple[int, ...]], list[str]] = {}
        for user, out, text in dict.fromkeys(keys):
            if (user, out, text) not in self._memo:
                missing.setdefault((user, out), []).append(text)
        if len(self._memo) + sum(map(len, missing.values())) > MEMO_TEXTS:
            self._memo.clear()
        if missing:
            self.ahead(list(dict.fromkeys(t for group in missing.values() for t in group)))
        for (user, out), group in missing.items():
            kept = tuple(i for i in range(len(self.profiles.get(user, ()))) if i not in out)
            values = self.similarities(user, kept, group) if kept else [0.0] * len(group)
            for text, value in zip(group, values, strict=True):
                self._memo[(user, out, text)] = float(value)
        return [self._memo[k] for k in keys]

    def left_out(self, user: str, prompt: str) -> tuple[int, ...]:
        """Positions of the user's profile entries whose input (whitespace collapsed, not
        empty) occurs in ``prompt``: the document the prompt is about, never compared with."""
        key = (user, prompt)
        if key not in self._left_out:
            said = collapse(prompt)
            entries = self.profiles.get(user, ()) if self.profiles is not None else ()
            self._left_out[key] = tuple(
                i for i, e in enumerate(entries) if (found := collapse(e.input)) and found in said
            )
        return self._left_out[key]


def top_mean(found: np.ndarray, k: int) -> np.ndarray:
    """The mean of each row's ``k`` largest values (all of them where a row has fewer)."""
    import numpy as np

    return -np.sort(-found, axis=1)[:, :k].mean(axis=1)
