"""Released pairs: the writer's Pref-LaMP pairs for the shipped authors, written once, versioned
and checksummed, and read by every run on those authors instead of writing them again.

A benchmark's pairs are data. The writer samples its titles (temperature 0.7): another machine,
thread count or BLAS can draw other titles from the same seed, so pairs written by each user
could differ between two labs running "the same" suite, and a gate could compare runs on other
pairs without knowing it. The release fixes them: ``prefalign data build-pairs pref_lamp``
writes them once (resumable: the writer's titles are cached as in a run), with the writer's
name, source and fingerprint, the options that decide the pairs and a checksum of the pairs.

A run uses a brief's released pairs where the release was made with the run's writer options
(``decisive``) and holds the brief with the same texts (``brief_key``: its prompts, examples,
abstract and real title; another data version makes other briefs). Where every brief is held,
the writer is not loaded at all; the others are written as before. The run file's provenance
says which release, its checksum and how many briefs it gave (``pairs_release``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefalign_suites.pref_lamp.briefs import ABSTRACT_WORDS, EXAMPLE_WORDS, Brief
from prefalign_suites.pref_lamp.negatives import Source
from prefalign_suites.pref_lamp.writer import Made, Options, Written
from prefalign_suites.raw_records import WHOLE
from pytest_prefalign import storage
from pytest_prefalign.api import DataError

# the releases in the package: one file per set of writer options released (pairs-*.json.gz)
RELEASED = Path(__file__).resolve().parent / "released"
FORMAT = 1


def decisive(options: Options) -> dict[str, Any]:
    """The writer options that decide the pairs (the batch size does not)."""
    return {
        "design": options.design,
        "writer": options.writer,
        "shots": options.shots,
        "samples": options.samples,
        "temperature": options.temperature,
        "max_new_tokens": options.max_new_tokens,
        "length_slack": options.length_slack,
        "seed": options.seed,
        "pairing": options.pairing,
        "example_words": EXAMPLE_WORDS,
        "abstract_words": ABSTRACT_WORDS,
        # the cross-fitting design's briefs differ (its releases only: the others' options
        # stay as they were released)
        **({"folds": options.folds} if options.folds > 1 else {}),
        **({"rivals": options.rivals} if options.rivals > 1 else {}),
    }


def brief_key(brief: Brief) -> str:
    """The texts a brief's pairs are made from: its user, prompts (the further rivals' where
    it has them), the example titles shown, and the paper's abstract and real title."""
    src = brief.source
    rivals = (brief.rivals, brief.rival_shown) if brief.rivals else ()
    return storage.content_key(
        src.user, src.paper_id, src.abstract, src.title, brief.own, brief.others, brief.shown,
        *rivals,
    )  # fmt: skip


def checksum(sources: dict[str, Any]) -> str:
    """The sha256 of the pairs as canonical JSON (sorted keys, no spaces, UTF-8)."""
    blob = json.dumps(sources, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Release:
    """A file of released pairs: ``sources`` maps a brief's source pair id to its
    ``brief_key`` and its pairs ``[pair_id, chosen, rejected, length gap]``."""

    version: str
    checksum: str
    writer: Written
    options: dict[str, Any]
    sources: dict[str, dict[str, Any]]
    path: Path

    def taken(self, briefs: Sequence[Brief]) -> dict[str, Made]:
        """The pairs of every brief the release holds with the same texts, by source pair id."""
        found: dict[str, Made] = {}
        for brief in briefs:
            held = self.sources.get(brief.source.pair_id)
            if held is None or held["brief"] != brief_key(brief):
                continue
            found[brief.source.pair_id] = Made(
                tuple(
                    (_renamed(brief.source, pair_id), chosen, rejected, gap)
                    for pair_id, chosen, rejected, gap in held["pairs"]
                )
            )
        return found

    def summary(self, *, taken: int, written: int) -> dict[str, Any]:
        """What a run's provenance says of the release: its version, checksum, and how many
        briefs it gave and how many the writer wrote."""
        return {
            "version": self.version,
            "sha256": self.checksum,
            "briefs_released": taken,
            "briefs_written": written,
        }


def _renamed(source: Source, pair_id: str) -> Source:
    return source if source.pair_id == pair_id else replace(source, pair_id=pair_id)


def packaged(pairing: str, folds: int = 1, rivals: int = 1) -> Path:
    """Where the package keeps the release of a pairing (``nearest``, ``matched``), a
    cross-fitting design (``folds`` > 1: ``pairs-nearest-folds2.json.gz``) and rivals
    (``rivals`` > 1: ``pairs-nearest-folds2-rivals3.json.gz``)."""
    design = pairing if folds == 1 else f"{pairing}-folds{folds}"
    design = design if rivals == 1 else f"{design}-rivals{rivals}"
    return RELEASED / f"pairs-{design}.json.gz"


def read(path: Path) -> Release | None:
    """The release at ``path``; None where there is none. A file whose pairs do not match its
    checksum is an error (a damaged file must not become a benchmark's pairs)."""
    if not path.is_file():
        return None
    try:
        doc = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        version, stated = doc["version"], doc["sha256"]
        writer = Written(**doc["writer"])
        options, sources = doc["options"], doc["sources"]
        if doc["format"] != FORMAT:
            problem = f"format {doc['format']!r}; this version reads {FORMAT}"
            raise DataError(path, "-", WHOLE, problem)
    except DataError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise DataError(path, "-", WHOLE, f"not a pairs release ({exc!r})") from None
    actual = checksum(sources)
    if actual != stated:
        problem = f"its pairs' sha256 is {actual}; the file states {stated}"
        raise DataError(path, "-", WHOLE, problem)
    return Release(version, stated, writer, options, sources, path)


def matching(options: Options) -> Release | None:
    """The packaged release made with these writer options, else None."""
    release = read(packaged(options.pairing, options.folds, options.rivals))
    return release if release is not None and release.options == decisive(options) else None


def write(
    path: Path,
    version: str,
    writer: Written,
    options: Options,
    briefs: Sequence[Brief],
    made: dict[str, Made],
) -> Release:
    """Write the release of ``briefs`` and their ``made`` pairs (gzip without a timestamp: the
    same pairs make the same bytes)."""
    sources = {
        brief.source.pair_id: {
            "brief": brief_key(brief),
            "pairs": [list(pair) for pair in _plain(made[brief.source.pair_id])],
        }
        for brief in briefs
    }
    doc = {
        "format": FORMAT,
        "version": version,
        "sha256": checksum(sources),
        "writer": {
            "name": writer.name,
            "source": writer.source,
            "fingerprint": writer.fingerprint,
            "weights": writer.weights,
        },
        "options": decisive(options),
        "sources": sources,
    }
    blob = json.dumps(doc, sort_keys=True, indent=0, ensure_ascii=False).encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    storage.atomic_write_bytes(path, gzip.compress(blob, mtime=0))
    found = read(path)
    assert found is not None
    return found


def _plain(made: Made) -> list[tuple[str, str, str, int]]:
    return [(src.pair_id, chosen, rejected, gap) for src, chosen, rejected, gap in made.pairs]
