"""The LM wrapper every decoder and reward method uses: one tokenization rule, batched greedy or
seeded generation, and teacher-forced scoring that prefills each distinct prompt once.

Tokenization rule: a prompt (a string, or a ``Dialogue`` with earlier turns: ``chat.py``) is
rendered with the tokenizer's chat template (its turns plus the assistant header) and tokenized
as is; a response is tokenized on its own and followed by the end-of-turn id. The response is
never re-tokenized together with its prompt, so every method scores and conditions on exactly
the same tokens. Both are held to the model's window
(``runtime/window.py``): a prompt too long loses its middle, a response its end, and no pass runs
more than the window's bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from pytest_prefalign import events
from pytest_prefalign.runtime import chat, memory, packed
from pytest_prefalign.runtime.attention import use_grouped_sdpa
from pytest_prefalign.runtime.batching import by_length, check_positive, read_batches
from pytest_prefalign.runtime.chat import Prompt
from pytest_prefalign.runtime.decoding import KV, Plain, check_top_p, decode, generator, spread
from pytest_prefalign.runtime.devices import halving
from pytest_prefalign.runtime.identity import lm_fingerprint
from pytest_prefalign.runtime.meter import ForwardMeter
from pytest_prefalign.runtime.prefill import (
    Prefill,
    PrefillStore,
    chunks,
    full_attention,
    length_batches,
    pad,
)
from pytest_prefalign.runtime.text import clean_text, end_of_turn_id
from pytest_prefalign.runtime.window import (
    Cuts,
    cut_middle,
    cut_text_end,
    cut_text_middle,
    model_window,
    rows_for,
)
from pytest_prefalign.storage import content_key

T = TypeVar("T")
PROMPTS_KEPT = 2048  # prompts whose token ids an LM keeps (``LM.prompt_ids``), the oldest out

__all__ = ["LM", "Prefill", "chunks", "clean_text", "end_of_turn_id", "length_batches", "pad"]


class LM:
    """A Hugging Face causal LM and its tokenizer, with the project's tokenization rule.

    ``eos_id`` is the id that ends a response: the end-of-turn token for chat models
    (``<|im_end|>`` for SmolLM2), else the tokenizer's eos.
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        label: str,
        name: str,
        source: str,
        fingerprint: str,
        device: str | torch.device | None = None,
        kernel: str | None = None,
    ) -> None:
        self.label, self.name, self.source = label, name, source
        self.tokenizer = tokenizer
        if getattr(model, "hf_device_map", None):  # placed across devices by accelerate
            self.device = model.get_input_embeddings().weight.device
            self.model = model.eval()
        else:
            self.device = torch.device(device) if device is not None else _model_device(model)
            self.model = model.to(self.device).eval()
        self.batch_cap: int | None = None  # the batch size that fit after an out-of-memory
        # the kernel the linear layers run: oneDNN on packed weights for float32 on the CPU
        # where it is available and fits (runtime/packed.py), else PyTorch's dense linear;
        # ``kernel``, where given, is the one planned before loading (``packed.planned``), which
        # the keys computed before loading name (``identity.py``)
        self.linear_kernel = packed.DENSE
        if self.device.type == "cpu":
            use_grouped_sdpa(self.model)
            if kernel is None:
                self.linear_kernel = packed.pack(self.model, memory.pack_share())
            elif kernel == packed.ONEDNN:
                self.linear_kernel = packed.pack(self.model)
        # the dtype the passes run in, by name (``float32``, ``bfloat16``)
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        # positions run, their FLOPs (body, attention, output head), seconds inside
        self.meter = ForwardMeter(self.model.base_model, self.model.get_output_embeddings())
        # ``fingerprint`` names the weights and tokenizer; what the model computes also depends
        # on the dtype, the device and this code with the libraries it runs on, and every cached
        # value computed with the model is keyed by all of it
        self.weights_fingerprint = fingerprint
        self.fingerprint = lm_fingerprint(
            fingerprint, self.dtype, self.device.type, self.linear_kernel
        )
        self.cache_uses: list[Any] = []  # cached values its loading used (a converted model)
        self.eos_id = end_of_turn_id(tokenizer)
        self.stop_ids = {self.eos_id} | (
            {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
        )
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        self.has_chat_template = bool(tokenizer.chat_template)
        self.window = model_window(self.model.config, tokenizer)  # what the model reads
        self.cuts = Cuts(label)  # the texts cut to the window, each logged once
        self._prompt_ids: dict[Prompt, list[int]] = {}  # each prompt's ids (``prompt_ids``)
        # every attention layer sees the whole sequence (no sliding window); where some slide,
        # kept prefills and ARGS's candidate queries apply within the window (attends_whole)
        self.full_attention = full_attention(self.model.config)
        # how much one pass may run, sized from the memory the process may use on the CPU
        self.bounds = memory.pass_bounds(
            self.model.config, next(self.model.parameters()).element_size(), self.device.type
        )
        # prompts' prefills, kept within a memory budget (see runtime/prefill.py)
        self.prefills = PrefillStore(self.model, self.pad_id, self.device, bounds=self.bounds)
        if spread(self.model):  # kept rows live on one device; a spread model's layers on many
            self.prefills.enabled = False

    def __repr__(self) -> str:
        return f"LM(label={self.label!r}, name={self.name!r}, fingerprint={self.fingerprint!r})"

    def attends_whole(self, columns: int) -> bool:
        """Whether a cache of ``columns`` columns (prompt, padding, new tokens and queries) is
        seen whole by every layer on kept prefills: always with full attention; within the
        narrowest window with sliding-window layers (Gemma 3), where the prefill store keeps
        the rows. What ARGS's candidate queries need (their mask spans the whole cache)."""
        if self.full_attention:
            return True
        return self.prefills.enabled and columns <= self.prefills.reach

    # ---------------------------------------------------------------------------------------
    # Tokenization
    # ---------------------------------------------------------------------------------------

    def render(self, prompt: Prompt) -> str:
        """The text the model reads for a prompt, up to where the response starts: its turns
        through the chat template, or without one the plain layout (``chat.plain_text``)."""
        if not self.has_chat_template:
            return chat.plain_text(prompt)
        return self.tokenizer.apply_chat_template(
            chat.messages(prompt), tokenize=False, add_generation_prompt=True
        )

    def prompt_ids(self, prompt: Prompt) -> list[int]:
        """Token ids of the rendered prompt. A chat template writes its own special tokens (a
        BOS included where the model needs one), so the tokenizer adds none; without a template
        the tokenizer's own rule decides (e.g. Gemma's BOS). More than ``window.prompt`` ids
        lose their middle. Each prompt is rendered and tokenised once (``PROMPTS_KEPT`` kept):
        every method of a run, its guidance trials and its scoring read the same prompts."""
        found = self._prompt_ids.get(prompt)
        if found is None:
            limit = self.window.prompt
            rendered = cut_text_middle(self.render(prompt), limit)
            ids = self.tokenizer(rendered, add_special_tokens=not self.has_chat_template)
            found = self.cuts.note("prompt", chat.text(prompt), ids["input_ids"], cut_middle, limit)
            if len(self._prompt_ids) >= PROMPTS_KEPT:
                self._prompt_ids.pop(next(iter(self._prompt_ids)))  # the oldest
            self._prompt_ids[prompt] = found
        return list(found)

    def response_ids(self, response: str) -> list[int]:
        """Token ids of a response on its own, followed by ``eos_id``; at most
        ``window.response`` of them (a longer response loses its end, ``eos_id`` kept)."""
        limit = self.window.response - 1
        ids = self.tokenizer(cut_text_end(response, limit), add_special_tokens=False)
        return self.cuts.note("response", response, ids["input_ids"], _head, limit) + [self.eos_id]

    # ---------------------------------------------------------------------------------------
    # Generation
    # ---------------------------------------------------------------------------------------

    def generate(
        self,
        prompts: Sequence[Prompt],
        *,
        max_new_tokens: int = 32,
        batch_size: int = 16,
        sample: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        num_samples: int = 1,
        seed: int = 0,
    ) -> list[list[str]]:
        """``num_samples`` texts per prompt (outer list: prompts in their order).

        Greedy by default. With ``sample=True`` each (prompt, sample index) draws from its own
        generator seeded by ``(seed, prompt, index)``, so a sample does not depend on the batch
        it ran in; each token from ``softmax(logits / temperature)`` cut to its nucleus, the
        fewest most likely tokens whose probability reaches ``top_p`` (1: no cut;
        ``decoding.nucleus``). A text is the decoded response up to ``eos_id``, its first
        non-empty line, whitespace collapsed. ``batch_size`` counts sequences (prompts x
        samples) per forward.
        """
        check_positive(
            max_new_tokens=max_new_tokens, batch_size=batch_size, num_samples=num_samples
        )
        max_new_tokens = min(max_new_tokens, self.window.response)
        if sample and not temperature > 0:
            raise ValueError(f"temperature must be > 0 when sampling, got {temperature}")
        check_top_p(top_p)
        options = (max_new_tokens, sample, temperature, top_p, num_samples, seed)
        return self.within_memory(
            lambda size: self._generate(prompts, size, *options), batch_size, "generate"
        )

    def _generate(
        self,
        prompts: Sequence[Prompt],
        batch_size: int,
        max_new_tokens: int,
        sample: bool,
        temperature: float,
        top_p: float,
        num_samples: int,
        seed: int,
    ) -> list[list[str]]:
        unique = list(dict.fromkeys(prompts))  # the same prompt gives the same texts
        encoded = [self.prompt_ids(p) for p in unique]
        self.prefills.warm(encoded, batch_size=batch_size, then=max_new_tokens)
        runs = num_samples if sample else 1  # greedy samples are all the same text
        texts: dict[Prompt, list[str]] = {}
        # rows of a pass: prompts times samples, each up to its prompt and new tokens
        rows = rows_for(max(map(len, encoded), default=1) + max_new_tokens, batch_size, self.bounds)
        with events.step("generate", total=len(unique), unit="prompts") as progress:
            for batch in chunks(by_length(encoded), max(1, rows // runs)):
                seeds = [[_sample_seed(seed, unique[i], j) for j in range(runs)] for i in batch]
                out = self._generate_batch(
                    [encoded[i] for i in batch],
                    runs,
                    max_new_tokens,
                    temperature if sample else None,
                    top_p,
                    seeds,
                )
                for k, i in enumerate(batch):
                    texts[unique[i]] = [clean_text(self.decode_response(t)) for t in out[k]]
                progress.advance(len(batch))
        return [texts[p] * (num_samples // runs) for p in prompts]

    def _generate_batch(
        self,
        prompt_seqs: list[list[int]],
        num_samples: int,
        max_new_tokens: int,
        temperature: float | None,
        top_p: float,
        seeds: list[list[int]],
    ) -> list[list[list[int]]]:
        """Token ids generated for each prompt and sample; finished rows leave the batch."""
        if num_samples > 1 and self.prefills.holds(prompt_seqs, max_new_tokens):
            # each sample's row copied from the kept prefill: one copy of the prompt's cache
            # per sample, not a batch of the prompts then its rows repeated
            kv = KV.start(
                self, [s for s in prompt_seqs for _ in range(num_samples)], then=max_new_tokens
            )
        else:
            kv = KV.start(self, prompt_seqs, then=max_new_tokens)
            kv.select(torch.arange(len(prompt_seqs)).repeat_interleave(num_samples))
        gens = None if temperature is None else [generator(s) for row in seeds for s in row]
        rule = Plain(self, temperature, gens, top_p=top_p)
        tokens = decode(kv, rule, max_new_tokens, self.finished)
        return [tokens[i * num_samples : (i + 1) * num_samples] for i in range(len(prompt_seqs))]

    def finished(self, generated: list[int]) -> bool:
        """Whether generated tokens end a response: at a stop id, or once the text has a
        complete first line (the rest would be cut anyway by ``clean_text``). Every decoder
        stops by this rule, so they spend no steps on text that is thrown away."""
        if generated[-1] in self.stop_ids:
            return True
        return "\n" in self.tokenizer.decode(generated, skip_special_tokens=True).lstrip()

    def decode_response(self, generated: list[int]) -> str:
        """The text of generated tokens, up to the first stop id."""
        ids = []
        for tok in generated:
            if tok in self.stop_ids:
                break
            ids.append(tok)
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    # ---------------------------------------------------------------------------------------
    # Teacher-forced scoring
    # ---------------------------------------------------------------------------------------

    def response_logprobs(
        self, prompts: Sequence[Prompt], responses: Sequence[str], *, batch_size: int = 16
    ) -> list[np.ndarray]:
        """``log pi(y_t | x, y_<t)`` for every response token (the final ``eos_id`` included),
        float64, one array per (prompt, response)."""
        return [
            t.numpy() for t in self._teacher_forced(prompts, responses, batch_size, hidden=False)
        ]

    def response_hidden(
        self,
        prompts: Sequence[Prompt],
        responses: Sequence[str],
        *,
        batch_size: int = 16,
        predicting: bool = False,
    ) -> list[torch.Tensor]:
        """Last-layer hidden states (after the final norm) at the response tokens, one
        ``(T_y, H)`` float32 CPU tensor per pair: row ``t`` is the state after reading ``y_t``,
        so row ``-1`` (after ``eos_id``) summarises the whole response. With ``predicting``,
        row ``t`` is the state that predicts ``y_t`` instead: the prompt's last for ``t = 0``,
        after ``y_{t-1}`` for the others."""
        return self._teacher_forced(
            prompts, responses, batch_size, hidden=True, predicting=predicting
        )

    def within_memory(self, work: Callable[[int], T], batch_size: int, what: str) -> T:
        """``work(batch size)``, the batch halved while the GPU runs out of memory
        (``devices.halving``); the size that fit is kept as ``batch_cap`` for later calls."""

        def attempt(size: int) -> T:
            out = work(size)
            if size < batch_size:
                self.batch_cap = size
            return out

        start = min(batch_size, self.batch_cap or batch_size)
        return halving(attempt, start, what=f"model {self.label}: {what}")

    def _teacher_forced(
        self,
        prompts: Sequence[Prompt],
        responses: Sequence[str],
        batch_size: int,
        *,
        hidden: bool,
        predicting: bool = False,
    ) -> list[torch.Tensor]:
        """Each distinct prompt's prefill comes from the prefill store (run once while the
        store keeps it) and its KV cache row is copied for each of its responses (a pair's two
        responses share their prompt)."""
        if len(prompts) != len(responses):
            raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
        check_positive(batch_size=batch_size)
        return self.within_memory(
            lambda size: self._forced(prompts, responses, size, hidden, predicting),
            batch_size,
            "read",
        )

    @torch.inference_mode()
    def _forced(
        self,
        prompts: Sequence[Prompt],
        responses: Sequence[str],
        batch_size: int,
        hidden: bool,
        predicting: bool,
    ) -> list[torch.Tensor]:
        unique = list(dict.fromkeys(prompts))
        where = {p: i for i, p in enumerate(unique)}
        encoded = [self.prompt_ids(p) for p in unique]
        answers = [self.response_ids(r) for r in responses]
        # with sliding-window layers, the pairs that stay within the window (kept prefills)
        # are read apart from those that reach past it (plain passes); else one group
        fits = [
            self.prefills.fits([encoded[where[p]]], len(a))
            for p, a in zip(prompts, answers, strict=True)
        ]
        groups = [[n for n in range(len(prompts)) if fits[n] == side] for side in (True, False)]
        self.prefills.warm(
            [encoded[where[prompts[n]]] for n in groups[0]],
            batch_size=batch_size,
            then=max((len(answers[n]) for n in groups[0]), default=0),
        )
        results: dict[int, torch.Tensor] = {}
        batches = [
            [group[i] for i in batch]
            for group in groups
            if group
            for batch in read_batches(
                encoded,
                [where[prompts[n]] for n in group],
                [answers[n] for n in group],
                batch_size,
                self.device,
                kept=self.prefills.holds([encoded[where[prompts[n]]] for n in group]),
                bounds=self.bounds,
            )
        ]
        with events.step("read", total=len(prompts), unit="responses") as progress:
            for pairs in batches:
                prompt_rows = list(dict.fromkeys(where[prompts[n]] for n in pairs))
                then = max(len(answers[n]) for n in pairs)
                kv = KV.start(self, [encoded[i] for i in prompt_rows], then=then)
                kv.select([prompt_rows.index(where[prompts[n]]) for n in pairs])
                scored = self._continue(kv, [answers[n] for n in pairs], hidden, predicting)
                for n, value in zip(pairs, scored, strict=True):
                    results[n] = value
                progress.advance(len(pairs))
        return [results[n] for n in range(len(prompts))]

    def _continue(
        self, kv: KV, seqs: list[list[int]], hidden: bool, predicting: bool = False
    ) -> list[torch.Tensor]:
        """Run right-padded responses on top of their prompts' cache rows."""
        last = kv.last
        states = kv.extend(seqs)
        lengths = [len(s) for s in seqs]
        if hidden:
            if predicting:
                states = torch.cat([last[:, None], states[:, :-1]], dim=1)
            states = states.float().cpu()
            return [states[k, :n] for k, n in enumerate(lengths)]
        # y_0 is predicted at the prompt's last token, y_t at y_{t-1}
        logits = self.logits_from_hidden(torch.cat([last[:, None], states[:, :-1]], dim=1))
        ids, _ = pad(seqs, self.pad_id, left=False, device=logits.device)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids[..., None])[..., 0]
        logp = logp.double().cpu()
        return [logp[k, :n] for k, n in enumerate(lengths)]

    def prefill(self, seqs: list[list[int]], *, batch_size: int = 16, then: int = 0) -> Prefill:
        """Left-padded prompts after the base model: their cache, mask and final hidden states
        at the last token (position ids count real tokens only). A prompt kept in
        ``self.prefills`` is not run again, and prompts sharing a prefix run it once.
        ``then``: the columns the caller will add (see ``PrefillStore.prefill``)."""
        return self.prefills.prefill(seqs, batch_size=batch_size, then=then)

    @property
    def device_type(self) -> str:
        """The type of the device the model runs on (``cpu``, ``cuda``)."""
        return str(self.device.type)

    @property
    def vocab_size(self) -> int:
        """The width of the model's logits: the output head's rows."""
        return int(self.model.get_output_embeddings().weight.shape[0])

    def logits_from_hidden(self, hidden: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``(..., V)`` float32 from final hidden states ``(..., H)``, as the
        model's own forward computes them (output head, then any logit soft-capping)."""
        head = self.model.get_output_embeddings()
        logits = head(hidden.to(head.weight.device, head.weight.dtype))
        cap = getattr(self.model.config, "final_logit_softcapping", None)
        if cap:  # Gemma-2 style soft-capping, applied by the model's own forward
            logits = torch.tanh(logits / cap) * cap
        return logits.float()


# -------------------------------------------------------------------------------------------
# Helpers of this module
# -------------------------------------------------------------------------------------------


def _model_device(model: Any) -> torch.device:
    return next(model.parameters()).device


def _sample_seed(seed: int, prompt: Prompt, index: int) -> int:
    return int(content_key(seed, chat.key(prompt), index), 16) % (2**63)


def _head(seq: list[int], limit: int) -> list[int]:
    return seq[:limit]
