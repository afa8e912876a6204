"""The cache layer that appends in place: what it holds is exactly what transformers'
``DynamicLayer`` holds after the same updates, crops and row selections, and an append into its
room copies nothing."""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")

from transformers.cache_utils import DynamicLayer  # noqa: E402

from pytest_prefalign.runtime.decoding import KV, Plain, compacted, decode  # noqa: E402
from pytest_prefalign.runtime.roomy import (  # noqa: E402
    ROOM,
    RoomyLayer,
    roomy_cache,
    select_rows,
)

# what ``get_mask_sizes`` takes for a query of one token: its length (recent transformers) or,
# in the 5.0 line, its cache positions
QUERY = (
    1
    if "query_length" in inspect.signature(DynamicLayer.get_mask_sizes).parameters
    else torch.arange(1)
)


def states(g, rows, n):
    return torch.randn(rows, 2, n, 4, generator=g), torch.randn(rows, 2, n, 4, generator=g)


def same(a, b):
    return torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_roomy_holds_what_a_dynamic_layer_holds_through_every_operation():
    g = torch.Generator().manual_seed(0)
    roomy, plain = RoomyLayer(), DynamicLayer()
    for layer in (roomy, plain):
        assert layer.get_seq_length() == 0
    script = [
        ("update", states(g, 3, 5)),  # a prompt
        ("update", states(g, 3, 1)),  # a decode step
        ("update", states(g, 3, 10)),  # ARGS's candidates as queries
        ("crop", -9),  # the winner kept
        ("select", torch.tensor([2, 0, 0])),  # rows leave, a row repeated
        ("update", states(g, 3, 4)),
        ("select", torch.tensor([0, 2])),  # a finished row leaves: moved up in place
        ("update", states(g, 2, 3)),
        ("select", torch.tensor([1])),
        ("update", states(g, 1, ROOM + 7)),  # more than the room left: the buffer grows
        ("crop", -3),
        ("update", states(g, 1, 2)),
    ]
    for op, arg in script:
        for layer in (roomy, plain):
            if op == "update":
                out = layer.update(*arg)
                assert torch.equal(out[0], layer.keys)
            elif op == "crop":
                layer.crop(arg)
            else:
                layer.batch_select_indices(arg)
        assert same(roomy, plain), op
        assert roomy.get_seq_length() == plain.get_seq_length()
        assert roomy.get_mask_sizes(QUERY) == plain.get_mask_sizes(QUERY)


def test_an_append_into_the_room_writes_the_same_buffer():
    g = torch.Generator().manual_seed(1)
    layer = RoomyLayer()
    layer.update(*states(g, 2, 5))
    buffer = layer.key_room
    assert buffer is not None and buffer.shape[-2] >= 5 + ROOM
    for _ in range(ROOM):
        layer.update(*states(g, 2, 1))
    assert layer.key_room is buffer  # no copy while the room lasts
    assert layer.keys.data_ptr() == buffer.data_ptr()
    layer.update(*states(g, 2, 1))
    assert layer.key_room is not buffer and layer.get_seq_length() == 5 + ROOM + 1


def test_a_buffer_made_in_inference_mode_is_copied_before_a_write_outside_it():
    g = torch.Generator().manual_seed(2)
    layer, plain = RoomyLayer(), DynamicLayer()
    first, second = states(g, 1, 4), states(g, 1, 2)
    with torch.inference_mode():
        layer.update(*first)
    plain.update(*first)
    layer.update(*second)  # would raise if it wrote into the inference tensor
    plain.update(*second)
    assert same(layer, plain) and not layer.key_room.is_inference()


def test_roomy_cache_replaces_the_full_attention_layers_only(tiny_lm):
    cache = roomy_cache(tiny_lm.model.config)
    assert cache.layers and all(isinstance(layer, RoomyLayer) for layer in cache.layers)
    with pytest.raises(ValueError, match="negative"):
        cache.layers[0].crop(2)


def test_rows_leaving_a_batch_move_up_in_place_and_keep_the_room():
    g = torch.Generator().manual_seed(2)
    layer = RoomyLayer()
    layer.update(*states(g, 5, 6))
    before = layer.keys.clone()
    buffer = layer.key_room
    assert buffer is not None
    with torch.inference_mode():
        layer.batch_select_indices(torch.tensor([0, 2, 3]))
    assert torch.equal(layer.keys, before[[0, 2, 3]])
    assert layer.key_room is not None
    assert layer.key_room.data_ptr() == buffer.data_ptr()  # the same storage: nothing new
    assert layer.key_room.shape[-2] == buffer.shape[-2]  # and its room
    layer.update(*states(g, 3, 1))  # the next step appends into the room, no regrowth
    assert layer.key_room.data_ptr() == buffer.data_ptr()


@pytest.mark.parametrize(
    "order",
    # out of order, a repeat of an earlier row, a row beyond the buffer: a slot would read a
    # row an earlier slot has overwritten, or none
    [[2, 0], [0, 0, 3], [0, 5]],
    ids=["unordered", "repeated", "beyond"],
)
def test_other_selections_copy(order):
    g = torch.Generator().manual_seed(3)
    buffer = torch.randn(5, 2, 8, 4, generator=g)
    kept = buffer.clone()
    if order[-1] >= buffer.shape[0]:
        with pytest.raises(IndexError):
            select_rows(buffer, torch.tensor(order), 6)
    else:
        out = select_rows(buffer, torch.tensor(order), 6)
        assert torch.equal(out, kept[order]) and out.data_ptr() != buffer.data_ptr()
    assert torch.equal(buffer, kept)  # the source untouched


@pytest.mark.parametrize("keep", [[0, 2, 4, 5, 6, 7], [1, 2, 3], [5, 6, 7], [0, 1, 2], [7]])
def test_rows_leaving_move_the_fewest_rows_in_place(keep):
    # compacted: a kept row stays in its slot; each slot freed among the first len(keep) takes
    # a kept row from beyond them, so as many rows move as leave from those slots
    order = compacted(keep)
    assert sorted(order) == keep and all(i >= j for j, i in enumerate(order))
    assert [j for j, i in enumerate(order) if i == j] == [j for j in keep if j < len(keep)]
    g = torch.Generator().manual_seed(4)
    buffer = torch.randn(8, 2, 8, 4, generator=g)
    kept = buffer.clone()
    out = select_rows(buffer, torch.tensor(order), 6)
    assert out.data_ptr() == buffer.data_ptr()  # in place
    assert torch.equal(out[:, :, :6], kept[order][:, :, :6])


def test_a_decoding_batch_whose_rows_leave_gives_each_row_its_own_tokens(tiny_lm):
    # rows leave at different steps (a row's length is set by its first token) and later rows
    # move into the slots they free: every row's tokens are those it gives alone, greedy
    prompts = [[5, 9, 11], [7, 12], [3, 3, 4, 8], [8, 20], [6, 2, 9, 9, 14], [10, 4]]

    def finished(tokens):
        return len(tokens) >= 1 + tokens[0] % 5

    def run(seqs):
        return decode(KV.start(tiny_lm, seqs, then=6), Plain(tiny_lm, None, None), 6, finished)

    batch = run(prompts)
    assert len({len(t) for t in batch}) >= 3  # rows leave at three steps or more
    assert batch == [run([p])[0] for p in prompts]


def test_an_inference_buffer_outside_inference_mode_is_copied_not_written():
    with torch.inference_mode():
        buffer = torch.arange(40.0).reshape(5, 1, 2, 4)
    out = select_rows(buffer, torch.tensor([1, 3]), 2)
    assert torch.equal(out, torch.arange(40.0).reshape(5, 1, 2, 4)[[1, 3]])
    assert out.data_ptr() != buffer.data_ptr()
