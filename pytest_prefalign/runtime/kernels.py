"""Which kernel a model's linear layers are to run, known before the model loads: the packed
oneDNN layout (``runtime/packed.py``) or dense. The choice is in every model's fingerprint
(``runtime/identity.py``), so it is made without importing torch where it can be: whether this
torch's packed linear agrees with ``F.linear`` (``packed.available``, a small computation) is
kept on disk by the torch build and the CPU it ran on, and a rerun served from the cache reads
it there.
"""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import sys
from pathlib import Path

from pytest_prefalign import storage
from pytest_prefalign.runtime.memory import PACK_SHARE, PACKED_ENV

ONEDNN = "onednn-packed"  # what ``packed.kernel()`` names a packed model's linears
DENSE = "dense"
# ``0`` runs every model's linears dense (to compare the two kernels, or where a build's oneDNN
# misbehaves); the kernel is in each model's fingerprint, so cached values follow it
ENV = PACKED_ENV
CPUINFO = Path("/proc/cpuinfo")
# the rows a packed layout is tuned for: a decoding step's batch (16 rows ran fastest with it,
# against 1 or 64); prefills, thousands of rows, ran 1.2 times as fast as dense with it
ROWS_HINT = 16


def planned(dtype: str, device: str, weights: int | None, share: int | None) -> str:
    """The kernel ``packed.pack`` is to give a model before it loads (``identity``, whose
    fingerprint names it): ``ONEDNN`` for float32 weights on the CPU (``device`` a device type)
    where ``available()``, ``PREFALIGN_PACKED`` is not ``0`` and the weights' ``weights`` bytes
    are at most ``PACK_SHARE`` of ``share`` (``memory.pack_share``; None: no limit known), else
    ``DENSE``. A model in bfloat16 runs dense: the packed kernel here is float32's."""
    if device != "cpu" or dtype != "float32" or os.environ.get(ENV, "").strip() == "0":
        return DENSE
    if share is not None and (weights is None or weights > share * PACK_SHARE):
        return DENSE
    return ONEDNN if available() else DENSE


def available() -> bool:
    """Whether the packed kernel runs here (``onednn_agrees``), kept on disk by the torch
    build and the CPU: read there where an earlier process kept it, else asked of torch and
    kept by whichever process asks first, with torch imported or not (a cold run keeps it for
    the rerun after it, which then imports no torch)."""
    path = storage.cache_dir("kernels") / f"onednn-{build_key()}.json"
    kept = storage.kept_json(
        path,
        lambda: {"available": onednn_agrees()},
        lambda v: isinstance(v, dict) and isinstance(v.get("available"), bool),
    )
    return bool(kept["available"])


@functools.cache
def onednn_agrees() -> bool:
    """Whether this torch has the packed oneDNN linear and it agrees with ``F.linear`` on a
    small case (a build without oneDNN, or an old torch without the ops, runs dense). Imports
    torch."""
    import torch
    import torch.nn.functional as F

    if not torch.backends.mkldnn.is_available():
        return False
    ops = torch.ops.mkldnn
    if not (hasattr(ops, "_reorder_linear_weight") and hasattr(ops, "_linear_pointwise")):
        return False
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(48, 32, generator=gen), torch.randn(48, generator=gen)
    x = torch.randn(2, 5, 32, generator=gen)
    try:
        with torch.inference_mode():
            packed = ops._reorder_linear_weight(weight, ROWS_HINT)
            got = ops._linear_pointwise(x, packed, bias, "none", [], "")
    except (RuntimeError, TypeError, ValueError, NotImplementedError):  # a build that lacks it
        return False
    return bool(torch.allclose(got, F.linear(x, weight, bias), rtol=1e-4, atol=1e-4))


def build_key() -> str:
    """The torch build and the CPU the packed kernel's check depends on: torch's version (its
    local label names the build), the machine and the CPU's model and flags."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return storage.content_key(
        "onednn-check", torch_version, platform.machine(), sys.platform, _cpu()
    )


def _cpu() -> list[str]:
    """The CPU's model name and flags lines (``/proc/cpuinfo``'s first processor; empty
    where there is none)."""
    try:
        lines = CPUINFO.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    wanted = ("model name", "flags", "Features", "CPU implementer", "CPU part")
    found: dict[str, str] = {}
    for line in lines:
        name = line.split(":", 1)[0].strip()
        if name in wanted and name not in found:
            found[name] = line.split(":", 1)[1].strip() if ":" in line else ""
    return [f"{k}: {v}" for k, v in sorted(found.items())]
