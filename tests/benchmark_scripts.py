"""The benchmark scripts loaded as modules for their tests (benchmarks/ is not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load(script: str, name: str | None = None) -> ModuleType:
    """``benchmarks/SCRIPT.py`` as a module, registered in ``sys.modules`` under ``name``
    (default: the script's) since dataclasses look their module up there; the caller removes
    it when done."""
    name = name or script
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{script}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
