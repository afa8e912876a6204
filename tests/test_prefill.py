"""The prefill store: each prompt run once, shared prefixes once, the same numbers as a plain
pass, within its memory budget."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_prefalign.runtime.prefill import (  # noqa: E402
    BUDGET_ENV,
    CACHE,
    PrefillStore,
    budget_from_env,
    full_attention,
    shared_lengths,
    snug,
)


def random_ids(generator, n, vocab):
    return torch.randint(5, vocab, (n,), generator=generator).tolist()


@pytest.fixture
def prompts(tiny_lm):
    """Three prompts sharing a 50-token prefix (like a user's ICL prompts), two unrelated."""
    g = torch.Generator().manual_seed(0)
    vocab = tiny_lm.model.config.vocab_size
    common = random_ids(g, 50, vocab)
    return [common + random_ids(g, n, vocab) for n in (3, 10, 7)] + [
        random_ids(g, n, vocab) for n in (40, 12)
    ]


def store_of(lm, **kwargs):
    return PrefillStore(lm.model, lm.pad_id, lm.device, **kwargs)


def next_logits(lm, state, token=7):
    """Logits after feeding one more token on a prefill's cache."""
    mask = torch.cat([state.mask, torch.ones_like(state.mask[:, :1])], dim=1)
    positions = state.mask.sum(-1, keepdim=True)
    with torch.inference_mode():
        out = lm.model(
            input_ids=torch.full((mask.shape[0], 1), token),
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{CACHE: state.cache},
        )
    return out.logits[:, -1]


def test_the_model_continues_the_cache_it_is_given_under_the_cache_keyword(tiny_lm, prompts):
    """``CACHE`` names the keyword the installed transformers reads the cache from (a keyword
    it does not know is dropped without a word): a token fed on a prompt's cache gives the
    logits of the whole sequence's pass, and the cache grows by that token."""
    seq = prompts[0]
    with torch.inference_mode():
        whole = tiny_lm.model(input_ids=torch.tensor([seq + [7]])).logits[0, -1]
        first = tiny_lm.model(input_ids=torch.tensor([seq]), use_cache=True)
        cache = getattr(first, CACHE)
        assert cache.get_seq_length() == len(seq)
        alone = tiny_lm.model(input_ids=torch.tensor([[7]])).logits[0, -1]
        then = tiny_lm.model(
            input_ids=torch.tensor([[7]]),
            position_ids=torch.tensor([[len(seq)]]),
            use_cache=True,
            **{CACHE: cache},
        ).logits[0, -1]
    assert cache.get_seq_length() == len(seq) + 1
    assert torch.allclose(then, whole, atol=1e-5)
    assert not torch.allclose(then, alone, atol=1e-3)


def test_shared_prefix_runs_once_and_gives_the_plain_pass_numbers(tiny_lm, prompts):
    store = store_of(tiny_lm)
    plain = store._plain(prompts)
    expected = next_logits(tiny_lm, plain)
    got = store.prefill(prompts)
    # the 50 common tokens once, then 3 + 10 + 7 tails, and the two others whole
    assert store.stats["tokens_run"] == 50 + 3 + 10 + 7 + 40 + 12
    assert store.stats["computed"] == 6  # five prompts and their common prefix
    assert torch.equal(got.mask, plain.mask)
    torch.testing.assert_close(got.last, plain.last, rtol=0, atol=1e-5)
    torch.testing.assert_close(next_logits(tiny_lm, got), expected, rtol=0, atol=1e-5)


def test_a_kept_prompt_is_not_run_again(tiny_lm, prompts):
    store = store_of(tiny_lm)
    first = store.prefill(prompts[::2])
    assert store.holds(prompts[::2]) and not store.holds(prompts)
    ran = store.stats["tokens_run"]
    again = store.prefill(prompts[::-1])  # other batches, other order: the kept rows
    # only the two not asked before; one of them on the common prefix kept from the first call
    assert store.stats["tokens_run"] == ran + 10 + 40
    torch.testing.assert_close(again.last.flip(0)[::2], first.last, rtol=0, atol=0)
    assert store.holds(prompts)


def test_the_budget_evicts_least_recently_used_rows(tiny_lm, prompts):
    probe = store_of(tiny_lm)
    probe.prefill(prompts[3:4])
    row_bytes = probe.size
    store = store_of(tiny_lm, budget_bytes=row_bytes + 1, min_shared=10**6)
    store.prefill(prompts[3:4])
    store.prefill(prompts[4:5])  # 12 tokens more than the budget holds: the first goes
    assert store.size <= store.budget
    assert list(store.rows) == [tuple(prompts[4])]
    nothing = store_of(tiny_lm, budget_bytes=0)
    state = nothing.prefill(prompts)
    assert not nothing.rows and nothing.size == 0
    torch.testing.assert_close(
        state.last, store_of(tiny_lm)._plain(prompts).last, rtol=0, atol=1e-5
    )


def test_shared_lengths_by_hand():
    order = sorted([(1, 2, 3, 4), (1, 2, 3, 5, 6), (1, 2, 9), (7, 8)])
    # (1,2,3,4) and (1,2,3,5,6) share 3; (1,2,9) shares 2 with its neighbour; (7,8) nothing
    assert shared_lengths(order, min_shared=1) == [3, 3, 2, 0]
    assert shared_lengths(order, min_shared=3) == [3, 3, 0, 0]
    # a prompt that another one starts with is that one's prefix, and is not split itself
    assert shared_lengths([(1, 2), (1, 2, 3)], min_shared=1) == [0, 2]
    assert shared_lengths([(0, 1), (1, 2), (1, 2, 3), (1, 2, 4), (1, 5)], min_shared=1) == [
        0,
        1,
        2,
        2,
        1,
    ]


def test_snug_batches_by_hand():
    # one long prompt and three short ones: 1.5 * 100 + 3.5 * 10 = 185 beats 4.5 * 100 = 450
    assert snug([100, 10, 10, 9], 16, 0.5) == [(0, 1), (1, 4)]
    # similar lengths stay together: 4.5 * 100 = 450 beats 1.5 * 100 + 3.5 * 99 = 496.5
    assert snug([100, 99, 98, 97], 16, 0.5) == [(0, 4)]
    # never more than ``most`` rows in a pass
    assert snug([5] * 5, 2, 0.5) == [(0, 1), (1, 3), (3, 5)]
    # a high overhead keeps one pass, as fixed chunks would
    assert snug([100, 10, 10, 9], 16, 100.0) == [(0, 4)]
    assert snug([], 16, 0.5) == []
    with pytest.raises(ValueError, match="most"):
        snug([1], 0, 0.5)


def test_the_store_cuts_its_passes_where_padding_costs_more_than_a_pass(tiny_lm):
    """One long prompt and four short ones: the long one runs alone, so the short ones are not
    padded to its length; the numbers are the plain pass's."""
    g = torch.Generator().manual_seed(3)
    vocab = tiny_lm.model.config.vocab_size
    prompts = [random_ids(g, n, vocab) for n in (90, 8, 9, 7, 8)]
    store = store_of(tiny_lm)
    widths = []
    original = store._extend

    def spy(heads, tails):
        widths.append(sorted(len(t) for t in tails))
        return original(heads, tails)

    store._extend = spy
    got = store.prefill(prompts, batch_size=16)
    assert widths == [[90], [7, 8, 8, 9]]
    plain = store._plain(prompts)
    torch.testing.assert_close(got.last, plain.last, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        next_logits(tiny_lm, got), next_logits(tiny_lm, plain), rtol=0, atol=1e-5
    )


def test_prompts_that_begin_other_prompts_are_run_once(tiny_lm):
    """A staircase: each prompt is the one before plus a few tokens, and two share a longer
    prefix than either shares with the rest. Every token is run once, and the numbers are a
    plain pass's."""
    g = torch.Generator().manual_seed(1)
    vocab = tiny_lm.model.config.vocab_size
    base = random_ids(g, 40, vocab)
    stairs = [base[:n] for n in (34, 36, 38, 40)]
    fork = [base[:36] + random_ids(g, 5, vocab), base[:36] + random_ids(g, 6, vocab)]
    prompts = stairs + fork
    store = store_of(tiny_lm, min_shared=4)
    got = store.prefill(prompts)
    assert store.stats["tokens_run"] == 40 + 5 + 6
    plain = store._plain(prompts)
    torch.testing.assert_close(got.last, plain.last, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        next_logits(tiny_lm, got), next_logits(tiny_lm, plain), rtol=0, atol=1e-5
    )


def test_sliding_window_models_get_a_plain_pass(tiny_lm, prompts):
    config = tiny_lm.model.config
    assert full_attention(config)
    sliding = type("Config", (), {"layer_types": ["full_attention", "sliding_attention"]})()
    assert not full_attention(sliding)
    store = store_of(tiny_lm)
    store.enabled = False
    state = store.prefill(prompts)
    assert not store.rows and store.stats["tokens_run"] == 0
    assert state.mask.shape == (5, 60)


def test_the_lm_scores_the_same_with_and_without_kept_prefills(tiny_lm):
    prompts = ["Generate a title: " + "graph " * 40 + word for word in ("a", "b", "c")]
    responses = ["Graph neural nets", "Speech models", "Graph neural nets"]
    kept = tiny_lm.response_logprobs(prompts, responses)
    hidden = tiny_lm.response_hidden(prompts, responses)
    predicting = tiny_lm.response_hidden(prompts, responses, predicting=True)
    saved = tiny_lm.prefills
    tiny_lm.prefills = store_of(tiny_lm, budget_bytes=0, min_shared=10**6)
    try:
        plain = tiny_lm.response_logprobs(prompts, responses)
        last = tiny_lm.prefill([tiny_lm.prompt_ids(p) for p in prompts]).last
    finally:
        tiny_lm.prefills = saved
    for a, b in zip(kept, plain, strict=True):
        assert a.shape == b.shape
        assert abs(a - b).max() < 1e-5
    for h, p, row in zip(hidden, predicting, last, strict=True):
        torch.testing.assert_close(p[1:], h[:-1])
        torch.testing.assert_close(p[0], row, rtol=0, atol=1e-5)


def test_a_bad_budget_names_the_variable(monkeypatch):
    monkeypatch.setenv(BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match=BUDGET_ENV):
        budget_from_env()
    monkeypatch.setenv(BUDGET_ENV, "1.5")
    assert budget_from_env() == int(1.5 * 2**20)


def test_warming_more_than_the_budget_holds_computes_nothing_ahead(tiny_lm, prompts):
    probe = store_of(tiny_lm)
    probe.prefill(prompts[3:4])
    row = next(iter(probe.rows.values()))
    assert row.nbytes == probe.bytes_per_token * row.length + row.last.numel() * 4
    store = store_of(tiny_lm, budget_bytes=probe.bytes_per_token * 200)  # the five: 222 tokens
    store.warm(prompts)
    assert store.stats["tokens_run"] == 0 and not store.rows
    store.warm(prompts[:3])  # three of 53, 60 and 57 tokens fit; they share 50
    assert store.size <= store.budget
    assert store.stats["tokens_run"] == 50 + 3 + 10 + 7


def test_a_long_chain_of_nested_prompts_runs_without_deep_recursion(tiny_lm):
    g = torch.Generator().manual_seed(2)
    chain = random_ids(g, 200, tiny_lm.model.config.vocab_size)
    prompts = [chain[:n] for n in range(100, 200, 2)]  # 50 prompts, each inside the next
    store = store_of(tiny_lm, min_shared=1)
    got = store.prefill(prompts)
    torch.testing.assert_close(got.last, store._plain(prompts).last, rtol=0, atol=1e-5)


def test_assembled_rows_are_left_padded_with_zeros_and_their_own_columns(tiny_lm):
    from pytest_prefalign.runtime.prefill import ROOM, Row, assemble

    config = tiny_lm.model.config
    layers = config.num_hidden_layers
    heads, dim = config.num_key_value_heads, config.hidden_size // config.num_attention_heads

    def row(length, fill):
        states = tuple(torch.full((heads, length, dim), fill + i) for i in range(layers))
        return Row(states, tuple(-s for s in states), torch.full((config.hidden_size,), fill))

    rows = [row(3, 1.0), row(5, 10.0), row(1, 100.0), row(1, 7.0)]
    lengths = [3, 5, 1, 0]  # the last a placeholder: all padding
    # buffers are allocated, not zeroed: a freed buffer of their size full of NaN first, which
    # the allocator gives them again, so that padding left unwritten shows
    for _ in range(2 * layers):
        torch.full((4, heads, 5 + ROOM, dim), float("nan"))
    state = assemble(config, rows, torch.device("cpu"), lengths=lengths)
    assert state.mask.tolist() == [[0, 0, 1, 1, 1], [1] * 5, [0, 0, 0, 0, 1], [0] * 5]
    for i, layer in enumerate(state.cache.layers):
        keys, values = layer.keys, layer.values  # the columns in use
        assert keys.shape[2] == 5
        for b, n in enumerate(lengths):
            pad = 5 - n
            assert bool((keys[b, :, :pad] == 0).all()) and bool((values[b, :, :pad] == 0).all())
            if n:
                assert torch.equal(keys[b, :, pad:], rows[b].keys[i])
                assert torch.equal(values[b, :, pad:], rows[b].values[i])
    assert state.last[:, 0].tolist() == [1.0, 10.0, 100.0, 0.0]
