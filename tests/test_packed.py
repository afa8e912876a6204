"""Packed oneDNN linears (runtime/packed.py): the same numbers as the dense layer up to float
rounding, the dense layer wherever a gradient is asked for, a weight changed in place packed
again, nothing packed beyond the memory share, and the kernel in the model's fingerprint."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pytest_prefalign.runtime import kernels, memory, packed
from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.runtime.sources import ModelSpec
from pytest_prefalign.runtime.tiny import build_tiny_lm

pytestmark = pytest.mark.skipif(not kernels.available(), reason="no oneDNN in this torch build")


@pytest.fixture(autouse=True)
def _packing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests pack, whatever ``PREFALIGN_PACKED`` the shell running them sets."""
    monkeypatch.delenv(packed.ENV, raising=False)


def _layer(out: int = 24, into: int = 16, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(0)
    return torch.nn.Linear(into, out, bias=bias)


def _packed_copy(layer: torch.nn.Linear) -> torch.nn.Linear:
    twin = copy.deepcopy(layer)
    holder = torch.nn.Sequential(twin)
    assert packed.pack(holder) == packed.ONEDNN
    assert packed.layers(holder) == [twin]
    return twin


@pytest.mark.parametrize("shape", [(3, 16), (2, 5, 16), (1, 16)])
@pytest.mark.parametrize("bias", [True, False])
def test_packed_layer_gives_the_dense_layers_numbers(shape: tuple[int, ...], bias: bool) -> None:
    layer = _layer(bias=bias)
    twin = _packed_copy(layer)
    x = torch.randn(*shape)
    with torch.inference_mode():
        got, want = twin(x), layer(x)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_strided_input_gives_the_numbers_of_its_contiguous_copy() -> None:
    layer = _layer()
    twin = _packed_copy(layer)
    x = torch.randn(4, 7, 16)[:, -1]  # a view: one position of each row, as a decoder reads it
    with torch.no_grad():
        torch.testing.assert_close(twin(x), layer(x.contiguous()), rtol=1e-5, atol=1e-5)


def test_a_gradient_runs_the_dense_layer_and_matches_its_gradient() -> None:
    layer = _layer()
    twin = _packed_copy(layer)
    x = torch.randn(3, 16, requires_grad=True)
    twin(x).pow(2).sum().backward()
    ours, x_grad = twin.weight.grad, x.grad
    x.grad = None
    layer(x).pow(2).sum().backward()
    assert ours is not None and x_grad is not None
    # the dense path exactly: the same kernel, the same numbers
    assert torch.equal(ours, layer.weight.grad)
    assert torch.equal(x_grad, x.grad)


def test_a_weight_changed_in_place_is_packed_again() -> None:
    layer = _packed_copy(_layer())
    x = torch.randn(2, 16)
    with torch.no_grad():
        before = layer(x)
        layer.weight.mul_(2.0)
        after = layer(x)
    torch.testing.assert_close(after, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, after)


@pytest.mark.parametrize("how", ["data", "parameter", "round trip"])
def test_a_replaced_weight_is_packed_again(how: str) -> None:
    layer = _packed_copy(_layer())
    x = torch.randn(2, 16)
    with torch.no_grad():
        layer(x)  # packed now
        if how == "data":
            layer.weight.data = torch.randn(24, 16)
        elif how == "parameter":  # as re-tying an output head to its embedding does
            layer.weight = torch.nn.Parameter(torch.randn(24, 16))
        else:  # new memory, the same Parameter and version; then changed before the next pass
            layer.to(torch.float64).to(torch.float32)
            layer.weight.mul_(3.0)
        got = layer(x)
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_training_the_bias_alone_runs_dense_and_gets_its_gradient() -> None:
    layer = _packed_copy(_layer())
    layer.weight.requires_grad_(False)
    layer(torch.randn(3, 16)).sum().backward()
    assert layer.bias.grad is not None
    torch.testing.assert_close(layer.bias.grad, torch.full((24,), 3.0))


def test_nothing_is_packed_beyond_its_share_of_memory() -> None:
    holder = torch.nn.Sequential(_layer(), torch.nn.ReLU(), _layer(8, 24))
    assert packed.linear_bytes(holder) == (24 * 16 + 8 * 24) * 4
    size = packed.weights_bytes(holder)
    assert size == (24 * 16 + 24 + 8 * 24 + 8) * 4  # with the biases
    assert packed.pack(holder, share=int(size / memory.PACK_SHARE) - 1) == packed.DENSE
    assert packed.layers(holder) == []
    assert packed.pack(holder, share=int(size / memory.PACK_SHARE)) == packed.ONEDNN


def test_only_float32_layers_of_exactly_nn_linear_with_their_own_forward_are_packed() -> None:
    class Adapted(torch.nn.Linear):  # a LoRA or quantised layer: its own forward
        pass

    hooked = _layer()
    hooked.forward = lambda x: F.linear(x, hooked.weight, hooked.bias)  # accelerate's, say
    holder = torch.nn.Sequential(_layer().to(torch.bfloat16), Adapted(4, 4), hooked)
    assert packed.pack(holder) == packed.DENSE
    assert packed.kernel(holder) == packed.DENSE


def test_the_kernel_is_part_of_the_models_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    lm = build_tiny_lm(0)
    assert lm.linear_kernel == packed.ONEDNN
    monkeypatch.setattr(kernels, "available", lambda: False)
    plain = LM(
        build_tiny_lm(0).model,  # a fresh copy: the first one's layers are packed
        lm.tokenizer,
        label="t",
        name="tiny",
        source="tiny",
        fingerprint=lm.weights_fingerprint,
    )
    again = LM(
        copy.deepcopy(plain.model),
        lm.tokenizer,
        label="t",
        name="tiny",
        source="tiny",
        fingerprint=lm.weights_fingerprint,
    )
    assert plain.linear_kernel == packed.DENSE
    assert plain.fingerprint == again.fingerprint != lm.fingerprint


def test_packed_and_dense_models_agree_on_scores_and_greedy_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast = build_tiny_lm(0)
    monkeypatch.setattr(kernels, "available", lambda: False)
    slow = build_tiny_lm(0)
    assert (fast.linear_kernel, slow.linear_kernel) == (packed.ONEDNN, packed.DENSE)
    prompts = ["Generate a title for the following abstract: reward models for users.", "Hi"]
    responses = ["Personal reward models", "Hello there"]
    ours = fast.response_logprobs(prompts, responses)
    theirs = slow.response_logprobs(prompts, responses)
    assert [len(x) for x in ours] == [len(x) for x in theirs]
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    assert fast.generate(prompts, max_new_tokens=8) == slow.generate(prompts, max_new_tokens=8)


def test_memory_need_counts_the_packed_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = ModelSpec("135m", "embedded:smollm2-135m")
    weights = memory.weights_bytes(spec)
    assert weights is not None
    roomy = memory.packed_bytes(spec, share=int(weights / memory.PACK_SHARE))
    tight = memory.packed_bytes(spec, share=int(weights / memory.PACK_SHARE) - 1)
    assert (roomy, tight) == (weights, 0)
    assert memory.packed_bytes(ModelSpec("x", "embedded:smollm2-135m", dtype="bfloat16")) == 0
    monkeypatch.setenv(memory.TOTAL_ENV, str(weights / memory.PACK_SHARE / memory.GB))
    needed = memory.need([spec], 1)
    assert needed.packed == weights
    assert needed.per_process - memory.need([spec], 1).weights >= weights
    monkeypatch.setenv(packed.ENV, "0")
    assert memory.need([spec], 1).packed == 0


def test_a_deep_copy_of_a_packed_model_runs_packed_on_its_own_weights() -> None:
    layer = _packed_copy(_layer())
    twin = copy.deepcopy(layer)
    assert packed.layers(torch.nn.Sequential(twin)) == [twin]
    with torch.no_grad():
        twin.weight.mul_(-1.0)
        x = torch.randn(2, 16)
        torch.testing.assert_close(twin(x), F.linear(x, twin.weight, twin.bias))
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias))


def test_the_environment_can_ask_for_dense_linears(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(packed.ENV, "0")
    holder = torch.nn.Sequential(_layer())
    assert packed.pack(holder) == packed.DENSE and packed.layers(holder) == []
    monkeypatch.setenv(packed.ENV, "1")
    assert packed.pack(holder) == packed.ONEDNN


def test_the_run_file_records_the_kernel_in_the_environment() -> None:
    from pytest_prefalign.evaluation.prepare import environment

    lm = build_tiny_lm(0)
    assert environment(lm)["linear"] == lm.linear_kernel == packed.ONEDNN


def test_a_layer_packs_its_weight_at_its_first_pass_only() -> None:
    layer = _layer()
    holder = torch.nn.Sequential(layer)
    packed.pack(holder)
    assert layer not in packed._PACKED  # loaded, not run: no copy held
    with torch.no_grad():
        layer(torch.randn(2, 16))
        first = packed._PACKED[layer].weight
        layer(torch.randn(3, 16))
    assert packed._PACKED[layer].weight is first


@pytest.mark.parametrize("shape", [(0, 16), (2, 0, 16), (2, 3, 4, 16)])
def test_empty_and_many_dimensional_inputs_keep_their_shape(shape: tuple[int, ...]) -> None:
    layer = _layer()
    twin = _packed_copy(layer)
    x = torch.randn(*shape)
    with torch.inference_mode():
        got, want = twin(x), layer(x)
    assert got.shape == want.shape == (*shape[:-1], 24)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
