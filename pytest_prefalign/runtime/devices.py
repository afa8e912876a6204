"""Where models run: the device of this process (one GPU per pytest-xdist worker), the dtype of a
device and whether it runs bf16 natively, and batches that halve when the GPU runs out of
memory.

A run with G GPUs under ``pytest -n auto`` starts G workers (``plugin.py`` answers xdist's
``pytest_xdist_auto_num_workers``) and worker ``gwN`` loads its models on ``cuda:{N mod G}``.

torch is imported where a question needs it, not with this module: a rerun served from the
cache asks only the device and dtype names, which a CPU-only build of torch answers from its
version's label (``2.13.0+cpu``) without being imported (``runtime/identity.py``).
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import sys
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from pytest_prefalign import events
from pytest_prefalign.errors import PrefalignWarning

WORKER_ENV = "PYTEST_XDIST_WORKER"  # xdist names each worker gw0, gw1, ... in its environment
R = TypeVar("R")
CPU_LABEL = "+cpu"  # the local version label of PyTorch's CPU-only builds

if TYPE_CHECKING:  # pragma: no cover
    import torch


def gpu_count() -> int:
    """CUDA devices this process sees (``CUDA_VISIBLE_DEVICES`` applied); none, without
    importing torch, where torch is not imported yet and is a CPU-only build."""
    if "torch" not in sys.modules and cpu_only_build():
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cpu_only_build() -> bool:
    """Whether the installed torch is a CPU-only build, by its version's local label
    (``2.13.0+cpu``, as PyTorch's CPU wheels are named); False where it cannot tell (a build
    without the label, such as PyPI's, is asked once imported)."""
    try:
        return importlib.metadata.version("torch").endswith(CPU_LABEL)
    except importlib.metadata.PackageNotFoundError:
        return False


def device_type(device: str) -> str:
    """The type of a device named as torch names it (``cuda:1`` -> ``cuda``), as
    ``torch.device(device).type`` gives it, without torch."""
    return device.split(":", 1)[0]


def worker_index(environ: dict[str, str] | None = None) -> int | None:
    """``N`` of the xdist worker ``gwN`` this process is, else ``None``."""
    name = (os.environ if environ is None else environ).get(WORKER_ENV, "")
    match = re.fullmatch(r"gw(\d+)", name)
    return int(match.group(1)) if match else None


def default_device(environ: dict[str, str] | None = None, gpus: int | None = None) -> str:
    """``cuda:{N mod G}`` in xdist worker ``gwN`` on a machine with ``G`` GPUs, ``cuda`` in a
    process that is not a worker, ``cpu`` where there is no GPU."""
    gpus = gpu_count() if gpus is None else gpus
    if gpus == 0:
        return "cpu"
    index = worker_index(environ)
    return "cuda" if index is None else f"cuda:{index % gpus}"


def dtype_for(device: str | torch.device) -> torch.dtype:
    """bf16 on CUDA (fp16 where bf16 is unsupported), fp32 on the CPU."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def dtype_name_for(device: str) -> str:
    """``dtype_for``'s name (``float32``, ``bfloat16``, ``float16``); on the CPU without
    importing torch."""
    if device_type(device) == "cpu":
        return "float32"
    return str(dtype_for(device)).removeprefix("torch.")


CPUINFO = "/proc/cpuinfo"


# the CPU features that multiply bf16 natively, as /proc/cpuinfo names them: x86's AVX-512
# BF16 and AMX (torch's ``_is_amx_tile_supported`` asks for the tile unit, which every AMX CPU
# has with its bf16 one), ARM's FEAT_BF16
X86_BF16 = frozenset({"avx512_bf16", "amx_bf16", "amx_tile"})
ARM_BF16 = frozenset({"bf16"})


def cpu_bf16() -> bool:
    """Whether this CPU multiplies bf16 natively: x86 with ``avx512_bf16`` or AMX, or ARM
    with the ``bf16`` feature. Without it PyTorch emulates bf16 in fp32 arithmetic, which is
    slower than fp32 itself. Read from ``/proc/cpuinfo`` where it lists the CPU's features
    (so that checking the option does not import torch: a rerun served from the cache needs
    none); elsewhere torch's own CPU checks answer."""
    features = cpuinfo_features()
    if features is not None:
        return bool(features & (X86_BF16 | ARM_BF16))
    import torch

    for check in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        found = getattr(torch.cpu, check, None)
        if found is not None and found():
            return True
    return False


def cpuinfo_features() -> frozenset[str] | None:
    """The first processor's features in ``/proc/cpuinfo`` (x86's ``flags``, ARM's
    ``Features``), None where the file cannot be read or lists none."""
    try:
        with open(CPUINFO, encoding="utf-8") as info:
            for line in info:
                name, _, value = line.partition(":")
                if name.strip() in ("flags", "Features"):
                    return frozenset(value.split()) or None
    except OSError:
        return None
    return None


def native_bf16(device: str | torch.device) -> bool:
    """Whether ``device`` runs bf16 natively: a CUDA GPU that supports it, or ``cpu_bf16``."""
    if device_type(str(device)) != "cuda":
        return cpu_bf16()
    import torch

    return bool(torch.cuda.is_bf16_supported())


def bf16_refusal(device: str | None = None) -> str | None:
    """Why ``--prefalign-dtype bfloat16`` is refused on ``device`` (this process's default),
    or None where it runs natively."""
    device = device or default_device()
    if native_bf16(device):
        return None
    if device_type(str(device)) == "cuda":
        return f"--prefalign-dtype bfloat16: {device} does not support bf16; use float32"
    return (
        "--prefalign-dtype bfloat16: this CPU has no native bf16 (no avx512_bf16 or AMX), "
        "where PyTorch emulates it more slowly than float32; use float32"
    )


# -------------------------------------------------------------------------------------------
# Batches that adapt to free memory
# -------------------------------------------------------------------------------------------

_WARNED: set[str] = set()  # what has said it halved its batch, once per process


def halving(work: Callable[[int], R], batch_size: int, *, what: str) -> R:
    """``work(batch_size)``; on ``torch.cuda.OutOfMemoryError`` the GPU's cached blocks are
    freed and ``work`` runs again with half the batch, down to 1 (an out-of-memory error at
    batch size 1 is raised). The first halving of each ``what`` warns (``PrefalignWarning``:
    in pytest's warnings summary) and logs; the later ones only log."""
    import torch

    while True:
        try:
            return work(batch_size)
        except torch.cuda.OutOfMemoryError:
            if batch_size <= 1:
                raise
            smaller = batch_size // 2
            message = (
                f"{what}: out of GPU memory at batch size {batch_size}; retrying with "
                f"{smaller} (set a smaller batch size to avoid the retry)"
            )
            events.LOGGER.warning("%s", message)
            if what not in _WARNED:
                _WARNED.add(what)
                warnings.warn(PrefalignWarning(message), stacklevel=2)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            batch_size = smaller
