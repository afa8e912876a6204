"""Records of the suites whose data is a Hugging Face dataset (``tldr``, ``prism``).

Looked up in this order:

1. the suite option ``path``: a file, or a folder searched for ``*.json``/``*.jsonl`` files, in
   the format the dataset's authors publish (JSON Lines, or one JSON list);
2. a local copy in the data directory, ``DIR/<dataset id>/`` (same format);
3. the ``datasets`` library: the local Hugging Face cache, or the hub where a network is up.

Without a network (``HF_HUB_OFFLINE=1``, or the hub's host not resolving) and with nothing
cached, the error comes at once, without the hub client's retries, and names every place.
The ``datasets`` package is imported only for step 3.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from prefalign_suites.raw_records import (
    WHOLE,
    Problems,
    Record,
    read_json_document,
    read_json_lines,
)
from pytest_prefalign.api import DataError, DataNotFound
from pytest_prefalign.datadir import data_places
from pytest_prefalign.errors import missing_extra

PATTERNS = ("*.jsonl", "*.json")
TRUE = {"1", "ON", "YES", "TRUE"}  # how the Hugging Face libraries read boolean variables


@dataclass(frozen=True)
class HubDataset:
    dataset_id: str  # e.g. openai/summarize_from_feedback
    config: str | None  # e.g. comparisons


@dataclass(frozen=True)
class Row:
    """One record with its origin: the dataset split (hub), else ``None`` (local files, where a
    record names its split itself, if at all). ``origin`` labels it in ids: split or file name."""

    split: str | None
    origin: str
    record: Record


def rows(
    ds: HubDataset, *, path: str, data_dir: Path | None, problems: Problems
) -> tuple[Iterator[Row], str]:
    """The dataset's records and a description of where they were read from."""
    if path:
        files = local_files(Path(path).expanduser(), required=True)
        return _local(files, problems), str(Path(path).expanduser())
    local = local_copy(ds, data_dir)
    if local is not None:
        return _local(local_files(local, required=True), problems), str(local)
    return _hub(ds, data_dir), f"hf:{ds.dataset_id}" + (f" ({ds.config})" if ds.config else "")


def local_copy(ds: HubDataset, data_dir: Path | None) -> Path | None:
    """``DIR/<dataset id>/`` of a data directory DIR; ``data_dir`` may also be that folder."""
    if data_dir is None:
        return None
    parts = tuple(ds.dataset_id.split("/"))
    for folder in (Path(data_dir) / ds.dataset_id, Path(data_dir)):
        if folder.is_dir() and folder.parts[-len(parts) :] == parts:
            return folder
    return None


def local_files(path: Path, *, required: bool) -> list[Path]:
    if path.is_file():
        return [path]
    files = sorted({f for pattern in PATTERNS for f in path.rglob(pattern) if f.is_file()})
    if required and not files:
        raise DataNotFound(f"{path}: no such file, or a folder without {' or '.join(PATTERNS)}")
    return files


def _local(files: list[Path], problems: Problems) -> Iterator[Row]:
    for file in files:
        for rec in _file_records(file, problems):
            yield Row(None, file.name, rec)


def _file_records(path: Path, problems: Problems) -> Iterator[Record]:
    """A JSON list (records numbered by position) or JSON Lines (numbered by line)."""
    with open(path, "rb") as fh:
        head = fh.read(64).lstrip()
    if not head.startswith(b"["):
        yield from read_json_lines(path, problems, "record:unreadable")
        return
    doc = read_json_document(path)
    for index, item in enumerate(doc):
        if isinstance(item, dict):
            yield Record(str(path), index, item)
        else:
            problems.bad("record:unreadable", DataError(path, index, WHOLE, "expected an object"))


def _hub(ds: HubDataset, data_dir: Path | None) -> Iterator[Row]:
    """Loads now (so that a missing dataset raises here), yields the rows lazily."""
    offline = _offline_reason()
    cached = [p for p in cache_paths(ds) if p.exists()]
    if offline and not cached:
        raise DataNotFound(not_found_message(ds, data_dir, offline))
    try:
        import datasets
    except ImportError:
        needs = missing_extra("datasets", "hf", f"the Hugging Face dataset {ds.dataset_id}")
        raise DataNotFound(
            f"{needs}; or give a local copy (option path, or the data directory)"
        ) from None
    try:
        loaded = datasets.load_dataset(ds.dataset_id, ds.config)
    except (OSError, ValueError) as exc:  # offline, not found, a broken cache
        problem = f"the datasets library failed: {type(exc).__name__}: {exc}"
        raise DataNotFound(not_found_message(ds, data_dir, problem)) from None
    return _dataset_rows(loaded, f"hf:{ds.dataset_id}/{ds.config or 'default'}")


def _dataset_rows(loaded: Any, label: str) -> Iterator[Row]:
    for split in loaded:
        for index, row in enumerate(loaded[split]):
            yield Row(split, split, Record(f"{label}/{split}", index, row))


def cache_paths(ds: HubDataset) -> list[Path]:
    """Where the Hugging Face libraries keep this dataset: the hub download cache and the
    ``datasets`` cache (read from the environment now, as the libraries do at import)."""
    home = Path(
        os.environ.get("HF_HOME")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    )
    hub = Path(
        os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or home / "hub"
    )
    built = Path(os.environ.get("HF_DATASETS_CACHE") or home / "datasets")
    return [
        hub / f"datasets--{ds.dataset_id.replace('/', '--')}",
        built / ds.dataset_id.replace("/", "___"),
    ]


def _offline_reason() -> str | None:
    """Why the hub cannot be asked, or None: offline mode, or a host name that does not
    resolve (checked so that a machine without a network fails now, not after retries)."""
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        if os.environ.get(name, "").upper() in TRUE:
            return f"offline ({name}={os.environ[name]})"
    host = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co").hostname or ""
    try:
        socket.getaddrinfo(host, 443)
    except OSError as exc:
        return f"unreachable ({host} does not resolve: {exc})"
    return None


def not_found_message(ds: HubDataset, data_dir: Path | None, hub_problem: str) -> str:
    local = (
        f"{Path(data_dir) / ds.dataset_id} (no such directory)"
        if data_dir is not None
        else f"no data directory holds {ds.dataset_id}/"
    )
    lines = [
        f"dataset {ds.dataset_id}"
        + (f" (config {ds.config})" if ds.config else "")
        + " not found; looked in:",
        "  - suite option path: not set",
        f"  - data directory: {local}",
    ]
    if data_dir is None:
        lines += [f"      {place.describe(ds.dataset_id)}" for place in data_places()[2:]]
        lines.append("      (and --prefalign-data, ini prefalign_data where given)")
    lines += [
        f"  - Hugging Face cache: {p} ({'present' if p.exists() else 'absent'})"
        for p in cache_paths(ds)
    ]
    lines.append(f"  - Hugging Face hub: {hub_problem}")
    lines.append(
        f"Provide the data: load it once with a network (it stays in the cache), put "
        f"the published files in DIR/{ds.dataset_id}/ for a data directory DIR, or set "
        "the option path = FILE_OR_FOLDER in the suite's suite.toml."
    )
    return "\n".join(lines)
