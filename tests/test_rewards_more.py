"""The reward methods added beside the first five Bradley-Terry heads (``pref``, ``hier_bt``,
``history_bt``): each head's reward worked out by hand on tiny features, what a user without
training pairs gets, training on separable pairs of the tiny model (a title ending "for cats"
or "with dogs", as in test_rewards.py), the cache key and the three ways a reward is read."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_rewards import CATS, DOGS, accuracy, make_pairs

from prefalign_methods.rewards.bt_heads import HeadRewardMethod
from prefalign_methods.rewards.heads import DTYPE, UNKNOWN, TrainPairs
from prefalign_methods.rewards.hier_bt import HierBT, HierBTConfig
from prefalign_methods.rewards.history_bt import HistoryBT, HistoryBTConfig
from prefalign_methods.rewards.more_heads import (
    FactorisedHeads,
    HistoryHead,
    ShrunkPerUserHeads,
    fold_of_each_pair,
    shrinkage_grid,
)
from prefalign_methods.rewards.pref import PReF, PReFConfig
from pytest_prefalign.api import Batch

METHODS = [PReF, HierBT, HistoryBT]


@pytest.fixture(autouse=True)
def user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Features and anything else written to the user cache go to a fresh folder."""
    monkeypatch.setenv("PREFALIGN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tensor(rows: list[list[float]] | list[float]) -> torch.Tensor:
    return torch.tensor(rows, dtype=DTYPE)


def pairs_of(chosen, rejected, user: list[int], n_users: int) -> TrainPairs:
    users = torch.tensor(user, dtype=torch.long)
    counts = torch.bincount(users, minlength=n_users).to(DTYPE)
    return TrainPairs(tensor(chosen), tensor(rejected), users, counts / counts.sum())


# -- each head worked out by hand --------------------------------------------------------------


def test_factorised_reward_by_hand():
    """H = 2, a basis network of 2 units, J = 1 basis reward, two users."""
    config = PReFConfig(basis=1, width=2, l2=0.0, l2_user=0.0)
    heads = FactorisedHeads(2, 2, config, torch.Generator().manual_seed(0))
    with torch.no_grad():
        heads.hidden.copy_(torch.eye(2, dtype=DTYPE))
        heads.bias.zero_()
        heads.out.copy_(tensor([[1.0, -1.0]]))
        heads.weights.copy_(tensor([[2.0], [4.0]]))
    # tanh(atanh 0.5) - tanh(atanh 0.25) = 0.25: the one basis reward
    h = tensor([[math.atanh(0.5), math.atanh(0.25)]] * 3)
    user = torch.tensor([0, 1, UNKNOWN])
    # user 0: 2 x 0.25; user 1: 4 x 0.25; unknown: the mean weight 3 x 0.25
    torch.testing.assert_close(heads(user, h), tensor([0.5, 1.0, 0.75]))
    # every middle dimension broadcasts: (N, T, H) -> (N, T)
    block = h[:, None, :].expand(3, 2, 2)
    torch.testing.assert_close(heads(user, block), tensor([[0.5] * 2, [1.0] * 2, [0.75] * 2]))


def test_shrunk_per_user_reward_by_hand():
    config = HierBTConfig()
    heads = ShrunkPerUserHeads(2, 2, config)
    with torch.no_grad():
        heads.w.copy_(tensor([1.0, 0.0]))
        heads.delta.copy_(tensor([[0.0, 2.0], [-3.0, 0.0]]))
    h = tensor([[1.0, 1.0]] * 3)
    # (w + d_u) . h: 1 + 2 = 3, 1 - 3 = -2; unknown: w . h = 1
    torch.testing.assert_close(heads(torch.tensor([0, 1, UNKNOWN]), h), tensor([3.0, -2.0, 1.0]))


def test_history_reward_by_hand():
    """Two users: user 0 with pairs whose differences are (2, 0) and (0, 4), user 1 with one
    pair of difference (1, 1)."""
    heads = HistoryHead(2, 2, HistoryBTConfig())
    data = pairs_of(
        chosen=[[2.0, 0.0], [0.0, 4.0], [1.0, 1.0]],
        rejected=[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
        user=[0, 0, 1],
        n_users=2,
    )
    heads.prepare(data)
    # m_0 = mean((2, 0), (0, 4)) = (1, 2); m_1 = (1, 1)
    torch.testing.assert_close(heads.history, tensor([[1.0, 2.0], [1.0, 1.0]]))
    # leave one out: pair 0 sees (0, 4), pair 1 sees (2, 0), user 1's one pair sees nothing
    torch.testing.assert_close(heads.train_history, tensor([[0.0, 4.0], [2.0, 0.0], [0.0, 0.0]]))
    with torch.no_grad():
        heads.w.copy_(tensor([1.0, -1.0]))
        heads.scale.fill_(0.5)
        heads.diagonal.copy_(tensor([0.0, 1.5]))
    h = tensor([[3.0, 1.0]] * 3)
    # the map's diagonal s + d = (0.5, 2); user 0: w + (0.5, 2) * m_0 = (1.5, 3) -> 4.5 + 3 =
    # 7.5; user 1: (1.5, 1) -> 5.5; unknown: w -> 3 - 1 = 2
    torch.testing.assert_close(heads(torch.tensor([0, 1, UNKNOWN]), h), tensor([7.5, 5.5, 2.0]))
    # training margins use the leave-one-out history: pair 0's head (1, 7) . (2, 0) = 2,
    # pair 1's (2, -1) . (0, 4) = -4, pair 2's (1, -1) . (1, 1) = 0
    torch.testing.assert_close(heads.margins(data), tensor([2.0, -4.0, 0.0]))
    # the penalty: 0.05 ||w||^2 + 0.05 s^2 + 0.05 ||d||^2 = 0.05 (2 + 0.25 + 2.25)
    torch.testing.assert_close(heads.penalty(data), torch.tensor(0.225, dtype=DTYPE))


def test_shrinkage_grid_and_folds_by_hand():
    grid = shrinkage_grid(HierBTConfig())
    np.testing.assert_allclose(grid, [0.01, 0.1, 1.0, 10.0, 100.0], rtol=1e-12)
    assert shrinkage_grid(SimpleNamespace(shrinkage_min=0.5, shrinkage_max=0.5, steps=1)) == [0.5]
    # each user's pairs in turn over the folds, in the order of the pairs
    folds = fold_of_each_pair(torch.tensor([0, 1, 0, 0, 1, 2, 0]), 3)
    assert folds.tolist() == [0, 0, 1, 2, 1, 0, 0]


def test_hier_bt_with_one_pair_a_user_keeps_the_strongest_shrinkage():
    """Nothing to hold out: every candidate ties and the nearest to the global head wins."""
    data = pairs_of([[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]], [0, 1], 2)
    heads = ShrunkPerUserHeads(2, 2, HierBTConfig())
    heads.prepare(data)
    assert float(heads.shrinkage) == pytest.approx(100.0)
    assert heads.heldout_loss.tolist() == [0.0] * 5


def bradley_terry_pairs(signs: np.ndarray, n: int, dim: int, seed: int) -> TrainPairs:
    """``n`` pairs of random states ``(dim,)``, users in turn; which side user u chose is drawn
    by the Bradley-Terry model with ``r_u(h) = 2 * signs[u] * h[0]``, so that labels are noisy
    and a head that is too sure pays for it on held-out pairs."""
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, dim)), rng.normal(size=(n, dim))
    user = np.arange(n) % len(signs)
    a_wins = rng.random(n) < 1 / (1 + np.exp(-2.0 * signs[user] * (a[:, 0] - b[:, 0])))
    chosen = np.where(a_wins[:, None], a, b)
    rejected = np.where(a_wins[:, None], b, a)
    return pairs_of(chosen.tolist(), rejected.tolist(), user.tolist(), len(signs))


def test_hier_bt_shrinks_users_who_agree_and_frees_users_who_disagree():
    """Four users, 30 pairs each in 20 dimensions. When they prefer opposite ends of dimension
    0, a strong shrinkage pulls them toward a global head that serves none, and the held-out
    likelihood picks a weak one; when they agree, their own deviations only add noise, and it
    picks a strong one."""
    disagree = ShrunkPerUserHeads(4, 20, HierBTConfig())
    disagree.prepare(bradley_terry_pairs(np.array([1.0, -1.0, 1.0, -1.0]), 120, 20, seed=0))
    agree = ShrunkPerUserHeads(4, 20, HierBTConfig())
    agree.prepare(bradley_terry_pairs(np.ones(4), 120, 20, seed=0))
    assert float(disagree.shrinkage) <= 0.1, disagree.heldout_loss
    assert float(agree.shrinkage) >= 10.0, agree.heldout_loss
    # each choice is its lowest held-out loss
    for heads in (disagree, agree):
        grid = shrinkage_grid(HierBTConfig())
        best = grid[int(torch.argmin(heads.heldout_loss))]
        assert float(heads.shrinkage) == pytest.approx(best)


# -- trained on the tiny model -----------------------------------------------------------------


@pytest.fixture(scope="module")
def shared_data():
    users = ["ann", "bob", "cy"]
    return make_pairs(90, users, seed=1), make_pairs(30, users, seed=2)


@pytest.fixture(scope="module")
def fitted(tiny_lm, shared_data, tmp_path_factory) -> dict[str, HeadRewardMethod]:
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


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_users_who_disagree(cls, tiny_lm, tmp_path):
    """Ann prefers cats, Bob dogs: each personal method gets both right on new pairs."""
    users, dog = ["ann", "bob"], frozenset({"bob"})
    method = cls()
    method.fit(tiny_lm, make_pairs(80, users, seed=3, dog_people=dog), tmp_path)
    acc = accuracy(method, tiny_lm, make_pairs(40, users, seed=4, dog_people=dog))
    assert acc["ann"] >= 0.85 and acc["bob"] >= 0.85, acc


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_a_user_without_training_pairs_gets_the_shared_reward(cls, tiny_lm, tmp_path):
    """Ann and Cy prefer cats, Bob dogs: a newcomer gets the reward each method defines for
    one (finite, the same for any unknown name), between the users' own."""
    users, dog = ["ann", "bob", "cy"], frozenset({"bob"})
    method = cls()
    method.fit(tiny_lm, make_pairs(90, users, seed=3, dog_people=dog), tmp_path)
    prompt = ["Write a title for: data"] * 2
    texts = ["Data model" + CATS, "Data model" + DOGS]
    zed = method.score(tiny_lm, Batch(["zed"] * 2, prompt, texts))
    yan = method.score(tiny_lm, Batch(["yan"] * 2, prompt, texts))
    assert np.all(np.isfinite(zed))
    np.testing.assert_array_equal(zed, yan)
    ann = method.score(tiny_lm, Batch(["ann"] * 2, prompt, texts))
    bob = method.score(tiny_lm, Batch(["bob"] * 2, prompt, texts))
    gaps = sorted([ann[0] - ann[1], bob[0] - bob[1]])
    assert gaps[0] < zed[0] - zed[1] < gaps[1]


def test_hier_bt_saves_its_choice(fitted, tiny_lm, shared_data, tmp_path):
    """The shrinkage chosen is part of the cached parameters: a load gives the same rewards
    and the same choice."""
    train, test = shared_data
    first = HierBT()
    first.fit(tiny_lm, train, tmp_path)
    again = HierBT()
    again.fit(tiny_lm, train, tmp_path)
    assert first.trained and not again.trained
    assert float(again._heads.shrinkage) == float(first._heads.shrinkage)  # type: ignore[union-attr]
    args = ([p.user for p in test], [p.prompt for p in test], [p.chosen for p in test])
    np.testing.assert_array_equal(
        first.score(tiny_lm, Batch(*args)), again.score(tiny_lm, Batch(*args))
    )


@pytest.mark.parametrize(
    ("cls", "other"),
    [
        (PReF, PReFConfig(basis=2)),
        (HierBT, HierBTConfig(folds=2)),
        (HistoryBT, HistoryBTConfig(l2_embed=0.5)),
    ],
    ids=lambda x: getattr(x, "name", ""),
)
def test_the_cache_key_changes_with_the_config(cls, other, tiny_lm, shared_data, tmp_path):
    train, _ = shared_data
    assert cls().fingerprint().startswith(f"{cls.name}-v1")
    assert cls().fingerprint() != cls(other).fingerprint()
    first = cls()
    first.fit(tiny_lm, train, tmp_path)
    assert first.trained
    same = cls()
    same.fit(tiny_lm, train, tmp_path)
    assert not same.trained  # loaded
    changed = cls(other)
    changed.fit(tiny_lm, train, tmp_path)
    assert changed.trained  # another config: not the cached parameters
    assert len(list(tmp_path.glob(f"{cls.name}-*.safetensors"))) == 2


@pytest.mark.parametrize("cls", METHODS, ids=lambda c: c.name)
def test_reward_from_hidden_equals_score(cls, fitted, tiny_lm, shared_data):
    """The reward of a whole response is the same from its final hidden state as from
    ``score``, and the last of its prefix rewards; unknown users included."""
    _, test = shared_data
    pairs = test[:4]
    users = [p.user for p in pairs[:3]] + ["nobody"]
    prompts, texts = [p.prompt for p in pairs], [p.chosen for p in pairs]
    method = fitted[cls.name]
    scores = method.score(tiny_lm, Batch(users, prompts, texts))
    hidden = tiny_lm.response_hidden(prompts, texts)
    last = torch.stack([h[-1] for h in hidden])  # (N, H): the state after eos
    got = method.reward_from_hidden(users, last)
    assert got.shape == (4,) and got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), scores, rtol=1e-5, atol=1e-5)
    prefix = method.prefix_rewards(tiny_lm, Batch(users, prompts, texts))
    assert [len(r) for r in prefix] == [h.shape[0] for h in hidden]
    np.testing.assert_allclose([r[-1] for r in prefix], scores, rtol=1e-5, atol=1e-5)
    # one user per leading row, any number of middle dimensions (ARGS: N prompts x k tokens)
    block = torch.stack([h[:3] for h in hidden])  # (4, 3, H)
    rows = method.reward_from_hidden(users, block)
    np.testing.assert_allclose(
        rows.numpy(), np.stack([p[:3] for p in prefix]), rtol=1e-5, atol=1e-5
    )


@pytest.mark.parametrize("cls", [PReF, HierBT, HistoryBT], ids=lambda c: c.name)
def test_two_fits_give_identical_scores(cls, tiny_lm, shared_data, fitted, tmp_path):
    train, test = shared_data
    again = cls()
    again.fit(tiny_lm, train, tmp_path)  # another cache folder: trains again
    assert again.trained
    args = ([p.user for p in test], [p.prompt for p in test], [p.rejected for p in test])
    np.testing.assert_array_equal(
        again.score(tiny_lm, Batch(*args)), fitted[cls.name].score(tiny_lm, Batch(*args))
    )


def test_bad_configs_are_named(tiny_lm, shared_data, tmp_path):
    train, _ = shared_data
    with pytest.raises(ValueError, match="pref: basis and width must be >= 1"):
        PReF(PReFConfig(basis=0)).fit(tiny_lm, train, tmp_path)
    with pytest.raises(ValueError, match="hier_bt: expected 0 < shrinkage_min <= shrinkage_max"):
        HierBT(HierBTConfig(shrinkage_min=1.0, shrinkage_max=0.1)).fit(tiny_lm, train, tmp_path)
    with pytest.raises(ValueError, match="hier_bt: folds must be >= 2"):
        HierBT(HierBTConfig(folds=1)).fit(tiny_lm, train, tmp_path)
