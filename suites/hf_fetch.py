"""Building a local copy of a Hugging Face dataset (the builders of ``prefalign data fetch tldr``
and ``prism``).

The dataset is loaded through the ``datasets`` library, as a run without a local copy does (its
downloads go to the Hugging Face cache, with its progress bars), and each split is written as
``<split>.jsonl`` into the suite's folder ``DIR/<dataset id>/``: the local copy that
``hf_source`` reads before asking the library. A record that names no ``split`` gets the
split's name (``tldr`` reads it from the record in local files).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prefalign_suites.hf_source import HubDataset
from pytest_prefalign.errors import import_extra
from pytest_prefalign.fetch import Built, FetchError, Progress

REVISION_RE = re.compile(r"@([0-9a-f]{40})")


def build(
    ds: HubDataset, folder: Path, progress: Progress, *, licence: str, attribution: str
) -> Built:
    datasets = import_extra(
        "datasets",
        package="datasets",
        extra="hf",
        needed_for=f"the Hugging Face dataset {ds.dataset_id}",
        error=FetchError,
    )
    progress.say(
        f"loading {ds.dataset_id} ({ds.config or 'default'}) through datasets "
        f"{datasets.__version__}"
    )
    try:
        loaded = datasets.load_dataset(ds.dataset_id, ds.config)
    except (OSError, ValueError) as exc:  # offline, not found, a broken cache
        raise FetchError(
            f"the datasets library failed on {ds.dataset_id}: {type(exc).__name__}: {exc}"
        ) from None
    counts = {}
    for split in loaded:
        counts[split] = write_split(loaded[split], split, folder / f"{split}.jsonl", progress)
    return Built(
        source=f"Hugging Face dataset {ds.dataset_id} ({ds.config or 'default'}), through "
        f"datasets {datasets.__version__}",
        version=revision(loaded),
        licence=licence,
        attribution=attribution,
        details={"dataset": ds.dataset_id, "config": ds.config, "records": counts},
    )


def write_split(rows: Any, split: str, path: Path, progress: Progress) -> int:
    """One split as JSON Lines; returns the number of records."""
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for row in progress.bar(rows, total=len(rows), desc=split, unit="record"):
            record = dict(row)
            record.setdefault("split", split)
            fh.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
            count += 1
    return count


def revision(loaded: Any) -> str:
    """The hub commit the data came from, where the library's records name it."""
    for split in loaded:
        info = getattr(loaded[split], "info", None)
        found = REVISION_RE.search(" ".join(getattr(info, "download_checksums", None) or {}))
        if found:
            return found.group(1)
    return "the hub's current revision (datasets did not record its commit)"
