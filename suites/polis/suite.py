"""The Polis suite: users are voters of real Polis conversations; pairs are statements they
agreed with over statements they disagreed with; generation items are the statements they wrote.
See docs/suites.md for the rules and options."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from prefalign_suites.polis import conversations, voters
from prefalign_suites.raw_records import Problems, normalise_ws
from pytest_prefalign import suite_options
from pytest_prefalign.api import DataError, ProfileEntry, SuiteData
from pytest_prefalign.datadir import suite_folder
from pytest_prefalign.suite_options import AtLeast, Count, Share

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from pytest_prefalign.runtime.lm import LM


@dataclass(frozen=True)
class PolisOptions:
    """Polis's options, set in ``suite.toml``'s ``[options]`` (docs/suites.md)."""

    min_votes: Annotated[int, AtLeast(1)] = 3  # agrees and disagrees (each) to be a user
    max_train_pairs: Annotated[int, AtLeast(1)] = 24  # training pairs drawn per user (seeded)
    max_test_pairs: Annotated[int, AtLeast(1)] = 12  # test pairs drawn per user (seeded)
    # the latest-voted share of a user's agreed statements, and of their disagreed ones, held
    # out: the test pairs are made of them, the training pairs of the others
    test_share: Share = Fraction("0.3")
    items_per_user: Count = 3  # generation items per user: their most recent own statements
    seed: Count = 0  # the seed of the pair draw
    conversations: tuple[str, ...] = ()  # comma-separated conversation folders; empty: all


class Polis:
    name = "polis"
    description = (
        "Polis: statements a voter agreed with over ones they disagreed with, and "
        "the statements they wrote themselves, in real public deliberations"
    )
    licence = "CC BY 4.0 (Polis open data, The Computational Democracy Project)"
    attribution = (  # the data's own statement, shown with every result
        "Data was gathered using the Polis software (compdemocracy.org/polis) and is sub-licensed "
        "under CC BY 4.0 with Attribution to The Computational Democracy Project"
    )
    source = "polis"
    fetcher = "prefalign_suites.polis.fetch"  # builds source/: prefalign data fetch polis
    requires_data_dir = True
    options = PolisOptions

    def instruction(self, input: str) -> str:
        return f"Write a statement you agree with about: {normalise_ws(input)}"

    def example(self, entry: ProfileEntry) -> str:
        return f"Statement: {entry.input}\nVote: {entry.output}"

    def example_turn(self, entry: ProfileEntry) -> tuple[str, str]:
        """A vote as an earlier exchange of in-context learning: the statement, as the answer
        to a request for a statement the voter agrees (or disagrees) with, the task's own
        form; a vote as the answer ("agree") would teach the model to answer with a vote."""
        return f"Write a statement you {entry.output} with.", normalise_ws(entry.input)

    def load(
        self,
        data_dir: Path | None,
        *,
        limit: int | None,
        options: PolisOptions | Mapping[str, str],
    ) -> SuiteData:
        opts = suite_options.parse(PolisOptions, options)
        rules = voters.Rules(
            min_each=opts.min_votes,
            max_train=opts.max_train_pairs,
            max_test=opts.max_test_pairs,
            test_share=opts.test_share,
            items_per_user=opts.items_per_user,
            seed=opts.seed,
        )
        folder = suite_folder(data_dir, self.source, "*/votes.csv")
        problems = Problems()
        drops: defaultdict[str, int] = defaultdict(int)
        found: list[voters.Voter] = []
        votes_stats: defaultdict[str, int] = defaultdict(int)
        for conv_dir in self._conversations(folder, opts.conversations):
            try:
                conv = conversations.read(conv_dir, problems)
            except DataError as exc:
                problems.bad("conversation:unreadable", exc)
                continue
            found += voters.voters(conv, rules, self.instruction, drops)
            for key, n in conv.stats.items():
                votes_stats[key] += n
        chosen = voters.choose(found, limit)
        data = SuiteData(
            self.name,
            str(folder),
            {v.user: v.profile for v in chosen},
            [item for v in chosen for item in v.items],
            train_pairs=[p for v in chosen for p in v.train],
            test_pairs=[p for v in chosen for p in v.test],
            provenance={
                "options": suite_options.as_strings(opts),
                "eligible_users": len(found),
                "votes": dict(votes_stats),
                "conversations": sorted({v.conversation for v in chosen}),
            },
        )
        for rule, n in drops.items():
            problems.drop(rule, n)
        problems.report(data)
        return data

    def build_pairs(self, data: SuiteData, reference: LM, cache_dir: Path) -> None:
        """Nothing to do: the pairs come from the votes (``load`` made them)."""

    @staticmethod
    def _conversations(folder: Path, names: tuple[str, ...]) -> list[Path]:
        present = sorted(p for p in folder.iterdir() if p.is_dir())
        if not names:
            return present
        unknown = [n for n in names if not (folder / n).is_dir()]
        if unknown:
            raise suite_options.option_error(
                "conversations",
                f"no conversation folder {unknown[0]!r} in "
                f"{folder}; present: {', '.join(p.name for p in present)}",
            )
        return [folder / n for n in names]
