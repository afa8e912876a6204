"""The Pref-LaMP suite: users are ACL Anthology authors (or LaMP-5 users), the task is writing the
title of one's own paper from its abstract. See docs/suites.md for the rules and options."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from prefalign_suites import options as opt
from prefalign_suites.pref_lamp import anthology, corpus, lamp5, negatives, writer
from prefalign_suites.records import Problems, normalise_ws
from pytest_prefalign.api import ProfileEntry, SuiteData
from pytest_prefalign.datadir import suite_folder

if TYPE_CHECKING:  # pragma: no cover
    from pytest_prefalign.runtime.lm import LM

DEFAULTS = {
    "source": "anthology",  # anthology (acl-anthology/) or lamp5 (the original LaMP-5 files)
    "lamp5_dir": "",  # with source = lamp5: the folder of {split}_questions/_outputs.json
    "lamp5_split": "",  # dev or train; empty: dev where present, else train
    # style: both sides written by the writer for the same abstract, from the author's own
    # titles (chosen) and from other people's (rejected); written: the real title against the
    # writer's from other people's; other_author: a similar paper's title by somebody else;
    # generated: the reference LM's zero-shot title (docs/suites.md: how the default was chosen)
    "negatives": "other_author",
    "length_slack": "1",  # other_author: words the negative's length may differ; "any": no limit
    "writer": writer.WRITER,  # style, written: the model source of the writer
    "writer_shots": "3",  # style, written: example papers shown to the writer per prompt
    "writer_samples": "3",  # style, written: titles sampled per prompt
    "writer_temperature": "0.7",  # style, written: of the sampled titles
    "writer_slack": "2",  # style, written: tokens the two sides' lengths may differ (counted)
    "test_share": "0.3",  # the most recent share of an author's papers held out as test items
    "min_profile": "3",  # users with fewer profile papers (after the leak rule) are dropped
    "max_train_pairs": "0",  # training pairs per user, the most recent profile papers; 0 = all
    "title_tokens": "32",  # max_new_tokens of the reference LM's titles
    "batch_size": "16",  # prompts per batch of the reference LM
}


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

    def __init__(self) -> None:
        # what ``load`` planned for the writer, by the data it loaded, until ``build_pairs``
        self._briefs: dict[int, tuple[writer.Options, tuple[list, list]]] = {}

    @staticmethod
    def requires_data_dir(options: dict[str, str]) -> bool:
        """The ACL Anthology folder is needed unless the run reads the original LaMP-5 files."""
        return options.get("source", "anthology") != "lamp5"

    def instruction(self, input: str) -> str:
        return f"Generate a title for the following abstract of a paper: {normalise_ws(input)}"

    def example(self, entry: ProfileEntry) -> str:
        return f"Abstract: {entry.input}\nTitle: {entry.output}"

    def load(
        self, data_dir: Path | None, *, limit: int | None, options: dict[str, str]
    ) -> SuiteData:
        opts = opt.resolve(options, DEFAULTS)
        kind = opt.choice(opts, "source", ("anthology", "lamp5"))
        mode = opt.choice(opts, "negatives", (*writer.DESIGNS, "generated", "other_author"))
        for key in ("title_tokens", "batch_size"):  # used by build_pairs, checked now
            opt.integer(opts, key, minimum=1)
        writing = self._writer_options(opts, mode) if mode in writer.DESIGNS else None
        problems = Problems()
        if kind == "lamp5":
            users, pool, where = lamp5.read(
                self._lamp5_dir(opts),
                split=opt.choice(opts, "lamp5_split", ("", *lamp5.SPLITS)),
                limit=limit,
                problems=problems,
            )
        else:
            folder = suite_folder(data_dir, self.source, anthology.AUTHORS)
            users, pool = anthology.read(
                folder, limit=limit, share=opt.share(opts, "test_share"), problems=problems
            )
            where = str(folder)
        users, leaked = corpus.apply_rules(
            users, min_profile=opt.integer(opts, "min_profile"), problems=problems
        )
        data = corpus.suite_data(
            self,
            users,
            source=where,
            provenance={
                "format": kind,
                "negatives": mode,
                "options": opts,
                "leak_rule_removed_profile_papers": leaked,
            },
        )
        if mode == "other_author":
            slack = None if opts["length_slack"] == "any" else opt.integer(opts, "length_slack")
            negatives.other_author(
                self,
                data,
                users,
                pool,
                max_train=opt.integer(opts, "max_train_pairs"),
                length_slack=slack,
            )
        elif writing is not None:
            max_train = opt.integer(opts, "max_train_pairs")
            briefs = writer.briefs(users, pool, max_train=max_train, shots=writing.shots)
            self._briefs[id(data)] = (writing, briefs)
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
            writing, (train, test) = planned
            writer.write(self, data, train, test, reference, cache_dir, writing)
            return
        opts: dict[str, Any] = data.provenance.get("options", DEFAULTS)
        if data.provenance.get("negatives") != "generated":
            return
        negatives.generated(
            self,
            data,
            reference,
            cache_dir,
            max_train=opt.integer(opts, "max_train_pairs"),
            max_new_tokens=opt.integer(opts, "title_tokens", minimum=1),
            batch_size=opt.integer(opts, "batch_size", minimum=1),
        )

    @staticmethod
    def _writer_options(opts: dict[str, str], design: str) -> writer.Options:
        if not opts["writer"]:
            raise opt.option_error("writer", "expected a model source, e.g. " + writer.WRITER)
        return writer.Options(
            design=design,
            writer=opts["writer"],
            shots=opt.integer(opts, "writer_shots", minimum=1),
            samples=opt.integer(opts, "writer_samples", minimum=1),
            temperature=opt.positive(opts, "writer_temperature"),
            max_new_tokens=opt.integer(opts, "title_tokens", minimum=1),
            batch_size=opt.integer(opts, "batch_size", minimum=1),
            length_slack=opt.integer(opts, "writer_slack"),
        )

    @staticmethod
    def _lamp5_dir(opts: dict[str, str]) -> Path:
        if not opts["lamp5_dir"]:
            raise opt.option_error("lamp5_dir", "needed with source = lamp5")
        return Path(opts["lamp5_dir"]).expanduser().resolve()  # relative: from the current dir
