"""``profile_impostors``: the nearest own profile output's character-trigram cosine minus the
nearest other user's. Known answers worked out by hand on two-letter titles, whose trigrams
(" ab", "ab ") every document holds once, so every idf is the same number; the prompt's own
source document left out of the own profile, of the impostors (a co-author's copy) and of the
counts; prefix rewards ending at ``score``; the method registered and in the default set."""

from __future__ import annotations

import math

import pytest
from test_profile_rewards import rewards  # the rewards of texts for one user and prompt

from prefalign_methods.rewards.profile_impostors import (
    ProfileImpostors,
    ProfileImpostorsConfig,
    grams,
)
from pytest_prefalign.api import Batch, ProfileEntry

# ann and bob share p1 (co-authors); documents "ab" (p0), "cd" (p1), "ef" (p2): N = 3
PROFILES = {
    "ann": [
        ProfileEntry("p0", "alpha paper", "ab"),
        ProfileEntry("p1", "beta paper", "cd"),
    ],
    "bob": [ProfileEntry("p1", "beta paper", "cd"), ProfileEntry("p2", "gamma paper", "ef")],
}
PROMPT = "Write a title for: something else"
ABOUT_P1 = "Write a title for: beta   paper"


def fitted(profiles=PROFILES, **config) -> ProfileImpostors:
    method = ProfileImpostors(ProfileImpostorsConfig(**config))
    method.use_profiles(profiles)
    method.fit(None, [], None)  # the pairs are not read, nor the model or the folder
    return method


def test_grams_are_the_padded_texts_character_ngrams_counted():
    assert grams("ab", 3) == {" ab": 1, "ab ": 1}
    assert grams("aaaa", 3) == {" aa": 1, "aaa": 2, "aa ": 1}
    assert grams("", 3) == {}  # two spaces hold no trigram


def test_own_nearest_minus_the_nearest_impostor():
    method = fitted()
    # "ab" is ann's alone: 1 - 0 for her, 0 - 1 for bob (his nearest other person is ann)
    assert rewards(method, "ann", PROMPT, "ab") == pytest.approx([1.0])
    assert rewards(method, "bob", PROMPT, "ab") == pytest.approx([-1.0])
    # the co-authored title is as much bob's as ann's: 1 - 1
    assert rewards(method, "ann", PROMPT, "cd") == pytest.approx([0.0])
    # no gram any document holds, and no gram at all: 0
    assert rewards(method, "ann", PROMPT, "xy", "") == pytest.approx([0.0, 0.0])


def test_a_partly_shared_title_is_its_tf_idf_cosine():
    # "abd": " ab" (ann's p0, idf ln(4 / 1.5)) and "abd", "bd " (in no document: ln(4 / 0.5));
    # p0's unit vector holds 1/sqrt(2) at " ab" and "ab "
    seen, unseen = math.log(4 / 1.5), math.log(4 / 0.5)
    cosine = seen / math.sqrt(2) / math.sqrt(seen**2 + 2 * unseen**2)
    assert rewards(fitted(), "ann", PROMPT, "abd") == pytest.approx([cosine])
    assert rewards(fitted(), "bob", PROMPT, "abd") == pytest.approx([-cosine])
    # a second occurrence weighs 1 + ln 2: "ab ab" holds " ab" twice, "ab " twice, "b a" once
    repeated = 1 + math.log(2)
    norm = math.sqrt(2 * (repeated * seen) ** 2 + unseen**2)
    both = 2 * repeated * seen / math.sqrt(2) / norm
    assert rewards(fitted(), "ann", PROMPT, "ab ab") == pytest.approx([both])


def test_the_prompts_own_paper_leaves_the_profile_the_impostors_and_the_counts():
    method = fitted()
    assert method.left_out("ann", ABOUT_P1) == (1,) and method.left_out("bob", ABOUT_P1) == (0,)
    # about p1: ann has only "ab", bob only "ef" (his copy of p1 is left out too); N = 2, so
    # "ab" still reads 1 for ann, and "cd" reads as nobody's
    assert rewards(method, "ann", ABOUT_P1, "ab", "cd", "ef") == pytest.approx([1.0, 0.0, -1.0])
    # the counts: N = 2 and "cd"'s grams in no document: "abc" = " ab" (ln(3 / 1.5)) and "abc",
    # "bc " (ln(3 / 0.5))
    seen, unseen = math.log(3 / 1.5), math.log(3 / 0.5)
    cosine = seen / math.sqrt(2) / math.sqrt(seen**2 + 2 * unseen**2)
    assert rewards(method, "ann", ABOUT_P1, "abc") == pytest.approx([cosine])


def test_alone_in_the_run_the_reward_is_the_own_profiles_cosine():
    method = fitted({"ann": PROFILES["ann"]})
    assert rewards(method, "ann", PROMPT, "ab", "cd", "xy") == pytest.approx([1.0, 1.0, 0.0])
    assert rewards(method, "carl", PROMPT, "ab") == [0.0]  # no profile: 0, as every profile reward


def test_prefix_rewards_end_at_score(tiny_lm):
    method = fitted()
    batch = Batch(["ann", "bob", "ann"], [PROMPT, PROMPT, ABOUT_P1], ["ab cd", "", "ef ab"])
    prefixes = method.prefix_rewards(tiny_lm, batch)
    scores = method.score(tiny_lm, batch)
    for values, (user, prompt, response), score in zip(prefixes, batch, scores, strict=True):
        ids = tiny_lm.response_ids(response)
        assert len(values) == len(ids) and values[-1] == score
        for t in range(len(ids) - 1):
            text = tiny_lm.tokenizer.decode(ids[: t + 1])
            assert values[t] == pytest.approx(rewards(method, user, prompt, text)[0])


def test_a_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="n must be >= 1"):
        ProfileImpostorsConfig(n=0)
    with pytest.raises(ValueError, match="smoothing must be > 0"):
        ProfileImpostorsConfig(smoothing=0)


def test_registered_under_args_in_the_default_methods():
    from pytest_prefalign.registry import MethodName, Registry, add_builtins

    registry = Registry()
    add_builtins(registry)
    assert MethodName("args", "profile_impostors") in registry.default_methods()
    assert registry.reward("profile_impostors").obj is ProfileImpostors
