"""The PRISM suite: participants' conversations with LLMs, each response rated 1-100; one user per
participant. See docs/suites.md for the rules, options and field names."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from prefalign_suites import hf_source
from prefalign_suites.raw_records import Problems, Record, unique
from prefalign_suites.splits import held_out, user_rng
from pytest_prefalign import suite_options
from pytest_prefalign.api import DataError, Item, Pair, ProfileEntry, SuiteData
from pytest_prefalign.suite_options import AtLeast, Count, Share

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Mapping

    from pytest_prefalign.runtime.lm import LM

DATASET = hf_source.HubDataset("HannahRoseKirk/prism-alignment", "conversations")


@dataclass(frozen=True)
class PrismOptions:
    """PRISM's options, set in ``suite.toml``'s ``[options]`` (docs/suites.md)."""

    path: str = ""  # a local conversations.jsonl, or a folder holding it
    # history (the dialogue so far) or turn (the user's message alone)
    context: Literal["history", "turn"] = "history"
    # participants with fewer are dropped (LoRe: more than 5)
    min_conversations: Annotated[int, AtLeast(2)] = 6
    test_share: Share = Fraction("0.5")  # share of a participant's conversations held out
    items_per_user: Count = 5  # generation items (distinct test prompts) per user
    seed: Count = 0  # the draw of each participant's test conversations


@dataclass(frozen=True)
class Turn:
    """One rated turn: the prompt text, the user's message, and the rated responses."""

    key: str  # conversation_id/t{turn}
    prompt: str
    message: str
    chosen: str
    rejected: list[tuple[str, str]]  # (response id, text), each rated lower than ``chosen``


class Prism:
    name = "prism"
    description = (
        "PRISM: participants' live conversations with 21 LLMs, every response rated; "
        "one user per participant, no ground-truth text"
    )
    licence = (
        "CC BY 4.0 (human-written text), CC BY-NC 4.0 (model responses); "
        "PRISM Alignment Dataset, Kirk et al. 2024"
    )
    attribution = "Kirk et al., The PRISM Alignment Project (arXiv 2404.16019)"
    source = DATASET.dataset_id
    fetcher = "prefalign_suites.prism.fetch"  # a local copy: prefalign data fetch prism
    requires_data_dir = False  # the datasets library can find it in the Hugging Face cache
    options = PrismOptions

    def instruction(self, input: str) -> str:
        # the input already is what the participant sent (or the dialogue ending with it)
        return input

    def example(self, entry: ProfileEntry) -> str:
        return f"User: {entry.input}\nAssistant: {entry.output}"

    def load(
        self,
        data_dir: Path | None,
        *,
        limit: int | None,
        options: PrismOptions | Mapping[str, str],
    ) -> SuiteData:
        opts = suite_options.parse(PrismOptions, options)
        problems = Problems()
        rows, where = hf_source.rows(DATASET, path=opts.path, data_dir=data_dir, problems=problems)
        by_user = _by_user(rows, opts.context == "history", problems)
        provenance = {"options": suite_options.as_strings(opts)}
        data = SuiteData(self.name, where, {}, [], provenance=provenance)
        for user, convs in by_user.items():
            if len(convs) < opts.min_conversations:
                problems.drop("user:too_few_conversations")
            elif limit is None or len(data.profiles) < limit:
                self._add_user(data, f"prism:{user}", convs, opts)
        problems.report(data)
        return data

    def build_pairs(self, data: SuiteData, reference: LM, cache_dir: Path) -> None:
        """Nothing to do: the pairs are the participants' ratings (``load`` made them)."""

    def _add_user(
        self, data: SuiteData, user: str, convs: list[list[Turn]], opts: PrismOptions
    ) -> None:
        order = user_rng(opts.seed, user).permutation(len(convs))
        cut = len(convs) - held_out(len(convs), opts.test_share)
        train = [t for i in sorted(order[:cut]) for t in convs[i]]
        test = [t for i in sorted(order[cut:]) for t in convs[i]]
        data.profiles[user] = [ProfileEntry(t.key, t.message, t.chosen) for t in train]
        data.train_pairs += [p for t in train for p in self._pairs(user, t)]
        data.test_pairs += [p for t in test for p in self._pairs(user, t)]
        data.items += [
            Item(f"{user}/{t.key}", user, t.prompt, self.instruction(t.prompt), None)
            for t in test[: opts.items_per_user]
        ]

    def _pairs(self, user: str, turn: Turn) -> list[Pair]:
        prompt = self.instruction(turn.prompt)
        return [
            Pair(f"{user}/{turn.key}/{rid}", user, prompt, turn.chosen, text)
            for rid, text in turn.rejected
        ]


def _by_user(
    rows: Iterable[hf_source.Row], history: bool, problems: Problems
) -> dict[str, list[list[Turn]]]:
    """Each participant's conversations (in file order) as lists of usable turns."""
    found: dict[str, list[tuple[Record, tuple[Record, str, list[Any]]]]] = defaultdict(list)
    for row in rows:
        rec = row.record
        try:
            conv_id, user = rec.text("conversation_id"), rec.text("user_id")
            utterances = rec.listing("conversation_history")
        except DataError as exc:
            problems.bad("record:bad_conversation", exc)
            continue
        found[conv_id].append((rec, (rec, user, utterances)))
    convs = unique(found, "conversation_id", "record:duplicate_conversation_id", problems)
    by_user: dict[str, list[list[Turn]]] = defaultdict(list)
    for conv_id, (rec, user, utterances) in convs.items():
        turns = conversation_turns(rec, conv_id, utterances, history, problems)
        if turns:
            by_user[user].append(turns)
        else:
            problems.drop("conversation:no_rated_turn")
    return by_user


def conversation_turns(
    rec: Record, conv_id: str, utterances: list[Any], history: bool, problems: Problems
) -> list[Turn]:
    """The turns with a user message and responses of different ratings. A malformed turn is
    dropped (``record:bad_turn``); a turn whose responses are all rated the same has no pair
    (``turn:all_ratings_equal``)."""
    grouped: dict[int, list[tuple[int, Record]]] = defaultdict(list)
    for n, raw in enumerate(utterances):
        utt = rec.child(f"conversation_history[{n}]", raw)
        try:
            grouped[utt.integer("turn")].append((n, utt))
        except DataError as exc:
            problems.bad("record:bad_turn", exc)
    turns, dialogue = [], []
    for number in sorted(grouped):
        try:
            message, responses = _turn_parts(grouped[number])
        except DataError as exc:
            problems.bad("record:bad_turn", exc)
            break  # later turns build on this one: without it their context is unknown
        dialogue.append(f"User: {message}")
        top = max(score for score, _, _, _ in responses)
        best = min(
            ((not chosen, rid, text) for score, rid, text, chosen in responses if score == top)
        )
        lower = [(rid, text) for score, rid, text, _ in responses if score < top]
        prompt = "\n\n".join(dialogue) if history and len(dialogue) > 1 else message
        if lower:
            turns.append(Turn(f"{conv_id}/t{number}", prompt, message, best[2], lower))
        else:
            problems.drop("turn:all_ratings_equal")
        followed = next((text for _, _, text, chosen in responses if chosen), best[2])
        dialogue.append(f"Assistant: {followed}")
    return turns


def _turn_parts(utts: list[tuple[int, Record]]) -> tuple[str, list[tuple[float, str, str, bool]]]:
    """The user's message and the rated responses ``(score, id, text, if_chosen)``."""
    messages, responses = [], []
    for n, utt in utts:
        role = utt.text("role")
        if role == "user":
            messages.append(utt.text("content"))
        elif role == "model":
            score = utt.get("score")
            if isinstance(score, bool) or not isinstance(score, (int, float)):
                raise utt.error("score", f"expected a number, got {type(score).__name__}")
            within = utt.data.get("within_turn_id")
            rid = f"m{within if isinstance(within, int) else n}"
            responses.append(
                (float(score), rid, utt.text("content"), utt.data.get("if_chosen") is True)
            )
        else:
            raise utt.error("role", f"expected user or model, got {role!r}")
    if len(messages) != 1:
        raise utts[0][1].error(
            "role", f"expected one user message in the turn, got {len(messages)}"
        )
    if len(responses) < 2:
        raise utts[0][1].error(
            "role", f"expected at least 2 model responses in the turn, got {len(responses)}"
        )
    return messages[0], responses
