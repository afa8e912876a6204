"""Linear layers run by oneDNN on weights packed once, for models in float32 on the CPU.

PyTorch runs ``nn.Linear`` on the CPU with MKL's ``sgemm``. For the shapes of a decoding step
(a few dozen rows against each weight) MKL streamed SmolLM2-135M's weights at about 8 GB/s on
this project's 2-core AMD machine, a fifth of what the machine reads, and a decoding step of
16 rows ran at a sixth of the 2048 matmul's rate. oneDNN on a weight reordered once into its
blocked layout (``torch.ops.mkldnn._reorder_linear_weight`` and ``_linear_pointwise``, the
kernels PyTorch's own compiler emits for CPU linears) ran the same linears 1.3 to 2.4 times as
fast; on the model itself a 16-row decoding step ran 1.5 times as fast, a 64-row one 1.3 times
and a prefill 1.2 times (benchmarks/README.md, "Packed oneDNN linears against PyTorch's dense
ones"; the main job, mostly prefills and blocks of ARGS's candidates, ran 6 to 10% faster).

The numbers differ from MKL's by float rounding (about 1e-4 on a layer's outputs): which
kernel a model ran is part of ``LM.fingerprint``, so a value computed with one is never read
as computed with the other.

Each packed layer keeps its dense ``weight`` (training, the output head's use by reward
methods, third-party code and anything that asks for a gradient read it and run it as
before); the packed copy is extra memory, so a model is packed only when its weights are at
most ``PACK_SHARE`` of its process's share of the machine's memory (``memory.pack_share``, a
figure that does not move between runs; ``runtime/memory.py`` counts the copy).
A layer packs its weight at its first pass (a run whose results all come from the cache never
does), and again at its next pass after its weight changed (in place, or replaced).
"""

from __future__ import annotations

import os
import time
import types
import weakref
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from pytest_prefalign.runtime import kernels
from pytest_prefalign.runtime.kernels import DENSE, ENV, ONEDNN, ROWS_HINT
from pytest_prefalign.runtime.memory import PACK_SHARE
from pytest_prefalign.runtime.meter import LINEAR_CLOCK


def linear_bytes(model: torch.nn.Module) -> int:
    """The bytes of the weights ``pack`` would copy."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _packable(model))


def weights_bytes(model: torch.nn.Module) -> int:
    """The bytes of all the model's parameters (each once): at least ``linear_bytes``, and
    what ``memory.packed_bytes`` counts before the model loads, so the two decide alike."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def pack(model: torch.nn.Module, share: int | None = None) -> str:
    """Run ``model``'s float32 CPU linear layers on packed weights where ``available()`` and
    its weights are at most ``PACK_SHARE`` of ``share`` bytes (None: no limit known).
    Returns the kernel its linears now run (``ONEDNN`` or ``DENSE``), for the fingerprint."""
    layers = _packable(model)
    if not layers or os.environ.get(ENV, "").strip() == "0" or not kernels.available():
        return kernel(model)
    if share is not None and weights_bytes(model) > share * PACK_SHARE:
        return kernel(model)
    for layer in layers:  # each packs its weight at its first pass: a run served whole from
        # the cache loads the model and never pays for (nor holds) the copies
        layer.forward = types.MethodType(packed_forward, layer)  # type: ignore[method-assign]
    return ONEDNN


def kernel(model: torch.nn.Module) -> str:
    """``ONEDNN`` where ``pack`` packed the model's linears, else ``DENSE``."""
    return ONEDNN if layers(model) else DENSE


def layers(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """The model's linear layers that run ``packed_forward``."""
    return [
        m
        for m in model.modules()
        if isinstance(m, torch.nn.Linear) and "forward" in m.__dict__ and _own_forward(m)
    ]


def _packable(model: torch.nn.Module) -> list[torch.nn.Linear]:
    # exactly nn.Linear: a subclass (a LoRA layer, a quantised one) has a forward of its own,
    # and so has a layer whose forward something else replaced (accelerate's device hooks)
    return [
        m
        for m in model.modules()
        if type(m) is torch.nn.Linear
        and m.weight.device.type == "cpu"
        and m.weight.dtype == torch.float32
        and _own_forward(m)
    ]


def _own_forward(layer: torch.nn.Linear) -> bool:
    """Whether the layer runs ``nn.Linear.forward`` or ``packed_forward``, nothing else."""
    forward = layer.__dict__.get("forward")
    return forward is None or getattr(forward, "__func__", None) is packed_forward


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)


# each packed layer's weight as it was packed (``_state``) and its packed weight: kept beside
# the layers, not on them, as an opaque oneDNN tensor cannot be deep-copied (``copy.deepcopy``
# of a model gives layers that run ``packed_forward`` and pack their own weights at first use)
State = tuple[int, int, int | None]


@dataclass(frozen=True)
class Packed:
    """A layer's packed weight, the state of the weight it was packed from (``_state``) and that
    weight's storage, held so that its memory is not given to another weight while the entry
    stands (a replacement at the same address would look unchanged)."""

    state: State
    storage: Any
    weight: torch.Tensor


_PACKED: weakref.WeakKeyDictionary[torch.nn.Linear, Packed] = weakref.WeakKeyDictionary()


def _pack_layer(layer: torch.nn.Linear) -> torch.Tensor:
    with torch.no_grad():
        weight = _reorder(layer.weight)
    _PACKED[layer] = Packed(_state(layer.weight), layer.weight.untyped_storage(), weight)
    return weight


def _state(weight: torch.Tensor) -> State:
    """What tells a weight's values apart from those it was packed with: the tensor and its
    memory (a weight replaced, re-tied, given new ``.data`` or converted away and back) and its
    in-place version counter (None for a tensor made in inference mode, which keeps none and
    cannot be changed in place outside it). A change written through ``.data`` in place
    bypasses the counter, as it bypasses autograd's checks, and is not seen."""
    return id(weight), weight.data_ptr(), None if weight.is_inference() else weight._version


def packed_forward(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """``nn.Linear.forward`` on the packed weight, where nothing asks for a gradient and the
    input is a float32 CPU tensor; ``F.linear`` on the dense weight otherwise. The packed
    kernel's seconds add to ``meter.LINEAR_CLOCK`` (the CPU runs it before it returns)."""
    weight, bias = self.weight, self.bias
    if (
        x.device.type != "cpu"
        or x.dtype != torch.float32
        or weight.device.type != "cpu"
        or weight.dtype != torch.float32
        or (bias is not None and bias.dtype != torch.float32)
        or (torch.is_grad_enabled() and (x.requires_grad or _trains(weight) or _trains(bias)))
    ):
        return F.linear(x, weight, bias)
    entry = _PACKED.get(self)
    if entry is None or entry.state != _state(weight):  # first use, or changed since packed
        packed = _pack_layer(self)
    else:
        packed = entry.weight
    started = time.perf_counter()
    out = torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    LINEAR_CLOCK.seconds += time.perf_counter() - started
    return out


def _trains(parameter: torch.Tensor | None) -> bool:
    return parameter is not None and parameter.requires_grad
