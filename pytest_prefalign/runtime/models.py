"""Loading a model source into an ``LM`` (the sources, and the sizes they are mapped to, are
named in ``runtime/sources.py``).

A source is ``embedded:NAME`` (a GGUF file shipped in a pip package, converted once into a
safetensors folder in the user cache), ``tiny`` (a random toy model for tests and dry runs), a
local folder, or a Hugging Face id ``org/name``. Every source loads once per process.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch

from pytest_prefalign import cache, events, storage
from pytest_prefalign.runtime import convert, devices
from pytest_prefalign.runtime.identity import (
    _IDENTITIES,
    hub_snapshot,
    locate_gguf,
    planned_kernel,
    weights_dtype,
)
from pytest_prefalign.runtime.identity import (  # the names of these, for code importing them here
    SMOLLM2_GGUF as SMOLLM2_GGUF,
)
from pytest_prefalign.runtime.identity import (
    Identity as Identity,
)
from pytest_prefalign.runtime.identity import (
    ModelUnavailable as ModelUnavailable,
)
from pytest_prefalign.runtime.identity import (
    folder_fingerprint as folder_fingerprint,
)
from pytest_prefalign.runtime.identity import (
    identity as identity,
)
from pytest_prefalign.runtime.lm import LM
from pytest_prefalign.runtime.quiet import no_progress_bars
from pytest_prefalign.runtime.sources import (  # DEFAULT_MODELS: for code importing it from here
    DEFAULT_MODELS as DEFAULT_MODELS,
)
from pytest_prefalign.runtime.sources import EMBEDDED, ModelSpec

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
    digest, gguf = locate_gguf(name, entry)

    def load(folder: Path) -> tuple[Path, Any, Any]:
        return folder, *_from_folder(folder, device, dtype=weights_dtype(spec, device))

    folder, model, tokenizer = convert.load_converted(digest, gguf, spec.source, load)
    return LM(
        model,
        tokenizer,
        label=spec.label,
        name=entry.title,
        source=spec.source,
        fingerprint=folder.name,
        device=device,
        kernel=planned_kernel(spec, device),
    )


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
            folder, device, trust_remote_code, dtype=weights_dtype(spec, device)
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
        kernel=planned_kernel(spec, device),
    )


def _load_hub(spec: ModelSpec, device: str, trust_remote_code: bool) -> LM:
    from huggingface_hub import constants

    try:
        model, tokenizer = _from_folder(
            spec.source, device, trust_remote_code, dtype=weights_dtype(spec, device)
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
        kernel=planned_kernel(spec, device, hub_snapshot(spec.source)),
    )


def _hub_fingerprint(repo_id: str, model: Any) -> str:
    snapshot = hub_snapshot(repo_id)
    if snapshot is not None:
        return folder_fingerprint(snapshot)
    # loaded some other way (a custom cache_dir): the config and the commit are all we know
    return storage.content_key(
        "hub", repo_id, model.config.to_dict(), getattr(model.config, "_commit_hash", None)
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
