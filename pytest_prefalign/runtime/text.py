"""What a response is as text: the token that ends an assistant turn, and the first line that
every decoder's output is cut to."""

from __future__ import annotations

from typing import Any

# Markers that end an assistant turn in common chat templates (SmolLM2/Qwen, Gemma, Llama 3, Phi 3).
END_OF_TURN_MARKERS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>")


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that ends an assistant turn: a known end-of-turn marker that the chat template
    uses, else the tokenizer's eos."""
    template = str(tokenizer.chat_template or "")
    vocab = tokenizer.get_vocab()
    for marker in END_OF_TURN_MARKERS:
        if marker in template and marker in vocab:
            return int(vocab[marker])
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has neither an end-of-turn token nor an eos token")
    return int(tokenizer.eos_token_id)


def clean_text(text: str) -> str:
    """The first non-empty line, whitespace collapsed to single spaces."""
    first = text.strip().split("\n", 1)[0]
    return " ".join(first.split())
