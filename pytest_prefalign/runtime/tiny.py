"""A tiny random chat model built from a config: for tests and dry runs, no weights to download.

It behaves like the real models in everything the machinery relies on (a byte-level BPE
tokenizer, the SmolLM2 chat template, ``<|im_end|>`` ending a turn, a Llama architecture with
grouped-query attention and a KV cache), it builds in a fraction of a second, and the same seed
gives the same tokenizer and the same weights in every process.
"""

from __future__ import annotations

import hashlib
import json

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.storage import content_key

UNK, IM_START, IM_END, PAD = "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|pad|>"
SPECIALS = [UNK, IM_START, IM_END, PAD]  # ids 0..3, the SmolLM2 order for the first three

# SmolLM2's template with its own system line: the same token layout a real chat model sees.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a tiny random test model.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# The BPE merges are learnt from this fixed text, so titles and abstracts take a realistic
# number of tokens (a few per word) instead of one per character.
CORPUS = """\
Generate a title for the following abstract of a paper. We propose a new method for neural
machine translation and language modeling. Our model learns personal preferences from user
feedback and improves reward models for alignment. Experiments on benchmark datasets show that
the approach outperforms strong baselines in accuracy and efficiency. We introduce a dataset of
annotated sentences, evaluate transformer encoders and decoders, and analyze attention over
tokens. The results suggest that large pretrained models capture semantic and syntactic
information. This paper presents a system for question answering, summarization, dialogue,
parsing, tagging and information extraction. We study how users write titles and how a policy
ranks the preferred response above the dispreferred one. Learning, training, inference,
decoding, sampling, generation, representation, retrieval, evaluation, analysis, corpus,
linguistic, multilingual, cross-lingual, knowledge, reasoning, graph, speech, text, word.
"""

VOCAB_SIZE = 512  # 256 byte symbols, 4 specials, the rest BPE merges


def tiny_config() -> LlamaConfig:
    """The architecture: SmolLM2's layout (tied embeddings, GQA) at toy size."""
    return LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,  # model width
        intermediate_size=64,  # MLP width
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as in SmolLM2
        max_position_embeddings=4096,  # room for ICL prompts, tokens are ~3 characters
        initializer_range=0.2,  # larger than usual so that greedy choices are not near-ties
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=SPECIALS.index(IM_END),
        pad_token_id=SPECIALS.index(PAD),
    )


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained in-process on ``CORPUS``: every string round-trips."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIALS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token=UNK,
        eos_token=IM_END,
        pad_token=PAD,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def build_tiny_model(seed: int = 0) -> LlamaForCausalLM:
    """The random Llama, initialised from ``seed`` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(tiny_config())
    return model.float().eval()


def build_tiny_lm(seed: int = 0, *, device: str = "cpu", dtype: torch.dtype = torch.float32) -> LM:
    """The tiny model wrapped as an ``LM``, labelled ``tiny``: fp32 on the CPU by default; on a
    CUDA ``device`` in fp32 too unless ``dtype`` says otherwise (the same weights: what the
    CPU-against-CUDA equivalence check compares)."""
    tokenizer = build_tokenizer()
    model = build_tiny_model(seed)
    fingerprint = tiny_fingerprint(model, tokenizer, seed)  # of the fp32 weights it is built with
    return LM(
        model.to(dtype),  # type: ignore[arg-type]  # transformers types .to as one overload
        tokenizer,
        label="tiny",
        name=f"tiny-llama(seed={seed})",
        source="tiny",
        fingerprint=fingerprint,
        device=device,
    )


def tiny_fingerprint(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, seed: int) -> str:
    """Config, seed and a hash of the actual tokenizer and weights: should a library update
    change what a seed builds, caches keyed by this fingerprint are not reused by mistake."""
    digest = hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    config = json.loads(model.config.to_json_string(use_diff=False))
    config.pop("transformers_version", None)
    return content_key("tiny", config, seed, digest.hexdigest())
