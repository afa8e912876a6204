"""The LM wrapper on the tiny random model: tokenization, generation, teacher-forced scoring."""

from __future__ import annotations

import copy
import math
import string
import types
from typing import Any

import numpy as np
import pytest
import torch

from pytest_prefalign.runtime.decoding import Plain, Step, gumbel_choice, nucleus
from pytest_prefalign.runtime.lm import LM, clean_text, end_of_turn_id
from pytest_prefalign.runtime.tiny import IM_END, IM_START, build_tiny_lm, build_tokenizer

PROMPTS = [
    "Generate a title for the following abstract of a paper: We study reward models for users.",
    "Hi",
    "Another prompt, about language models and translation between many languages.",
]
# prompts repeat with several responses (pairs share their prompt) and lengths differ
SCORED_PROMPTS = [PROMPTS[0], PROMPTS[1], PROMPTS[0], PROMPTS[2], PROMPTS[1], PROMPTS[0]]
SCORED_RESPONSES = [
    "Reward models fail",
    "Hello there, how are you today?",
    "Why rewards fail",
    "",
    "x",
    "Personal reward models and what users write",
]


def _concat_forward(lm: LM, prompt: str, response: str) -> tuple[list[int], list[int], Any]:
    """A plain forward pass over prompt ids + response ids, no padding, no cache."""
    p, r = lm.prompt_ids(prompt), lm.response_ids(response)
    with torch.no_grad():
        out = lm.model(torch.tensor([p + r]), output_hidden_states=True)
    return p, r, out


# --- the tiny model and its tokenizer ------------------------------------------------------


def test_tiny_is_deterministic_and_leaves_the_global_rng_alone() -> None:
    state = torch.random.get_rng_state()
    a, b, other = build_tiny_lm(0), build_tiny_lm(0), build_tiny_lm(1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert a.fingerprint == b.fingerprint != other.fingerprint
    theirs = b.model.state_dict()
    for name, x in a.model.state_dict().items():
        assert torch.equal(x, theirs[name]), name
    assert not torch.equal(a.model.lm_head.weight, other.model.lm_head.weight)
    assert a.prompt_ids(PROMPTS[0]) == b.prompt_ids(PROMPTS[0])


def test_tiny_tokenizer_round_trips_text_and_keeps_specials_whole(tiny_lm: LM) -> None:
    tok = tiny_lm.tokenizer
    text = string.printable + " naïve café ✓"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == text
    assert len(ids) < len(text.encode())  # BPE merges, not one token per byte
    assert tok(IM_END, add_special_tokens=False)["input_ids"] == [tiny_lm.eos_id]
    assert tiny_lm.eos_id == tok.convert_tokens_to_ids(IM_END) != tiny_lm.pad_id


def test_render_follows_the_smollm2_chat_layout(tiny_lm: LM) -> None:
    rendered = tiny_lm.render("Hi")
    assert rendered == (
        "<|im_start|>system\nYou are a tiny random test model.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = tiny_lm.prompt_ids("Hi")
    start = tiny_lm.tokenizer.convert_tokens_to_ids(IM_START)
    assert ids[0] == start and ids.count(start) == 3  # no extra BOS in front of the template
    assert tiny_lm.tokenizer.decode(ids) == rendered


def test_response_ids_are_the_response_alone_then_end_of_turn(tiny_lm: LM) -> None:
    alone = tiny_lm.tokenizer("A title", add_special_tokens=False)["input_ids"]
    assert tiny_lm.response_ids("A title") == alone + [tiny_lm.eos_id]
    assert tiny_lm.response_ids("") == [tiny_lm.eos_id]


def test_end_of_turn_comes_from_the_template_else_eos() -> None:
    tok = build_tokenizer()
    tok.eos_token = "<|endoftext|>"  # the turn still ends with <|im_end|> under the template
    assert end_of_turn_id(tok) == tok.convert_tokens_to_ids(IM_END)
    tok.chat_template = None
    assert end_of_turn_id(tok) == tok.convert_tokens_to_ids("<|endoftext|>")


def test_without_a_chat_template_the_prompt_is_followed_by_a_newline(tiny_lm: LM) -> None:
    tok = build_tokenizer()
    tok.chat_template = None
    plain = LM(tiny_lm.model, tok, label="t", name="t", source="tiny", fingerprint="x")
    assert plain.render("Hi") == "Hi\n"
    assert plain.prompt_ids("Hi") == tok("Hi\n")["input_ids"]


# --- generation ----------------------------------------------------------------------------


def test_clean_text_keeps_the_first_nonempty_line_with_single_spaces() -> None:
    assert clean_text("  \n  A   title\tabout\u00a0x \nsecond line") == "A title about x"
    assert clean_text("\n\n") == ""


def test_greedy_generation_batched_equals_one_by_one(tiny_lm: LM) -> None:
    prompts = PROMPTS + [PROMPTS[1]]  # a repeated prompt keeps its place
    batched = tiny_lm.generate(prompts, max_new_tokens=12, batch_size=2)
    single = [tiny_lm.generate([p], max_new_tokens=12, batch_size=1)[0] for p in prompts]
    assert batched == single
    assert batched[1] == batched[3]
    assert tiny_lm.generate(PROMPTS[:1], max_new_tokens=12, num_samples=3) == [batched[0] * 3]
    assert len({texts[0] for texts in batched[:3]}) == 3  # the prompt matters
    assert all(len(texts) == 1 and "\n" not in texts[0] for texts in batched)


def test_seeded_sampling_is_reproducible_and_independent_of_batching(tiny_lm: LM) -> None:
    kwargs: dict[str, Any] = dict(max_new_tokens=8, sample=True, num_samples=4)
    batched = tiny_lm.generate(PROMPTS, batch_size=5, seed=3, **kwargs)
    assert batched == [tiny_lm.generate([p], batch_size=4, seed=3, **kwargs)[0] for p in PROMPTS]
    assert all(len(set(texts)) > 1 for texts in batched)  # samples differ from one another
    assert tiny_lm.generate(PROMPTS, batch_size=5, seed=4, **kwargs) != batched


def test_samples_start_from_the_kept_prefills_with_the_texts_of_a_repeated_batch() -> None:
    # with the prompts kept, each sample's row is copied from its prompt's kept prefill; without
    # the store, the batch of prompts is prefilled and each row repeated: the same texts
    kwargs: dict[str, Any] = dict(max_new_tokens=8, sample=True, num_samples=3, seed=5)
    kept = build_tiny_lm(0)
    asked = kept.prefills.stats["asked"]
    held = kept.generate(PROMPTS, batch_size=6, **kwargs)
    # warmed once per prompt, then asked once per sample row
    assert kept.prefills.stats["asked"] - asked == len(PROMPTS) + 3 * len(PROMPTS)
    plain = build_tiny_lm(0)
    plain.prefills.enabled = False
    assert plain.generate(PROMPTS, batch_size=6, **kwargs) == held


def test_gumbel_choice_draws_from_the_tempered_softmax() -> None:
    logits = torch.log(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    n = 4000
    gens = [torch.Generator().manual_seed(s) for s in range(n)]
    for temperature in (1.0, 2.0):
        draws = gumbel_choice(logits.expand(n, 4), temperature, gens)
        freq = np.bincount(draws, minlength=4) / n
        expected = np.array([1, 2, 3, 4]) ** (1 / temperature)
        expected = expected / expected.sum()
        sigma = np.sqrt(expected * (1 - expected) / n)
        assert np.all(np.abs(freq - expected) < 4 * sigma), (freq, expected)


def test_gumbel_choice_is_argmax_of_scaled_logits_plus_each_rows_own_gumbel_noise() -> None:
    """The draw, worked out row by row: u from the row's generator, -log(-log u) added to
    logits / T; the argmax is the token (the recorded figures' samples depend on these bits)."""
    logits = torch.randn(5, 300, generator=torch.Generator().manual_seed(7))
    got = gumbel_choice(logits, 0.7, [torch.Generator().manual_seed(s) for s in range(5)])
    want = []
    for s in range(5):
        u = torch.rand(300, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        noise = -torch.log(-torch.log(u.clamp(min=1e-300)))
        want.append(int((logits[s].double() / 0.7 + noise).argmax()))
    assert got == want


@pytest.mark.parametrize("top_p", [1e-9, 0.5, 0.9, 0.999])
def test_a_draw_from_a_nucleus_cut_is_the_draw_with_noise_at_every_token(top_p: float) -> None:
    """The noise is computed at the kept tokens only; the draw must be the one the whole
    vocabulary's noise gives (the recorded samples depend on these bits)."""
    logits = torch.randn(8, 3000, generator=torch.Generator().manual_seed(3)) * 3
    logits[2, :50] = logits[2].max()  # 50 tokens tied at the top: a nucleus of ties
    cut = nucleus(logits, top_p, 0.7)
    tied = int(torch.isfinite(cut[2, :50]).sum())
    assert tied == {1e-9: 1, 0.5: 26, 0.9: 47, 0.999: 50}[top_p]  # lower ids first at the edge
    got = gumbel_choice(cut, 0.7, gens_of(8))
    want = []
    for s, row in enumerate(cut):
        u = torch.rand(3000, generator=torch.Generator().manual_seed(s), dtype=torch.float64)
        want.append(int((row.double() / 0.7 - torch.log(-torch.log(u.clamp(min=1e-300)))).argmax()))
    assert got == want
    assert all(torch.isfinite(cut[r, t]) for r, t in enumerate(got))
    # a token forced with +inf is drawn, cut or not, as with the noise everywhere
    forced = torch.tensor([[float("-inf"), float("inf"), 0.0], [0.0, 5.0, float("inf")]])
    assert gumbel_choice(forced, 0.7, gens_of(2)) == [1, 2]


def test_nucleus_keeps_the_fewest_likeliest_tokens_reaching_top_p() -> None:
    # probabilities 0.5, 0.3, 0.15, 0.05 (in another order): ranked 0.5, 0.3 | 0.15, 0.05
    logits = torch.log(torch.tensor([[0.15, 0.5, 0.05, 0.3]]))
    assert kept(nucleus(logits, 0.7)) == [1, 3]  # 0.5 < 0.7, 0.5 + 0.3 reaches it
    assert kept(nucleus(logits, 0.8 - 1e-9)) == [1, 3]
    assert kept(nucleus(logits, 0.81)) == [0, 1, 3]
    assert kept(nucleus(logits, 0.4)) == [1]  # the likeliest token always stays
    assert kept(nucleus(logits, 1e-9)) == [1]
    assert nucleus(logits, 1.0) is logits  # no cut: the logits themselves
    # the kept logits are unchanged, the others -inf
    cut = nucleus(logits, 0.7)
    assert torch.equal(cut[0, [1, 3]], logits[0, [1, 3]])
    assert torch.all(cut[0, [0, 2]] == float("-inf"))
    # the nucleus of the tempered distribution: at T = 2 the probabilities are flatter
    # (sqrt: 0.39, 0.31, 0.22, 0.12 after normalising), so 0.7 needs three tokens
    assert kept(nucleus(logits, 0.7, temperature=2.0)) == [0, 1, 3]
    # equal logits are ranked by token id: the same cut on every run
    assert kept(nucleus(torch.zeros(1, 4), 0.5)) == [0, 1]
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="top_p"):
            nucleus(logits, bad)


def nucleus_by_sorting(logits: torch.Tensor, top_p: float, temperature: float) -> torch.Tensor:
    """The nucleus by its definition: every token sorted by probability (a stable sort: equal
    ones by id), kept while the tokens before it hold less than ``top_p``; a mask."""
    ordered, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = torch.softmax(ordered.double() / temperature, dim=-1)
    before = torch.nn.functional.pad(probs.cumsum(-1)[..., :-1], (1, 0))
    inside = before < top_p
    inside[..., 0] = True
    return torch.zeros_like(inside).scatter(-1, order, inside)


@pytest.mark.parametrize("scale", [0.5, 3.0, 12.0])  # flat (the search widens) to peaked
def test_nucleus_equals_its_definition_by_sorting(scale: float) -> None:
    g = torch.Generator().manual_seed(int(scale * 10))
    logits = torch.randn(16, 3000, generator=g) * scale
    logits[:, 100:400] = logits[:, 100:101]  # ties, some of them at a nucleus's edge
    logits[3] = 0.0  # a row of equal logits: the lowest ids
    for top_p in (1e-9, 0.1, 0.5, 0.9, 0.97, 0.999999):
        for temperature in (0.7, 1.0, 1.6):
            got = torch.isfinite(nucleus(logits, top_p, temperature))
            assert torch.equal(got, nucleus_by_sorting(logits, top_p, temperature)), (
                top_p,
                temperature,
            )


def kept(cut: torch.Tensor) -> list[int]:
    """The tokens a nucleus cut keeps in its first row."""
    return torch.isfinite(cut[0]).nonzero()[:, 0].tolist()


def test_a_draw_from_the_nucleus_never_leaves_it_and_keeps_the_ratios_inside() -> None:
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    n = 4000
    draws = gumbel_choice(nucleus(logits.expand(n, 4), 0.7), 1.0, gens_of(n))
    freq = np.bincount(draws, minlength=4) / n
    assert freq[2] == 0 and freq[3] == 0  # outside the nucleus: never drawn
    expected = np.array([0.5, 0.3]) / 0.8  # renormalised within it
    sigma = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(freq[:2] - expected) < 4 * sigma), freq
    # the same generators without the cut draw the tail: the test can tell
    whole = np.bincount(gumbel_choice(logits.expand(n, 4), 1.0, gens_of(n)), minlength=4)
    assert whole[2] + whole[3] > 0.1 * n


def gens_of(n: int) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(s) for s in range(n)]


class WatchedNucleus(Plain):
    """Plain sampling that records, per step, each running row's drawn token and its
    step's nucleus (and the mass outside it)."""

    def __init__(self, lm: LM, temperature: float, gens, top_p: float) -> None:
        super().__init__(lm, temperature, gens, top_p=top_p)
        self.seen: list[tuple[int, set[int], float]] = []

    def choose(self, step: Step):
        choice = super().choose(step)
        logits = self.lm.logits_from_hidden(step.hidden)
        probs = torch.softmax(logits.double() / self.temperature, -1)
        for row, token in enumerate(choice.tokens):
            inside = torch.isfinite(nucleus(logits[row : row + 1], self.top_p, self.temperature))
            kept = set(inside[0].nonzero()[:, 0].tolist())
            self.seen.append((token, kept, float(probs[row][~inside[0]].sum())))
        return choice


def test_sampling_with_top_p_draws_only_from_each_steps_nucleus(
    tiny_lm: LM, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_prefalign.runtime.lm as lm_module

    rules: list[WatchedNucleus] = []

    def watched(lm, temperature, gens, *, top_p=1.0):
        rules.append(WatchedNucleus(lm, temperature, gens, top_p))
        return rules[-1]

    monkeypatch.setattr(lm_module, "Plain", watched)
    out = tiny_lm.generate(
        PROMPTS, max_new_tokens=8, sample=True, temperature=1.3, top_p=0.5, num_samples=6, seed=1
    )
    seen = [s for rule in rules for s in rule.seen]
    assert len(seen) > 50
    assert all(token in kept for token, kept, _ in seen)
    # a real cut: most steps left out tokens holding a good share of the probability
    assert np.mean([outside > 0.3 for _, _, outside in seen]) > 0.5
    assert all(len(set(texts)) > 1 for texts in out)  # still a draw, not greedy


def test_top_p_near_zero_is_greedy_and_top_p_one_is_plain_sampling(tiny_lm: LM) -> None:
    greedy = tiny_lm.generate(PROMPTS, max_new_tokens=8)
    for seed in (0, 1):
        nearly = tiny_lm.generate(
            PROMPTS, max_new_tokens=8, sample=True, top_p=1e-9, num_samples=3, seed=seed
        )
        assert nearly == [texts * 3 for texts in greedy]
    kwargs: dict[str, Any] = dict(max_new_tokens=8, sample=True, num_samples=3, seed=2)
    assert tiny_lm.generate(PROMPTS, top_p=1.0, **kwargs) == tiny_lm.generate(PROMPTS, **kwargs)
    assert tiny_lm.generate(PROMPTS, top_p=0.5, **kwargs) != tiny_lm.generate(PROMPTS, **kwargs)


def _constant_head(lm: LM, token: int) -> LM:
    """A copy of the LM whose next token is always ``token``."""
    model = copy.deepcopy(lm.model)
    head = torch.nn.Linear(model.config.hidden_size, model.config.vocab_size, bias=True)
    torch.nn.init.zeros_(head.weight)
    with torch.no_grad():
        head.bias.zero_()
        head.bias[token] = 10.0
    model.lm_head = head
    return LM(model, lm.tokenizer, label="c", name="c", source="tiny", fingerprint="c")


def test_generation_stops_at_end_of_turn_and_at_a_complete_line(tiny_lm: LM) -> None:
    tok = tiny_lm.tokenizer
    calls: list[int] = []
    for token, expected, steps in [
        (tok.convert_tokens_to_ids("a"), "a" * 7, 6),  # runs to max_new_tokens
        (tiny_lm.eos_id, "", 0),  # stops after the prefill
        (tok.convert_tokens_to_ids("Ċ"), "", 6),  # newlines only: no line is ever complete
    ]:
        lm = _constant_head(tiny_lm, token)
        calls.clear()
        # every pass of the transformer body: the prompts' prefill (in as many passes as
        # their lengths call for), then one per step after the first token
        hook = lm.model.base_model.register_forward_hook(lambda *args: calls.append(1))
        assert lm.generate(["Hi", PROMPTS[0]], max_new_tokens=7) == [[expected], [expected]]
        hook.remove()
        assert lm.prefills.stats["passes"] >= 1
        assert len(calls) == lm.prefills.stats["passes"] + steps
    a, newline = tok.convert_tokens_to_ids("a"), tok.convert_tokens_to_ids("Ċ")
    assert tiny_lm.finished([newline, a, newline]) and not tiny_lm.finished([newline, a])


def test_generation_validates_its_arguments(tiny_lm: LM) -> None:
    with pytest.raises(ValueError, match="batch_size"):
        tiny_lm.generate(PROMPTS, batch_size=0)
    with pytest.raises(ValueError, match="temperature"):
        tiny_lm.generate(PROMPTS, sample=True, temperature=0.0)
    for top_p in (0.0, 1.01):
        with pytest.raises(ValueError, match="top_p"):
            tiny_lm.generate(PROMPTS, sample=True, top_p=top_p)
    assert tiny_lm.generate([]) == []


# --- teacher-forced scoring ----------------------------------------------------------------


def test_response_logprobs_match_a_plain_forward_pass(tiny_lm: LM) -> None:
    got = tiny_lm.response_logprobs(SCORED_PROMPTS, SCORED_RESPONSES, batch_size=4)
    for prompt, response, values in zip(SCORED_PROMPTS, SCORED_RESPONSES, got, strict=True):
        p, r, out = _concat_forward(tiny_lm, prompt, response)
        logp = torch.log_softmax(out.logits[0].double(), dim=-1)
        # y_t is predicted at the position before it: the prompt's last token for y_0
        hand = np.array([logp[len(p) + t - 1, r[t]].item() for t in range(len(r))])
        assert values.dtype == np.float64 and values.shape == (len(r),)
        np.testing.assert_allclose(values, hand, atol=1e-4)
        assert np.all(values < 0)


@pytest.mark.parametrize("batch_size", [1, 2, 3, 16])
def test_scoring_batched_equals_one_by_one(tiny_lm: LM, batch_size: int) -> None:
    logprobs = tiny_lm.response_logprobs(SCORED_PROMPTS, SCORED_RESPONSES, batch_size=batch_size)
    hidden = tiny_lm.response_hidden(SCORED_PROMPTS, SCORED_RESPONSES, batch_size=batch_size)
    for n, (prompt, response) in enumerate(zip(SCORED_PROMPTS, SCORED_RESPONSES, strict=True)):
        np.testing.assert_allclose(
            logprobs[n], tiny_lm.response_logprobs([prompt], [response])[0], atol=1e-4
        )
        torch.testing.assert_close(
            hidden[n], tiny_lm.response_hidden([prompt], [response])[0], atol=1e-4, rtol=0
        )


def test_response_hidden_are_final_states_at_the_response_tokens(tiny_lm: LM) -> None:
    hidden = tiny_lm.response_hidden(SCORED_PROMPTS, SCORED_RESPONSES, batch_size=4)
    logprobs = tiny_lm.response_logprobs(SCORED_PROMPTS, SCORED_RESPONSES, batch_size=4)
    rows = zip(SCORED_PROMPTS, SCORED_RESPONSES, hidden, logprobs, strict=True)
    for prompt, response, h, lp in rows:
        p, r, out = _concat_forward(tiny_lm, prompt, response)
        assert h.shape == (len(r), tiny_lm.model.config.hidden_size) and h.device.type == "cpu"
        torch.testing.assert_close(h, out.hidden_states[-1][0, len(p) :], atol=1e-4, rtol=0)
        # the state after reading y_{t-1} is what predicts y_t: both functions agree
        with torch.no_grad():
            from_hidden = torch.log_softmax(tiny_lm.model.lm_head(h[:-1]).double(), dim=-1)
        np.testing.assert_allclose(
            from_hidden[torch.arange(len(r) - 1), r[1:]].numpy(), lp[1:], atol=1e-4
        )


def test_scoring_validates_and_handles_empty_input(tiny_lm: LM) -> None:
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        tiny_lm.response_logprobs(PROMPTS[:2], ["x"])
    with pytest.raises(ValueError, match="batch_size"):
        tiny_lm.response_hidden(PROMPTS[:1], ["x"], batch_size=0)
    assert tiny_lm.response_logprobs([], []) == []


def test_total_logprob_is_a_proper_distribution_over_single_tokens(tiny_lm: LM) -> None:
    """Summed over every one-token response y (each followed by eos), p(y) * p(eos|y) is at
    most 1: a check that the scores are normalised log-probabilities, not raw logits."""
    tok = tiny_lm.tokenizer
    singles = sorted({tok.decode([i]) for i in range(4, 100)})  # distinct strings, distinct y
    scores = tiny_lm.response_logprobs(["Hi"] * len(singles), singles, batch_size=16)
    total = sum(math.exp(float(s.sum())) for s in scores)
    assert 0 < total < 1


def test_grouped_attention_gives_the_same_bits_as_transformers_sdpa(tiny_lm: LM) -> None:
    """Every masked pass over more than one token runs ``runtime.attention``'s grouped kernel on
    the CPU; it must give exactly what transformers' own SDPA path gives (left padding, a
    prompt's cache and right-padded responses on it), on the lock's torch (2.13) and later. At
    the lower bounds (torch 2.6, transformers 5.0) the kernels sum in another order: 3% of the
    values differ, by at most 4.3e-6 (values of order 1) after the tiny model's layers."""
    from pytest_prefalign.runtime.attention import NAME
    from pytest_prefalign.runtime.prefill import CACHE, pad

    assert tiny_lm.model.config._attn_implementation == NAME
    plain = copy.deepcopy(tiny_lm.model)
    plain.set_attn_implementation("sdpa")
    seqs = [tiny_lm.prompt_ids(p) for p in PROMPTS]
    ids, mask = pad(seqs, tiny_lm.pad_id, left=True, device=torch.device("cpu"))
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    answers = [tiny_lm.response_ids(r) for r in SCORED_RESPONSES[:3]]
    more, more_mask = pad(answers, tiny_lm.pad_id, left=False, device=torch.device("cpu"))
    outs = []
    with torch.inference_mode():
        for model in (tiny_lm.model, plain):
            first = model.base_model(
                input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True
            )
            whole = torch.cat([mask, more_mask], dim=1)
            then = positions[:, -1:] + 1 + torch.arange(more.shape[1])
            second = model.base_model(
                input_ids=more,
                attention_mask=whole,
                position_ids=then,
                use_cache=True,
                **{CACHE: getattr(first, CACHE)},
            )
            outs.append((first.last_hidden_state, second.last_hidden_state))
    for grouped, plain_sdpa in zip(outs[0], outs[1], strict=True):
        if tuple(int(p) for p in torch.__version__.split(".")[:2]) >= (2, 13):
            assert torch.equal(grouped, plain_sdpa)
        else:
            torch.testing.assert_close(grouped, plain_sdpa, rtol=1e-5, atol=1e-5)


def test_the_meter_counts_every_position_the_body_runs_and_its_weight_flops(
    tiny_lm: LM,
) -> None:
    # per layer: q 32x32, k and v 16x32 (two key-value heads of 8), o 32x32, gate, up and down
    # 64x32 each; two layers, two FLOPs per weight and position
    assert tiny_lm.meter.per_token == 2 * 2 * (1024 + 512 + 512 + 1024 + 3 * 2048)
    before = tiny_lm.meter.reading()
    with torch.no_grad():
        tiny_lm.model(torch.ones((3, 5), dtype=torch.long))  # through the head: counted
        tiny_lm.model.base_model(inputs_embeds=torch.zeros((2, 4, 32)))
    done = tiny_lm.meter.since(before, tiny_lm.meter.reading())
    assert done["forward_tokens"] == 3 * 5 + 2 * 4
    assert done["forward_body_flops"] == 23 * tiny_lm.meter.per_token
    # attention, causal with no mask: a row of 5 sees 1 + 2 + ... + 5 = 15 keys, of 4 ten;
    # per (query, key) and layer 4 x 4 heads x head_dim 8, two layers
    assert done["forward_attention_flops"] == (3 * 15 + 2 * 10) * 4 * 4 * 8 * 2
    # the head (512 x 32, tied) on every position of the first pass, none of the second
    assert done["forward_head_flops"] == 15 * 2 * 512 * 32
    assert done["forward_flops"] == (
        done["forward_body_flops"] + done["forward_attention_flops"] + done["forward_head_flops"]
    )
    assert done["forward_s"] > 0
    # the wrapper's own passes go through the body too: the prompt's prefill, then a step
    # per new token after the first
    fresh = build_tiny_lm(0)
    [[text]] = fresh.generate([PROMPTS[2]], max_new_tokens=3)
    prompt = len(fresh.prompt_ids(PROMPTS[2]))
    steps = len(fresh.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert prompt <= fresh.meter.tokens <= prompt + 3
    assert fresh.meter.tokens >= prompt + min(steps, 3) - 1


def test_the_meter_keeps_steps_candidates_and_blocks_apart_with_what_each_must_read() -> None:
    from pytest_prefalign.runtime.decoding import KV

    lm = build_tiny_lm(0)  # its own: the prefill store starts empty
    meter = lm.meter
    # two layers of q, k, v, o (32x32, 16x32, 16x32, 32x32) and the MLP (3 x 64x32), fp32
    assert meter.weight_bytes == 2 * (1024 + 512 + 512 + 1024 + 3 * 2048) * 4
    assert meter.head_bytes == 512 * 32 * 4
    assert meter.key_bytes == 2 * (2 * 8) * 4  # a key and a value of two heads of 8, one layer
    before = meter.reading()
    with torch.no_grad():
        kv = KV.start(lm, [[5, 6, 7], [8, 9]], then=3)  # a block: rows of 3 and 2 (padded)
        kv.candidates(torch.tensor([[1, 2], [3, 4]]))  # two candidates a row over the cache
        kv.accept(torch.tensor([0, 1]))
        kv.step(torch.tensor([6, 6]))  # one new position a row
        lm.logits_from_hidden(kv.last)  # the step's logits
    done = meter.since(before, meter.reading())
    passes = {kind: done[f"forward_{kind}_passes"] for kind in ("steps", "candidates", "blocks")}
    assert passes == {"steps": 1, "candidates": 1, "blocks": 1}
    assert done["forward_blocks_tokens"] == 2 * 3  # padding included
    assert done["forward_candidates_tokens"] == 2 * 2 and done["forward_steps_tokens"] == 2
    assert sum(done[f"forward_{k}_tokens"] for k in passes) == done["forward_tokens"]
    assert sum(done[f"forward_{k}_flops"] for k in passes) == done["forward_flops"]
    assert sum(done[f"forward_{k}_s"] for k in passes) == pytest.approx(done["forward_s"])
    # what each must read: the weights once a pass, the head's where it made logits, and per
    # row and layer the most keys one of its queries sees: the block's rows 3 and 2, the
    # candidates' 3 + 1 and 2 + 1 (the cache and itself), the step's 5 and 4 (its row's
    # real tokens, the accepted candidate and itself)
    layers = 2
    assert done["forward_blocks_bytes"] == meter.weight_bytes + layers * (3 + 2) * meter.key_bytes
    assert (
        done["forward_candidates_bytes"] == meter.weight_bytes + layers * (4 + 3) * meter.key_bytes
    )
    assert done["forward_steps_bytes"] == (
        meter.weight_bytes + meter.head_bytes + layers * (5 + 4) * meter.key_bytes
    )


def test_the_meter_splits_a_pass_into_its_packed_linear_layers_and_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_prefalign.runtime import kernels, packed
    from pytest_prefalign.runtime.decoding import KV

    if not kernels.available():
        pytest.skip("this torch has no packed oneDNN linear: its linears run dense")
    lm = build_tiny_lm(0)
    assert lm.linear_kernel == packed.ONEDNN
    with torch.no_grad():
        KV.start(lm, [[5, 6, 7]])  # packs the weights: their first pass
    # a clock that moves one second at each reading: each linear kernel takes exactly one
    ticks = iter(range(10**6))
    monkeypatch.setattr(packed.time, "perf_counter", lambda: float(next(ticks)))
    before = lm.meter.reading()
    with torch.no_grad():
        kv = KV.start(lm, [[8, 9, 10, 11], [12, 13, 14, 15]])  # one block pass
        kv.step(torch.tensor([6, 6]))  # a step
        lm.logits_from_hidden(kv.last)  # the head: a packed linear, not the body's
    done = lm.meter.since(before, lm.meter.reading())
    # two layers of seven linear layers (q, k, v, o, gate, up, down) a body pass
    assert done["forward_blocks_linear_s"] == 14.0 and done["forward_steps_linear_s"] == 14.0
    assert done["forward_candidates_linear_s"] == 0.0
    assert done["forward_linear_s"] == 28.0
    # the rest of each pass (attention, norms) is the pass's own seconds less its linears'
    assert done["forward_blocks_s"] > done["forward_blocks_linear_s"]


def test_dense_linear_layers_are_not_timed_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_prefalign.runtime import packed

    monkeypatch.setenv(packed.ENV, "0")
    lm = build_tiny_lm(0)
    assert lm.linear_kernel == packed.DENSE
    before = lm.meter.reading()
    with torch.no_grad():
        lm.model.base_model(torch.ones((2, 4), dtype=torch.long))
    done = lm.meter.since(before, lm.meter.reading())
    assert done["forward_blocks_s"] > 0 and done["forward_linear_s"] == 0.0


def test_the_meter_times_the_output_head_where_a_caller_makes_the_logits(tiny_lm: LM) -> None:
    # a decoding step's logits come from the head alone (logits_from_hidden), outside the
    # body: its FLOPs are in the floor, so its seconds are the pass's too
    before = tiny_lm.meter.reading()
    with torch.no_grad():
        tiny_lm.logits_from_hidden(torch.zeros((4, 32)))
    done = tiny_lm.meter.since(before, tiny_lm.meter.reading())
    assert done["forward_tokens"] == 0 and done["forward_head_flops"] == 4 * 2 * 512 * 32
    assert done["forward_s"] > 0


def test_the_meter_counts_the_keys_each_real_query_attends_to():
    from pytest_prefalign.runtime.meter import AttentionCount, keys_seen

    # (B, past + T): row 0 has one padding column and two real ones before its block of two;
    # row 1 three real ones, and its block's second position is padding
    mask = torch.tensor([[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    assert keys_seen(torch.Size((2, 2)), mask).tolist() == [[3, 4], [4, 0]]
    # (B, 1, T, K): ARGS's candidates, each seeing two cached columns and itself
    sees = torch.tensor([[[[1, 1, 0, 1, 0], [1, 1, 0, 0, 1]]]], dtype=torch.bool)
    assert keys_seen(torch.Size((1, 2)), sees).tolist() == [[3, 3]]
    additive = torch.where(sees, 0.0, float("-inf"))
    assert keys_seen(torch.Size((1, 2)), additive).tolist() == [[3, 3]]
    assert keys_seen(torch.Size((2, 3)), None).tolist() == [[1, 2, 3], [1, 2, 3]]
    # a sliding window of 3 on one layer of two: that layer counts at most 3 keys a query
    config = types.SimpleNamespace(
        num_attention_heads=2,
        hidden_size=16,
        head_dim=4,
        num_hidden_layers=2,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=3,
    )
    count = AttentionCount(config)
    assert count.flops(torch.Size((2, 2)), mask) == ((3 + 4 + 4) + (3 + 3 + 3)) * 4 * 2 * 4
