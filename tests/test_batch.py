"""``api.Batch``, what a reward method scores and a decoder teacher-forces: checked once where it
is made (as many users, prompts and responses, all strings), and its parts keep the rows
together."""

from __future__ import annotations

import pytest

from pytest_prefalign.api import Batch, Item, Pair

PAIRS = [
    Pair("ann/0", "ann", "Title for: cats", "Cats Nap", "Dogs Run"),
    Pair("bob/0", "bob", "Title for: dogs", "Dogs Bark", "Cats Purr"),
]


def test_a_batch_keeps_its_rows_as_tuples():
    batch = Batch(["ann", "bob"], ["p", "q"], ["x", "y"])
    assert batch.users == ("ann", "bob") and batch.responses == ("x", "y")
    assert len(batch) == 2 and list(batch) == [("ann", "p", "x"), ("bob", "q", "y")]
    assert batch == Batch(("ann", "bob"), ("p", "q"), ("x", "y"))


@pytest.mark.parametrize(
    ("columns", "error", "message"),
    [
        ((["ann", "bob"], ["p"], ["x", "y"]), ValueError, "2 users, 1 prompts, 2 responses"),
        ((["ann"], ["p"], []), ValueError, "1 users, 1 prompts, 0 responses"),
        ((["ann"], "p", ["x"]), TypeError, "prompts is one string"),
        ((["ann"], ["p"], [None]), TypeError, r"responses\[0\] is a NoneType"),
        ((["ann", 3], ["p", "q"], ["x", "y"]), TypeError, r"users\[1\] is a int"),
    ],
)
def test_a_malformed_batch_is_refused_where_it_is_made(columns, error, message):
    with pytest.raises(error, match=message):
        Batch(*columns)


def test_the_sides_of_pairs_and_the_responses_to_items():
    chosen = Batch.of_pairs(PAIRS, "chosen")
    assert list(chosen) == [(p.user, p.prompt, p.chosen) for p in PAIRS]
    both = chosen + Batch.of_pairs(PAIRS, "rejected")
    assert both.users == ("ann", "bob", "ann", "bob")
    assert both.responses == ("Cats Nap", "Dogs Bark", "Dogs Run", "Cats Purr")
    items = [Item("ann/0", "ann", "cats", "Title for: cats", None)]
    assert list(Batch.of_items(items, ["Napping"])) == [("ann", "Title for: cats", "Napping")]
    with pytest.raises(ValueError, match="1 users, 1 prompts, 2 responses"):
        Batch.of_items(items, ["a", "b"])


def test_parts_keep_each_row_whole():
    both = Batch.of_pairs(PAIRS, "chosen") + Batch.of_pairs(PAIRS, "rejected")
    assert list(both.take([3, 0])) == [
        ("bob", "Title for: dogs", "Cats Purr"),
        ("ann", "Title for: cats", "Cats Nap"),
    ]
    assert both[1:3] == Batch(
        ["bob", "ann"], [PAIRS[1].prompt, PAIRS[0].prompt], both.responses[1:3]
    )
    assert both.with_responses(["a", "b", "c", "d"]).prompts == both.prompts
