"""Polis voters as users: their pairs, profile and generation items, and which users a run takes.

For one voter of one conversation (user ``{conversation}:{voter_id}``):

- generation items: the statements they wrote (``author-id`` = their voter id), the most
  recent ``items_per_user``; ``y*`` is the statement. A ``y*`` statement appears in none of the
  user's pairs and not in their profile.
- pairs: a statement they agreed with (chosen) over one they disagreed with (rejected), for the
  conversation's topic. The statements are split in time first: of the statements they agreed
  with, the latest-voted ``test_share`` (at least one) are test statements, and the same of those
  they disagreed with. Test pairs combine a test agree with a test disagree, training pairs a
  training agree with a training disagree, so no statement of a test pair is in a training pair
  (its label would be learnt, not inferred). Up to ``max_test`` and ``max_train`` combinations
  are drawn with a generator seeded by the seed and the user id, each set ordered by the time
  the later of its two votes was cast.
- profile: their agree and disagree votes, oldest first, as ``(statement, "agree"|"disagree")``,
  leaving out the statements of test pairs (their labels are what the test asks for) and ``y*``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from itertools import zip_longest
from typing import TYPE_CHECKING

from prefalign_suites.polis.conversations import Conversation, Statement
from prefalign_suites.splits import held_out, user_rng
from pytest_prefalign.api import Item, Pair, ProfileEntry

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

LABELS = {1: "agree", -1: "disagree"}


@dataclass(frozen=True)
class Rules:
    min_each: int  # agrees and disagrees a voter needs to be a user
    max_train: int  # training pairs drawn per user
    max_test: int  # test pairs drawn per user
    test_share: Fraction
    items_per_user: int
    seed: int


@dataclass
class Voter:
    user: str
    conversation: str
    profile: list[ProfileEntry]
    items: list[Item]
    train: list[Pair]
    test: list[Pair]


def voters(
    conv: Conversation,
    rules: Rules,
    instruction: Callable[[str], str],
    drops: defaultdict[str, int],
) -> list[Voter]:
    """The users of one conversation, by voter id; voters dropped by a rule are counted."""
    found = []
    written: defaultdict[int, list[Statement]] = defaultdict(list)
    for statement in sorted(conv.statements.values(), key=lambda s: (s.time, s.comment_id)):
        written[statement.author].append(statement)
    for voter_id in sorted(conv.votes):
        votes = conv.votes[voter_id]
        agrees = sum(1 for vote, _ in votes.values() if vote == 1)
        disagrees = sum(1 for vote, _ in votes.values() if vote == -1)
        if min(agrees, disagrees) < rules.min_each:
            drops["user:too_few_agrees_or_disagrees"] += 1
            continue
        voter = _voter(conv, voter_id, written[voter_id], rules, instruction)
        if not voter.test:
            drops["user:no_pairs"] += 1
        elif not voter.profile:
            drops["user:empty_profile"] += 1
        else:
            found.append(voter)
    return found


def _voter(
    conv: Conversation,
    voter_id: int,
    own: list[Statement],
    rules: Rules,
    instruction: Callable[[str], str],
) -> Voter:
    """One voter's records; ``own``: the statements they wrote, oldest first."""
    user = f"{conv.name}:{voter_id}"
    prompt = instruction(conv.topic)
    targets = own[len(own) - rules.items_per_user :] if rules.items_per_user else []
    excluded = {s.comment_id for s in targets}
    votes = {cid: v for cid, v in conv.votes[voter_id].items() if cid not in excluded}
    train, test, in_test = _pairs(conv, user, prompt, votes, rules)
    profile = [
        ProfileEntry(f"{conv.name}:{cid}", conv.statements[cid].text, LABELS[vote])
        for cid, (vote, _) in sorted(votes.items(), key=lambda kv: (kv[1][1], kv[0]))
        if vote in LABELS and cid not in in_test
    ]
    items = [Item(f"{user}/{s.comment_id}", user, conv.topic, prompt, s.text) for s in targets]
    return Voter(user, conv.name, profile, items, train, test)


def _pairs(
    conv: Conversation, user: str, prompt: str, votes: dict[int, tuple[int, int]], rules: Rules
) -> tuple[list[Pair], list[Pair], set[int]]:
    """Training pairs, test pairs, and the statements of the test pairs."""
    agreed, disagreed = _by_time(votes, 1), _by_time(votes, -1)
    if not agreed or not disagreed:
        return [], [], set()
    test_agreed = agreed[len(agreed) - held_out(len(agreed), rules.test_share) :]
    test_disagreed = disagreed[len(disagreed) - held_out(len(disagreed), rules.test_share) :]
    rng = user_rng(rules.seed, user)
    train_agreed = agreed[: len(agreed) - len(test_agreed)]
    train_disagreed = disagreed[: len(disagreed) - len(test_disagreed)]
    test = _draw(rng, test_agreed, test_disagreed, rules.max_test, votes)
    train = _draw(rng, train_agreed, train_disagreed, rules.max_train, votes)

    def pair(a: int, d: int) -> Pair:
        texts = conv.statements[a].text, conv.statements[d].text
        return Pair(f"{user}/{a}>{d}", user, prompt, *texts)

    in_test = {*test_agreed, *test_disagreed}
    return [pair(*ad) for ad in train], [pair(*ad) for ad in test], in_test


def _by_time(votes: dict[int, tuple[int, int]], vote: int) -> list[int]:
    """The statements voted ``vote``, in the order the votes were cast (ids break ties)."""
    return sorted(
        (cid for cid, (v, _) in votes.items() if v == vote), key=lambda c: (votes[c][1], c)
    )


def _draw(
    rng: np.random.Generator,
    agreed: list[int],
    disagreed: list[int],
    most: int,
    votes: dict[int, tuple[int, int]],
) -> list[tuple[int, int]]:
    """Up to ``most`` (agreed, disagreed) combinations drawn without replacement, ordered by
    the time of the later of the two votes."""
    total = len(agreed) * len(disagreed)
    if not total:
        return []
    picks = rng.choice(total, size=min(most, total), replace=False)
    combos = [(agreed[i // len(disagreed)], disagreed[i % len(disagreed)]) for i in picks]
    return sorted(combos, key=lambda ad: (max(votes[ad[0]][1], votes[ad[1]][1]), ad))


def choose(found: list[Voter], limit: int | None) -> list[Voter]:
    """``limit`` users spread over the conversations: round robin over the conversations (by
    name), in each the users with the most generation items first (a user's ROUGE is a mean
    over their items: one statement says little), then in the order found (by voter id)."""
    if limit is None:
        return found
    groups: dict[str, list[Voter]] = defaultdict(list)
    for voter in found:
        groups[voter.conversation].append(voter)
    queues = [sorted(groups[name], key=lambda v: -len(v.items)) for name in sorted(groups)]
    spread = [v for row in zip_longest(*queues) for v in row if v is not None]
    return spread[:limit]
