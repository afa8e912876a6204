"""The builder of ``prefalign data fetch tldr``: a local copy of OpenAI's
summarize-from-feedback comparisons (``DIR/openai/summarize_from_feedback/<split>.jsonl``),
loaded through ``datasets`` (see ``hf_fetch``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from prefalign_suites import hf_fetch
from prefalign_suites.tldr.suite import DATASET, Tldr
from pytest_prefalign.fetch import Built, Progress

LICENCE = "MIT (OpenAI summarize-from-feedback); Reddit posts from the TL;DR corpus"
ATTRIBUTION = Tldr.attribution


def add_arguments(group: argparse._ArgumentGroup) -> None:
    """No options: the dataset's id and config are the suite's."""


def hosts(options: argparse.Namespace) -> list[str]:
    return []  # the datasets library handles offline mode and its own cache


def build(folder: Path, options: argparse.Namespace, progress: Progress) -> Built:
    return hf_fetch.build(DATASET, folder, progress, licence=LICENCE, attribution=ATTRIBUTION)
