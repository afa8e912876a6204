"""The five built-in reward methods over the frozen backbone (global_bt, per_user_bt, lore, vpl,
pal) and their shared features, on the tiny model and synthetic pairs whose preferred response
has a learnable feature: a title that ends "for cats" rather than "with dogs" (or the other way
round, for users who disagree)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from prefalign_methods.rewards import features
from prefalign_methods.rewards.bt_heads import HeadRewardMethod
from prefalign_methods.rewards.global_bt import GlobalBT
from prefalign_methods.rewards.lore import LoRe, LoReConfig
from prefalign_methods.rewards.pal import PAL
from prefalign_methods.rewards.per_user_bt import PerUserBT
from prefalign_methods.rewards.vpl import VPL
from pytest_prefalign.api import Batch, Pair

METHODS = [GlobalBT, PerUserBT, LoRe, VPL, PAL]
PERSONAL = [PerUserBT, LoRe, VPL, PAL]
WORDS = (
    "model learning neural translation language data text speech graph corpus evaluation "
    "analysis parsing retrieval dialogue summarization"
).split()
CATS, DOGS = " for cats", " with dogs"


def make_pairs(
    n: int, users: list[str], seed: int, dog_people: frozenset[str] = frozenset()
) -> list[Pair]:
    """``n`` pairs, users in turn: the same random title stem, ending CATS (chosen) or DOGS,
    swapped for the users in ``dog_people``."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        user = users[i % len(users)]
        stem = " ".join(rng.sample(WORDS, 3)).capitalize()
        good, bad = stem + CATS, stem + DOGS
        if user in dog_people:
            good, bad = bad, good
        prompt = "Write a title for: " + " ".join(rng.sample(WORDS, 6))
        pairs.append(Pair(f"{seed}/{i}", user, prompt, good, bad))
    return pairs


def accuracy(method: HeadRewardMethod, lm, pairs: list[Pair]) -> dict[str, float]:
    """RM accuracy per user (ties 1/2) and over all pairs (key "all")."""
    users, prompts = [p.user for p in pairs], [p.prompt for p in pairs]
    good = method.score(lm, Batch(users, prompts, [p.chosen for p in pairs]))
    bad = method.score(lm, Batch(users, prompts, [p.rejected for p in pairs]))
    outcome = (good > bad) + 0.5 * (good == bad)
    per_user = {u: float(np.mean(outcome[[v == u for v in users]])) for u in sorted(set(users))}
    return {**per_user, "all": float(np.mean(outcome))}


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Features and anything else written to the user cache go to a fresh folder."""
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def shared_data() -> tuple[list[Pair], list[Pair]]:
    users = ["ann", "bob", "cy"]
    return make_pairs(90, users, seed=1), make_pairs(30, users, seed=2)


@pytest.fixture(scope="module")
def fitted(tiny_lm, shared_data, tmp_path_factory) -> dict[str, HeadRewardMethod]:
    """Each method fitted once on the shared-preference data (module scope: fits take a
    second or two each)."""
    train, _ = shared_data
    out = {}
    for cls in METHODS:
        method = cls()
        method.fit(tiny_lm, train, tmp_path_factory.mktemp(cls.name))
        out[cls.name] = method
    return out


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_learns_a_shared_preference(cls, fitted, tiny_lm, shared_data):
    method = fitted[cls.name]
    assert method.trained
    assert method.capabilities == {"prefix", "hidden"}
    assert accuracy(method, tiny_lm, shared_data[1])["all"] >= 0.85


def test_methods_are_different_models(fitted, tiny_lm, shared_data):
    _, test = shared_data
    scores = {
        name: m.score(
            tiny_lm,
            Batch([p.user for p in test], [p.prompt for p in test], [p.chosen for p in test]),
        )
        for name, m in fitted.items()
    }
    names = sorted(scores)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not np.allclose(scores[a], scores[b]), (a, b)


@pytest.mark.parametrize("cls", [GlobalBT, PerUserBT, LoRe, VPL, PAL], ids=lambda c: c.name)
def test_users_who_disagree(cls, tiny_lm, tmp_path):
    """Ann prefers cats, Bob dogs: a personal method gets both right, the global head can only
    side with one of them on any pair, about half right overall."""
    users, dog = ["ann", "bob"], frozenset({"bob"})
    method = cls()
    method.fit(tiny_lm, make_pairs(80, users, seed=3, dog_people=dog), tmp_path)
    acc = accuracy(method, tiny_lm, make_pairs(40, users, seed=4, dog_people=dog))
    if cls is GlobalBT:
        assert 0.3 <= acc["all"] <= 0.7
    else:
        assert acc["ann"] >= 0.85 and acc["bob"] >= 0.85, acc


def test_per_user_heads_differ_and_unknown_user_gets_the_global_head(tiny_lm, tmp_path):
    users, dog = ["ann", "bob"], frozenset({"bob"})
    method = PerUserBT()
    method.fit(tiny_lm, make_pairs(80, users, seed=3, dog_people=dog), tmp_path)
    texts = ["Data model" + CATS, "Data model" + DOGS]
    prompt = ["Write a title for: data"] * 2
    ann = method.score(tiny_lm, Batch(["ann"] * 2, prompt, texts))
    bob = method.score(tiny_lm, Batch(["bob"] * 2, prompt, texts))
    new = method.score(tiny_lm, Batch(["zed"] * 2, prompt, texts))
    assert ann[0] > ann[1] and bob[0] < bob[1]
    # the global head is what the two users share; the deviations are penalised equally, so
    # the newcomer's preference is much weaker than either user's
    assert abs(new[0] - new[1]) < min(abs(ann[0] - ann[1]), abs(bob[0] - bob[1]))


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_unknown_user_gets_a_finite_score(cls, fitted, tiny_lm, shared_data):
    _, test = shared_data
    method = fitted[cls.name]
    scores = method.score(
        tiny_lm, Batch(["nobody"] * len(test), [p.prompt for p in test], [p.chosen for p in test])
    )
    assert scores.shape == (len(test),) and np.all(np.isfinite(scores))


@pytest.mark.parametrize("cls", [GlobalBT, LoRe, VPL, PAL], ids=lambda c: c.name)
def test_two_fits_give_identical_scores(cls, tiny_lm, shared_data, fitted, tmp_path):
    train, test = shared_data
    again = cls()
    again.fit(tiny_lm, train, tmp_path)  # another cache folder: trains again
    assert again.trained
    args = ([p.user for p in test], [p.prompt for p in test], [p.rejected for p in test])
    np.testing.assert_array_equal(
        again.score(tiny_lm, Batch(*args)), fitted[cls.name].score(tiny_lm, Batch(*args))
    )


def test_second_fit_loads_from_the_cache(tiny_lm, shared_data, tmp_path):
    train, test = shared_data
    folder = tmp_path / "rewards"
    first = LoRe()
    first.fit(tiny_lm, train, folder)
    files = sorted(folder.iterdir())
    assert [f.suffix for f in files if not f.name.endswith(".lock")] == [".json", ".safetensors"]
    # the lock files aside: an older filelock (3.x, 4.0) truncates, so touches, one at each lock
    stamps = [f.stat().st_mtime_ns for f in files if not f.name.endswith(".lock")]
    second = LoRe()
    second.fit(tiny_lm, train, folder)
    assert first.trained and not second.trained
    again = sorted(f for f in folder.iterdir() if not f.name.endswith(".lock"))
    assert [f.stat().st_mtime_ns for f in again] == stamps
    args = ([p.user for p in test], [p.prompt for p in test], [p.chosen for p in test])
    np.testing.assert_array_equal(
        first.score(tiny_lm, Batch(*args)), second.score(tiny_lm, Batch(*args))
    )
    # another configuration or other pairs: not the cached parameters
    other = LoRe(LoReConfig(rank=2))
    other.fit(tiny_lm, train, folder)
    assert other.trained
    fewer = LoRe()
    fewer.fit(tiny_lm, train[:-1], folder)
    assert fewer.trained


@pytest.mark.parametrize("broken", [".safetensors", ".json"])
def test_a_truncated_parameter_file_is_a_miss_named_then_trained_again(
    tiny_lm, shared_data, tmp_path, broken
):
    from pytest_prefalign.cache import CacheWarning

    train, test = shared_data
    first = GlobalBT()
    first.fit(tiny_lm, train, tmp_path)
    (path,) = tmp_path.glob(f"global_bt-*{broken}")
    path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    again = GlobalBT()
    with pytest.warns(CacheWarning, match=r"unreadable cache entry .*global_bt-.*safetensors"):
        again.fit(tiny_lm, train, tmp_path)
    assert again.trained
    args = ([p.user for p in test], [p.prompt for p in test], [p.chosen for p in test])
    np.testing.assert_array_equal(
        first.score(tiny_lm, Batch(*args)), again.score(tiny_lm, Batch(*args))
    )
    third = GlobalBT()
    third.fit(tiny_lm, train, tmp_path)  # the files written again are whole
    assert not third.trained


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_prefix_rewards_end_with_score(cls, fitted, tiny_lm, shared_data):
    _, test = shared_data
    pairs = test[:6]
    args = (
        [p.user for p in pairs] + ["nobody"],
        [p.prompt for p in pairs] + ["Hi"],
        [p.chosen for p in pairs] + ["Hello there"],
    )
    method = fitted[cls.name]
    prefix = method.prefix_rewards(tiny_lm, Batch(*args))
    lengths = [len(tiny_lm.response_ids(r)) for r in args[2]]
    assert [len(r) for r in prefix] == lengths
    np.testing.assert_allclose(
        [r[-1] for r in prefix], method.score(tiny_lm, Batch(*args)), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_reward_from_hidden_matches_prefix_rewards(cls, fitted, tiny_lm, shared_data):
    _, test = shared_data
    pairs = test[:4]
    users = [p.user for p in pairs[:3]] + ["nobody"]
    prompts, texts = [p.prompt for p in pairs], [p.rejected for p in pairs]
    method = fitted[cls.name]
    prefix = method.prefix_rewards(tiny_lm, Batch(users, prompts, texts))
    hidden = tiny_lm.response_hidden(prompts, texts)
    for user, h, expected in zip(users, hidden, prefix, strict=True):
        got = method.reward_from_hidden([user], h[None])
        assert got.shape == (1, h.shape[0]) and got.dtype == torch.float32
        np.testing.assert_allclose(got[0].numpy(), expected, rtol=1e-5, atol=1e-5)
    # one user per leading row, any number of middle dimensions (ARGS: N prompts x k tokens)
    block = torch.stack([h[:3] for h in hidden])  # (4, 3, H)
    rows = method.reward_from_hidden(users, block)
    assert rows.shape == (4, 3)
    np.testing.assert_allclose(
        rows.numpy(), np.stack([p[:3] for p in prefix]), rtol=1e-5, atol=1e-5
    )


def test_reward_from_hidden_checks_its_input(fitted):
    method = fitted["global_bt"]
    with pytest.raises(ValueError, match=r"N = 2 users, got shape \(3, 5, 32\)"):
        method.reward_from_hidden(["a", "b"], torch.zeros(3, 5, 32))
    with pytest.raises(ValueError, match="hidden size 7 but the heads were trained on 32"):
        method.reward_from_hidden(["a"], torch.zeros(1, 7))


def test_score_before_fit_and_fit_without_pairs(tiny_lm, tmp_path):
    with pytest.raises(RuntimeError, match="call fit"):
        VPL().score(tiny_lm, Batch(["a"], ["p"], ["r"]))
    with pytest.raises(ValueError, match="pal: no training pairs"):
        PAL().fit(tiny_lm, [], tmp_path)


def test_fingerprint_is_name_and_config():
    assert GlobalBT().fingerprint() == GlobalBT().fingerprint()
    assert LoRe().fingerprint().startswith("lore-v1")
    assert '"rank": 4' in LoRe().fingerprint()
    assert LoRe().fingerprint() != LoRe(LoReConfig(rank=3)).fingerprint()
    assert len({cls().fingerprint() for cls in METHODS}) == len(METHODS)


def test_features_are_memoised_and_cached_on_disk(tiny_lm, tmp_path, monkeypatch):
    calls: list[int] = []
    forward = tiny_lm.response_hidden

    def counting(prompts, responses, **kw):
        calls.append(len(prompts))
        return forward(prompts, responses, **kw)

    monkeypatch.setattr(tiny_lm, "response_hidden", counting)
    features.clear_memo()
    prompts, texts = ["Write a title for: cats"] * 3, ["A", "B", "A"]
    first = features.response_features(tiny_lm, prompts, texts, cache_dir=tmp_path)
    assert first.shape == (3, 32) and calls == [2]  # the repeated text is computed once
    torch.testing.assert_close(first[0], first[2])
    assert torch.equal(features.response_features(tiny_lm, prompts, texts), first)
    assert calls == [2]  # from the memo
    features.clear_memo()
    assert torch.equal(
        features.response_features(tiny_lm, prompts, texts, cache_dir=tmp_path), first
    )
    assert calls == [2]  # from the safetensors file
    # the whole-response feature is the last row of response_hidden
    last = forward(prompts[:1], texts[:1])[0][-1]
    torch.testing.assert_close(first[0], last)


USER_CACHE = os.environ.get("PREFALIGN_CACHE")  # before the autouse fixture redirects it
REAL_DATA = Path(
    os.environ.get("PREFALIGN_DATA") or Path(__file__).resolve().parents[2] / "shared" / "data"
)


@pytest.mark.slow
def test_real_model_on_pref_lamp_gives_five_different_models(tmp_path, monkeypatch):
    """SmolLM2-135M features of real Pref-LaMP pairs (two authors, their last four profile
    papers, six test pairs; the rejected title is the most similar paper's by another author,
    which needs no generation): every method trains, scores every test pair finitely, and no
    two methods give the same rewards."""
    from prefalign_suites.pref_lamp.suite import PrefLamp
    from pytest_prefalign.runtime.models import ModelSpec, load_lm

    if not (REAL_DATA / "acl-anthology").is_dir():
        pytest.skip(f"the shared ACL Anthology data is not at {REAL_DATA}")
    # the converted model from the user's own cache (converting takes minutes), the rest in tmp
    with monkeypatch.context() as env:
        if USER_CACHE is None:
            env.delenv("PREFALIGN_CACHE")
        else:
            env.setenv("PREFALIGN_CACHE", USER_CACHE)
        lm = load_lm(ModelSpec("135m", "embedded:smollm2-135m"), device="cpu")
    data = PrefLamp().load(
        REAL_DATA, limit=2, options={"negatives": "other_author", "max_train_pairs": "4"}
    )
    assert len(data.train_pairs) == 8 and len(data.test_pairs) >= 6
    test = data.test_pairs[:6]  # the 135M on one thread reads ~150 tokens/s: keep it short
    # both sides in one call: each prompt is prefilled once
    args = (
        [p.user for p in test] * 2,
        [p.prompt for p in test] * 2,
        [p.chosen for p in test] + [p.rejected for p in test],
    )
    margins = {}
    for cls in METHODS:
        method = cls()
        method.fit(lm, data.train_pairs, tmp_path / cls.name)
        assert method.info["train_accuracy"] >= 0.9  # 576 dimensions, 8 pairs
        scores = method.score(lm, Batch(*args))
        assert np.all(np.isfinite(scores))
        margins[cls.name] = scores[: len(test)] - scores[len(test) :]
    names = sorted(margins)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not np.allclose(margins[a], margins[b], rtol=1e-3), (a, b)
