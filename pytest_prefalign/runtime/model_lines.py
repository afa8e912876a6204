"""The ini value ``prefalign_models``: one ``LABEL = SOURCE [OPTION...]`` line per size label,
merged over the defaults into ``ModelSpec`` s (``runtime/sources.py``; ``runtime/models.py``
loads them)."""

from __future__ import annotations

import importlib.util
import re

from pytest_prefalign.runtime.sources import DEFAULT_MODELS, EMBEDDED, ModelSpec

LINE_FORM = (
    "'LABEL = SOURCE [device_map=auto] [dtype=float32|bfloat16]', SOURCE one of embedded:NAME, "
    "tiny, a folder or a Hugging Face id"
)
DEVICE_MAPS = ("auto",)  # accelerate's placements a line may ask for
# the weights' dtypes a line may ask for (default: fp32 on the CPU, bf16 on CUDA)
DTYPES = ("float32", "bfloat16")
_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def parse_models(lines: list[str]) -> dict[str, ModelSpec]:
    """The ini value ``prefalign_models`` (``LABEL = SOURCE`` per line; blank lines and ``#``
    comments ignored) merged over ``DEFAULT_MODELS``."""
    specs = {label: ModelSpec(label, source) for label, source in DEFAULT_MODELS.items()}
    seen: set[str] = set()
    for line in lines:
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        spec = _parse_line(text)
        if spec.label in seen:
            raise ValueError(f"size {spec.label!r} is mapped twice (line {text!r})")
        seen.add(spec.label)
        specs[spec.label] = spec
    return specs


def _parse_line(text: str) -> ModelSpec:
    label, sep, rest = (part.strip() for part in text.partition("="))
    source, *extra = rest.split() or [""]
    if not sep or not _LABEL.fullmatch(label) or not source or len(extra) > 2:
        raise ValueError(f"bad line {text!r}: expected {LINE_FORM}")
    names = [option.partition("=")[0] for option in extra]
    if len(set(names)) < len(names):
        raise ValueError(f"bad line {text!r}: an option is given twice; expected {LINE_FORM}")
    device_map = dtype = None
    for option in extra:
        if option.startswith("dtype="):
            dtype = option.removeprefix("dtype=")
            if dtype not in DTYPES:
                raise ValueError(
                    f"bad line {text!r}: unknown dtype {dtype!r}; expected one of "
                    + ", ".join(DTYPES)
                )
        else:
            device_map = _device_map(text, option)
    if device_map and source == "tiny":
        raise ValueError(f"bad line {text!r}: device_map is for models with weights, not tiny")
    if source.startswith("embedded:") and source[len("embedded:") :] not in EMBEDDED:
        raise ValueError(
            f"bad line {text!r}: unknown embedded model; known: "
            + ", ".join(f"embedded:{name}" for name in EMBEDDED)
        )
    return ModelSpec(label, source, device_map, dtype)


def _device_map(text: str, option: str) -> str:
    name, _, value = option.partition("=")
    if name != "device_map" or value not in DEVICE_MAPS:
        raise ValueError(f"bad line {text!r}: unknown option {option!r}; expected {LINE_FORM}")
    if importlib.util.find_spec("accelerate") is None:
        raise ValueError(
            f"line {text!r}: device_map={value} needs the Python package 'accelerate', which "
            "is not installed (pip install accelerate)"
        )
    return value
