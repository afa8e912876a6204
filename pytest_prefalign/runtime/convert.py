"""GGUF files converted once into plain safetensors folders in the user cache, keyed by what the
folder depends on: the file, the converter's code and the libraries that dequantize and write
it. Workers serialise on a lock; a folder appears whole or not at all."""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from pytest_prefalign import cache, events, storage, versions

T = TypeVar("T")
_PATCHING = threading.Lock()  # held while gguf's names are replaced (``_parsed_once``)


def conversion_key(digest: str) -> cache.Key:
    """What a converted folder depends on: the GGUF file (its sha256), the converter's code and
    the libraries that dequantize and write it."""
    return cache.make_key(
        "models",
        gguf=digest,
        converter=versions.function_version(convert_gguf),
        libraries=versions.library_versions("transformers", "gguf", "torch", "safetensors"),
    )


def ensure_converted(digest: str, gguf: Callable[[], Path], source: str) -> Path:
    """The safetensors folder ``<cache>/models/<key>`` of a GGUF file (``conversion_key``),
    converted on first use, also with ``--prefalign-no-cache`` (the converted model is the
    model itself, not a result). Workers serialise on a lock; the folder appears whole (built
    beside it, then renamed), so a reader never sees half a model."""
    folder, hit = _converted(digest, gguf, source)
    cache.note(conversion_key(digest), hit=hit)
    return folder


def load_converted(
    digest: str, gguf: Callable[[], Path], source: str, load: Callable[[Path], T]
) -> T:
    """``load`` of the converted folder; a folder that fails to load (a truncated file, say) is
    a miss: one warning naming it, the folder removed, the file converted again."""
    folder, hit = _converted(digest, gguf, source)
    try:
        value = load(folder)
    except Exception as exc:  # whatever transformers or safetensors raise on a bad file
        with storage.locked(folder):
            cache.discard(folder, exc)
        folder, hit = _converted(digest, gguf, source)
        value = load(folder)
    cache.note(conversion_key(digest), hit=hit)
    return value


def converted_folder(digest: str) -> tuple[Path, bool]:
    """The folder the conversion of the GGUF file of sha256 ``digest`` is kept in (its name is
    the converted model's weights fingerprint), and whether a finished conversion is there."""
    target = storage.cache_dir("models") / conversion_key(digest).digest
    return target, (target / "config.json").is_file()


def _converted(digest: str, gguf: Callable[[], Path], source: str) -> tuple[Path, bool]:
    target, found = converted_folder(digest)
    root = target.parent
    if found:
        return target, True
    with storage.locked(target):
        if (target / "config.json").is_file():  # another worker converted it meanwhile
            return target, True
        if target.exists():  # not made by us: no config.json, so not a finished conversion
            shutil.rmtree(target)
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{target.name}.", suffix=".tmp"))
        try:
            path = gguf()
            with events.step(f"converting {source} to safetensors (once)"):
                convert_gguf(path, tmp)
            storage.atomic_write_json(
                tmp / "prefalign.json", {"source": source, "gguf": str(path), "sha256": digest}
            )
            # mkdtemp makes it private, and the weights come out 0600: the cache is shared
            storage.make_shareable(tmp)
            os.replace(tmp, target)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return target, False


@contextmanager
def _parsed_once() -> Iterator[None]:
    """While converting, one ``gguf.GGUFReader`` per file and one tensor-name map per
    architecture. transformers reads the file three times (the tokenizer, the config, the
    weights), each read parsing the whole vocabulary one Python call per entry (about 3 s for
    49k tokens), and it builds the same name map once per module (about 6 s for the 135M
    model). Both are only read, so sharing them changes nothing in what is written (a test
    compares the bytes)."""
    import gguf as module

    gguf: Any = module  # its names are replaced for the while
    readers: dict[tuple[str, str], Any] = {}

    def reader(path: Any, mode: Any = "r") -> Any:
        key = (os.fspath(path), str(mode))
        if key not in readers:
            readers[key] = made(path, mode)
        return readers[key]

    # transformers imports both from gguf inside each call, so the module's names are the ones;
    # one conversion at a time in a process, so that two threads never restore each other's
    with _PATCHING:
        made, mapped = gguf.GGUFReader, gguf.get_tensor_name_map
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.cache(mapped)
        try:
            yield
        finally:
            gguf.GGUFReader, gguf.get_tensor_name_map = made, mapped


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF file into a plain fp32 safetensors folder (model and tokenizer).

    transformers refuses to ``save_pretrained`` a model loaded from GGUF, so the weights are
    copied into a fresh model built from the same config without its quantization entry.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pytest_prefalign.runtime.quiet import no_progress_bars

    with _parsed_once(), no_progress_bars():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            gguf.parent, gguf_file=gguf.name, dtype=torch.float32
        )
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    plain = AutoModelForCausalLM.from_config(
        type(loaded.config).from_dict(config), dtype=torch.float32
    )
    plain.load_state_dict(loaded.state_dict())
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
