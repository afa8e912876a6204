"""``MANIFEST.json``, the record a fetched data folder carries: its source, the version read,
the date, the licence and attribution, and the SHA-256 and size of every other file in it;
written when ``prefalign data fetch`` builds the folder, checked by ``--check``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pytest_prefalign import storage

MANIFEST = "MANIFEST.json"


@dataclass
class Built:
    """What a builder reports about the folder it wrote: the manifest's fields."""

    source: str  # what was read, e.g. "ACL Anthology XML (github.com/acl-org/acl-anthology)"
    version: str  # the exact version read: a commit, a dataset revision
    licence: str
    attribution: str
    details: dict[str, Any] = field(default_factory=dict)  # selection rules, figures, URLs


def write_manifest(folder: Path, suite_name: str, built: Built) -> dict[str, Any]:
    """Write ``MANIFEST.json`` into ``folder`` (every other file in it gets its hash)."""
    from importlib.metadata import version

    files = {
        path.relative_to(folder).as_posix(): {
            "sha256": storage.file_sha256(path),
            "bytes": path.stat().st_size,
        }
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    manifest = {
        "suite": suite_name,
        "source": built.source,
        "version": built.version,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "licence": built.licence,
        "attribution": built.attribution,
        "built_by": f"pytest-prefalign {version('pytest-prefalign')}",
        "details": built.details,
        "files": files,
    }
    storage.atomic_write_json(folder / MANIFEST, manifest)
    return manifest


def check_manifest(folder: Path) -> list[str]:
    """What does not match ``folder``'s manifest: one line per missing, changed or unlisted
    file; an empty list where everything matches."""
    path = folder / MANIFEST
    if not path.is_file():
        return [f"{path}: no such file"]
    listed: dict[str, dict[str, Any]] = storage.read_json(path).get("files", {})
    problems = []
    for name, entry in listed.items():
        file = folder / name
        if not file.is_file():
            problems.append(f"{file}: missing")
        elif storage.file_sha256(file) != entry.get("sha256"):
            problems.append(f"{file}: SHA-256 differs from {MANIFEST}")
    for file in sorted(folder.rglob("*")):
        name = file.relative_to(folder).as_posix()
        if file.is_file() and file.name != MANIFEST and name not in listed:
            problems.append(f"{file}: not listed in {MANIFEST}")
    return problems
