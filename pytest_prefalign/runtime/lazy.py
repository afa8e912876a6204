"""A model named before it is loaded: an ``LM`` stand-in that answers what the cache keys and the
run file ask of a model (its fingerprint, name, dtype, device, kernel) from its identity
(``runtime/identity.py``: the model's files), and loads the model on first use of anything else.

A rerun whose values all come from the cache asks nothing else, so it loads no tokenizer and no
weights, and imports neither the loader nor transformers. Once loaded, every attribute is the
loaded ``LM``'s; its fingerprint must be the one the identity gave, or the keys computed before
loading would name another model (an error, not a silent mismatch).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from pytest_prefalign.runtime import devices
from pytest_prefalign.runtime.identity import Identity, identity
from pytest_prefalign.runtime.meter import ForwardMeter
from pytest_prefalign.runtime.sources import ModelSpec

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from pytest_prefalign.runtime.lm import LM

LOADER = "pytest_prefalign.runtime.models"


class Unloaded:
    """The meter of a model not yet loaded: it has run no pass, so its reading is empty (a
    reading taken after it loads counts every pass since, ``ForwardMeter.since``)."""

    since = staticmethod(ForwardMeter.since)

    def reading(self) -> dict[str, float]:
        return {}


class LazyLM:
    """An ``LM`` loaded on first use of anything its identity does not answer."""

    def __init__(self, spec: ModelSpec, known: Identity) -> None:
        own = object.__setattr__
        own(self, "_spec", spec)
        own(self, "_identity", known)
        own(self, "_lm", None)
        own(self, "label", spec.label)
        own(self, "name", known.name)
        own(self, "source", known.source)
        own(self, "weights_fingerprint", known.weights)
        own(self, "fingerprint", known.fingerprint)
        own(self, "dtype", known.dtype)
        own(self, "device_type", devices.device_type(known.device))
        own(self, "linear_kernel", known.kernel)

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"LazyLM(label={self.label!r}, fingerprint={self.fingerprint!r}, {state})"

    @property
    def device(self) -> torch.device:
        """Where the model runs, as ``LM.device`` gives it (torch is imported when asked)."""
        import torch

        return torch.device(self._identity.device)

    @property
    def loaded(self) -> bool:
        return self._lm is not None

    @property
    def cache_uses(self) -> list[Any]:
        """The cached values finding the model used (its converted folder), as ``LM``'s."""
        return self._lm.cache_uses if self._lm is not None else list(self._identity.uses)

    @property
    def meter(self) -> ForwardMeter | Unloaded:
        return self._lm.meter if self._lm is not None else Unloaded()

    def load(self) -> LM:
        """The loaded ``LM`` (``models.load_lm``, once per process)."""
        if self._lm is None:
            from pytest_prefalign.runtime.models import load_lm

            lm = load_lm(self._spec)
            if lm.fingerprint != self.fingerprint:
                raise RuntimeError(
                    f"model {self.label}: loaded as {lm.fingerprint} ({lm.dtype}, "
                    f"{lm.device.type}, {lm.linear_kernel}), but its identity from its files "
                    f"is {self.fingerprint} ({self.dtype}, {self.device.type}, "
                    f"{self.linear_kernel}); the keys computed before loading would name "
                    "another model"
                )
            object.__setattr__(self, "_lm", lm)
        return self._lm

    def __getattr__(self, name: str) -> Any:  # what the identity does not answer
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.load(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.load(), name, value)


def lazy_lm(spec: ModelSpec) -> LM:
    """The spec's model: the loaded ``LM`` where this process has it, or one whose identity
    its files do not give; else a ``LazyLM`` that loads it on first use. (A process that has
    not imported the loader has loaded no model: it is not imported to ask.)"""
    loader = sys.modules.get(LOADER)
    lm = loader.loaded(spec) if loader is not None else None
    if lm is not None:
        return lm
    known = identity(spec)
    if known is None:
        from pytest_prefalign.runtime.models import load_lm

        return load_lm(spec)
    return LazyLM(spec, known)  # type: ignore[return-value]  # answers as an LM
