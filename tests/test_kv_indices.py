"""The decode index builders the attention backend and the toy target share (``harness/engine/kv_indices.py``)."""

from __future__ import annotations

import pytest
import torch

from harness.engine.kv_indices import decode_window_full_indices, decode_window_positions
from harness.mem.index import PADDING_SLOT


def test_window_full_indices_are_each_rows_last_w_slots_padded_before_position_0():
    table = torch.randint(1, 1000, (9, 50), generator=torch.Generator().manual_seed(0), dtype=torch.int32)
    rows = torch.tensor([3, 0, 8, 5], dtype=torch.int32)
    seq_lens = torch.tensor([1, 7, 50, 20], dtype=torch.int32)
    got = decode_window_full_indices(table, rows, seq_lens, 8)
    positions = decode_window_positions(seq_lens, 8)
    for b in range(4):
        for j in range(8):
            p = int(positions[b, j])
            assert int(got[b, j]) == (int(table[rows[b], p]) if p >= 0 else PADDING_SLOT), (b, j)
    assert got.dtype == torch.int32


@pytest.mark.parametrize("row", [9, -1])
def test_window_full_indices_refuse_a_row_outside_the_table(row):
    table = torch.ones((9, 50), dtype=torch.int32)
    with pytest.raises(IndexError):
        decode_window_full_indices(
            table, torch.tensor([row], dtype=torch.int32), torch.tensor([5], dtype=torch.int32), 8
        )
