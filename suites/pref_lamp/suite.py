"""The Pref-LaMP suite: users are ACL Anthology authors (or LaMP-5 users), the task is writing the
title of one's own paper from its abstract. See docs/suites.md for the rules and options."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

from prefalign_suites.pref_lamp import (
    anthology,
    briefs,
    briefs_kept,
    corpus,
    lamp5,
    negatives,
    release,
    writer,
)
from prefalign_suites.raw_records import Problems, normalise_ws
from pytest_prefalign import suite_options
from pytest_prefalign.api import ProfileEntry, SuiteData
from pytest_prefalign.datadir import suite_folder
from pytest_prefalign.suite_options import Above, AtLeast, Count, OptionError, Share

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from prefalign_suites.pref_lamp.corpus import Paper, UserPapers
    from pytest_prefalign.runtime.lm import LM


@dataclass(frozen=True)
class PrefLampOptions:
    """Pref-LaMP's options, set in ``suite.toml``'s ``[options]`` (docs/suites.md)."""

    # anthology (acl-anthology/) or lamp5 (the original LaMP-5 files)
    source: Literal["anthology", "lamp5"] = "anthology"
    lamp5_dir: str = ""  # with source = lamp5: the folder of {split}_questions/_outputs.json
    lamp5_split: Literal["", "dev", "train"] = ""  # dev or train; empty: dev where present
    # style: both sides written by the writer for the same abstract, after the author's own
    # papers (chosen) and after another person's (rejected); written: the real title over the
    # writer's after another person's; other_author: a similar paper's title by somebody else;
    # generated: the reference LM's zero-shot title (docs/suites.md: how the default was chosen)
    negatives: Literal["style", "written", "generated", "other_author"] = "style"
    # other_author: words the negative's length may differ; "any": no limit
    length_slack: Count | Literal["any"] = 1
    writer: str = writer.WRITER  # style, written: the model source of the writer
    # style, written: example papers shown to the writer per prompt
    writer_shots: Annotated[int, AtLeast(1)] = 3
    writer_samples: Annotated[int, AtLeast(1)] = 3  # style, written: titles sampled per prompt
    writer_temperature: Annotated[float, Above(0)] = 0.7  # style, written: of the sampled titles
    writer_slack: Count = 2  # style, written: tokens the two sides' lengths may differ (counted)
    # style, written: a test paper's pairs: nearest (the one pair of candidates nearest in
    # length) or matched (every pair of candidates within writer_slack, docs/suites.md)
    writer_pairs: Literal["nearest", "matched"] = "nearest"
    # style, written: the rejected sides of a test paper, each written after another person's
    # examples (the nearest people first); a pair per rival (docs/suites.md, "Rivals")
    writer_rivals: Annotated[int, AtLeast(1)] = 1
    test_share: Share = Fraction("0.3")  # the most recent share of an author's papers: test items
    min_profile: Count = 3  # users with fewer profile papers (after the leak rule) are dropped
    max_train_pairs: Count = 0  # training pairs per user, the most recent profile papers; 0 = all
    # max_new_tokens of the writer's or the reference LM's titles
    title_tokens: Annotated[int, AtLeast(1)] = 32
    # sequences per batch of the writer or the LM: 48 writes 16 prompts of 3 samples at once, half
    # the time a prompt of 16 took on this 2-core machine (the samples do not depend on it)
    batch_size: Annotated[int, AtLeast(1)] = 48
    # cross-fitting (style, written; docs/suites.md): with folds > 1 every paper of an author is
    # split by a hash of its key into folds; fold `fold` holds the test items, the others the
    # profile; a run per fold makes every paper a test item once
    folds: Annotated[int, AtLeast(1)] = 1
    fold: Count = 0

    def __post_init__(self) -> None:
        if self.source == "lamp5" and not self.lamp5_dir:
            raise OptionError("lamp5_dir", "needed with source = lamp5")
        if self.negatives in writer.DESIGNS and not self.writer:
            raise OptionError("writer", "expected a model source, e.g. " + writer.WRITER)
        if self.fold >= self.folds:
            raise OptionError("fold", f"expected 0 to {self.folds - 1} (folds = {self.folds})")
        if self.folds > 1 and self.source != "anthology":
            # LaMP-5's pool holds the profiles only: a test paper could be no example
            raise OptionError("folds", "cross-fitting needs source = anthology")
        if self.folds > 1 and self.negatives not in writer.DESIGNS:
            raise OptionError("folds", "cross-fitting needs negatives = style or written")
        if self.folds > 1 and self.writer_pairs != "nearest":
            # a release pairs a training paper by the nearest lengths only
            raise OptionError("folds", "cross-fitting needs writer_pairs = nearest")
        if self.writer_rivals > 1 and self.negatives not in writer.DESIGNS:
            raise OptionError("writer_rivals", "rivals need negatives = style or written")
        if self.writer_rivals > 1 and self.writer_pairs != "nearest":
            raise OptionError("writer_rivals", "rivals need writer_pairs = nearest")


# what the writer is asked, its briefs (training, test), and the release holding some of them
Briefs = tuple[list[briefs.Brief], list[briefs.Brief]]
Planned = tuple[writer.Options, Briefs, "release.Release | None"]


class PrefLamp:
    name = "pref_lamp"
    description = (
        "Pref-LaMP: write the title of one's own paper from its abstract; users are "
        "ACL Anthology authors, split in time, with ground-truth titles"
    )
    licence = "CC BY 4.0 (ACL Anthology, https://aclanthology.org)"
    attribution = "ACL Anthology, https://aclanthology.org, CC BY 4.0"  # shown with every result
    source = "acl-anthology"
    fetcher = "prefalign_suites.pref_lamp.fetch"  # builds source/: prefalign data fetch pref_lamp
    # writes the released pairs: prefalign data build-pairs pref_lamp
    pairs_builder = "prefalign_suites.pref_lamp.build_pairs:build_main"

    options = PrefLampOptions

    def __init__(self) -> None:
        # what ``load`` planned for the writer, by the data it loaded, until ``build_pairs``
        self._briefs: dict[int, Planned] = {}

    @staticmethod
    def requires_data_dir(options: Mapping[str, str]) -> bool:
        """The ACL Anthology folder is needed unless the run reads the original LaMP-5 files."""
        return options.get("source", "anthology") != "lamp5"

    def instruction(self, input: str) -> str:
        return f"Generate a title for the following abstract of a paper: {normalise_ws(input)}"

    def example(self, entry: ProfileEntry) -> str:
        return f"Abstract: {entry.input}\nTitle: {entry.output}"

    def load(
        self,
        data_dir: Path | None,
        *,
        limit: int | None,
        options: PrefLampOptions | Mapping[str, str],
    ) -> SuiteData:
        opts = suite_options.parse(PrefLampOptions, options)
        problems = Problems()
        if opts.source == "lamp5":
            read, pool, where = lamp5.read(
                Path(opts.lamp5_dir).expanduser().resolve(),  # relative: from the current dir
                split=opts.lamp5_split,
                limit=limit,
                problems=problems,
            )
            users, _ = corpus.apply_rules(read, min_profile=opts.min_profile, problems=problems)
            held_out = corpus.test_keys(users)
            tested = fold_keys(users, opts)
        else:
            read, users, pool, held_out = read_authors(data_dir, opts, problems)
            where = str(suite_folder(data_dir, self.source, anthology.AUTHORS))
            tested = fold_keys(users, opts)  # every kept author's: the same whatever the limit
            if limit is not None:
                users = dict(list(users.items())[:limit])
        leaked = sum(len(read[u].profile) - len(p.profile) for u, p in users.items())
        split = users
        if opts.folds > 1:
            split = corpus.cross_fit(users, opts.folds, opts.fold, min_profile=opts.min_profile)
        problems.drop("user:too_few_papers_in_fold", len(users) - len(split))
        data = corpus.suite_data(
            self,
            split,
            source=where,
            provenance={
                "format": opts.source,
                "negatives": opts.negatives,
                "options": suite_options.as_strings(opts),
                "leak_rule_removed_profile_papers": leaked,
            },
        )
        if opts.negatives == "other_author":
            negatives.other_author(
                self,
                data,
                users,
                pool,
                held_out=held_out,
                max_train=opts.max_train_pairs,
                length_slack=None if opts.length_slack == "any" else opts.length_slack,
            )
        elif opts.negatives in writer.DESIGNS:
            writing = writer_options(opts)
            train, test = writer_briefs(users, pool, held_out, opts)
            if opts.folds > 1:
                train, test = fold_briefs(data, [*train, *test], tested, opts)
            known = release.matching(writing)
            taken = known.taken([*train, *test]) if known is not None else {}
            if known is not None and len(taken) == len(train) + len(test):
                # every brief is released: no writer to load, no title to write
                writer.write(self, data, train, test, None, None, writing, known, taken)
            else:
                self._briefs[id(data)] = (writing, (train, test), known)
        problems.report(data)
        return data

    def writer(self, data: SuiteData) -> str | None:
        """The model source that ``build_pairs`` needs for this data: the writer of the
        ``style`` and ``written`` designs; None: the reference generator (``generated``)."""
        planned = self._briefs.get(id(data))
        return planned[0].writer if planned else None

    def build_pairs(self, data: SuiteData, reference: LM, cache_dir: Path) -> None:
        """Written or generated pairs, with ``reference`` the model ``writer`` names; a no-op
        where ``load`` made the pairs (other_author). Called on the suite that loaded
        ``data``."""
        planned = self._briefs.pop(id(data), None)
        if planned:
            writing, (train, test), known = planned
            writer.write(self, data, train, test, reference, cache_dir, writing, known)
            return
        opts = suite_options.parse(PrefLampOptions, data.provenance.get("options", {}))
        if opts.negatives != "generated":
            return
        negatives.generated(
            self,
            data,
            reference,
            cache_dir,
            max_train=opts.max_train_pairs,
            max_new_tokens=opts.title_tokens,
            batch_size=opts.batch_size,
        )


def read_authors(
    data_dir: Path | None, opts: PrefLampOptions, problems: Problems
) -> tuple[dict[str, UserPapers], dict[str, UserPapers], list[Paper], frozenset[str]]:
    """Every author of the anthology folder as read (file order), those the rules keep (their
    profiles cleaned), every paper (the pool), and the keys of the kept authors' test papers.
    The leak rule and the examples' pool see every author, not only a run's first ``limit``:
    an author's profile and pairs are the same whatever the limit (and a release's pairs are
    any run's)."""
    folder = suite_folder(data_dir, PrefLamp.source, anthology.AUTHORS)
    read, pool = anthology.read(folder, limit=None, share=opts.test_share, problems=problems)
    users, _ = corpus.apply_rules(read, min_profile=opts.min_profile, problems=problems)
    return read, users, pool, corpus.test_keys(users)


def fold_keys(users: dict[str, UserPapers], opts: PrefLampOptions) -> frozenset[str]:
    """Cross-fitting: the keys of the papers of the run's fold, every kept author's (empty
    without cross-fitting)."""
    if opts.folds == 1:
        return frozenset()
    return corpus.fold_test_keys(users, opts.folds, opts.fold)


def writer_briefs(
    users: dict[str, UserPapers],
    pool: list[Paper],
    held_out: frozenset[str],
    opts: PrefLampOptions,
) -> tuple[list[briefs.Brief], list[briefs.Brief]]:
    """The writer's briefs of ``users`` (``briefs.briefs``, kept in the run's cache:
    ``briefs_kept``): the time split's, or with cross-fitting every paper's, its examples from
    its fold (no paper held out, no training pairs cut: ``fold_briefs`` takes a fold's)."""
    crossed = opts.folds > 1
    return briefs_kept.briefs(
        users,
        pool,
        frozenset() if crossed else held_out,
        max_train=0 if crossed else opts.max_train_pairs,
        shots=opts.writer_shots,
        folds=opts.folds,
        rivals=opts.writer_rivals,
    )


def fold_briefs(
    data: SuiteData, every: list[briefs.Brief], tested: frozenset[str], opts: PrefLampOptions
) -> tuple[list[briefs.Brief], list[briefs.Brief]]:
    """The fold's training and test briefs (``briefs.fold_briefs``) of the users the fold
    kept; the provenance counts the training briefs left out for showing a test paper."""
    users = [b for b in every if b.source.user in data.profiles]
    # a paper alone in its fold among its author's has no example: both prompts would be the
    # same and so would the sides' writer; it is left out
    kept = [b for b in users if b.examples]
    train, test = briefs.fold_briefs(kept, tested, max_train=opts.max_train_pairs)
    data.provenance["cross_fit"] = {
        "folds": opts.folds,
        "fold": opts.fold,
        "test_briefs": len(test),
        "training_briefs": len(train),
        "training_briefs_showing_a_test_paper": sum(
            b.key not in tested and not tested.isdisjoint(b.examples) for b in kept
        ),
        "training_briefs_possible": sum(b.key not in tested for b in kept),
        "briefs_without_examples": len(users) - len(kept),
    }
    return train, test


def writer_options(opts: PrefLampOptions) -> writer.Options:
    """What the writer of the ``style`` and ``written`` designs is asked, from the options."""
    return writer.Options(
        design=opts.negatives,
        writer=opts.writer,
        shots=opts.writer_shots,
        samples=opts.writer_samples,
        temperature=opts.writer_temperature,
        max_new_tokens=opts.title_tokens,
        batch_size=opts.batch_size,
        length_slack=opts.writer_slack,
        pairing=opts.writer_pairs,
        folds=opts.folds,
        rivals=opts.writer_rivals,
    )
