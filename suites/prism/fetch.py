"""The builder of ``prefalign data fetch prism``: a local copy of the PRISM alignment
conversations (``DIR/HannahRoseKirk/prism-alignment/<split>.jsonl``), loaded through
``datasets`` (see ``hf_fetch``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prefalign_suites import hf_fetch
from prefalign_suites.prism.suite import DATASET, Prism
from pytest_prefalign.fetch import Built, Progress

LICENCE = "prompts CC BY 4.0, model responses CC BY-NC 4.0 (and the model providers' terms)"
ATTRIBUTION = Prism.attribution


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """No options: the dataset's id and config are the suite's."""


def hosts(options: argparse.Namespace) -> list[str]:
    return []  # the datasets library handles offline mode and its own cache


def build(folder: Path, options: argparse.Namespace, progress: Progress) -> Built:
    return hf_fetch.build(DATASET, folder, progress, licence=LICENCE, attribution=ATTRIBUTION)
