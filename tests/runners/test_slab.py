"""The PyTorch runner's preallocated batch KV (runners/pytorch/slab.py): rows joining with prompts longer than the
live window, leaving from the middle, buffers growing in rows and columns, decode steps past the capacity; every
row keeps exactly its own keys and values, in order, behind its mask."""

from __future__ import annotations

import itertools
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")  # IB_REQUIRE_RUNNERS=1 turns these skips into failures

from inference_backend.runners.pytorch import slab as slabmod  # noqa: E402
from inference_backend.runners.pytorch.slab import Slab  # noqa: E402

LAYERS, HEADS, DIM = 2, 2, 3


def kv_of(seq: int, positions: range) -> list[tuple[object, object]]:
    """[1, heads, n, dim] per layer; every value encodes (layer, key/value, sequence, position)."""
    pos = torch.tensor(list(positions), dtype=torch.float32)
    out = []
    for layer in range(LAYERS):
        base = pos.view(1, 1, -1, 1).expand(1, HEADS, -1, DIM) + 1000.0 * seq + 1e6 * layer
        out.append((base.clone(), -base.clone()))
    return out


def check(slab: Slab, rows: list[int], lengths: dict[int, int]) -> None:
    assert slab.rows == len(rows)
    mask = slab.valid[: slab.rows, slab.start : slab.end]
    for r, seq in enumerate(rows):
        want = kv_of(seq, range(lengths[seq]))
        for layer in range(LAYERS):
            keys = slab.keys[layer][r, :, slab.start : slab.end][:, mask[r]]
            values = slab.values[layer][r, :, slab.start : slab.end][:, mask[r]]
            assert torch.equal(keys, want[layer][0][0]) and torch.equal(values, want[layer][1][0]), (r, seq, layer)
    if rows:  # the window starts at the first column some row uses, and every row ends at the last column
        assert bool(mask[:, 0].any()) and bool(mask[:, -1].all())


def test_rows_keep_their_own_kv_through_joins_steps_and_leaves() -> None:
    rnd = random.Random(0)
    slab = Slab(torch.device("cpu"), max_rows=8)
    rows: list[int] = []  # sequence id of each slab row, mirrored as the backend does
    lengths: dict[int, int] = {}
    next_seq = 0
    with torch.inference_mode():
        for step in range(400):
            if len(rows) < 8 and rnd.random() < 0.3:  # join 1-3 sequences, sometimes longer than the window
                new = list(range(next_seq, next_seq + min(rnd.randint(1, 3), 8 - len(rows))))
                next_seq += len(new)
                for s in new:
                    lengths[s] = rnd.randint(1, 40 if step % 50 else 300)
                slab.join([kv_of(s, range(lengths[s])) for s in new])
                rows += new
                check(slab, rows, lengths)
            if rows and rnd.random() < 0.15:  # leave: any rows, the middle included
                gone = sorted(rnd.sample(range(len(rows)), rnd.randint(1, len(rows))))
                slab.remove(gone)
                for r in reversed(gone):
                    last = rows.pop()
                    if r < len(rows):
                        rows[r] = last
                check(slab, rows, lengths)
            if rows:  # a decode step: each row's next position, written through the model-facing cache
                mask = slab.step()
                cache = slab.cache.bind()
                assert mask.shape == (len(rows), slab.width + 1)
                for layer in range(LAYERS):
                    new_kv = [kv_of(s, range(lengths[s], lengths[s] + 1))[layer] for s in rows]
                    k, v = cache.update(torch.cat([a for a, _ in new_kv]), torch.cat([b for _, b in new_kv]), layer)
                    assert k.shape[2] == mask.shape[1] == v.shape[2]
                slab.advance()
                for s in rows:
                    lengths[s] += 1
                check(slab, rows, lengths)
    assert next_seq > 20 and slab.valid.shape[0] == 8


def _brute_groups(first: list[int]) -> int:
    """The least cost over every split of the rows into at most MAX_GROUPS consecutive groups."""
    n, top, best = len(first), max(first), None
    for cuts in range(1 << (n - 1)):
        bounds = [0] + [i + 1 for i in range(n - 1) if cuts >> i & 1] + [n]
        if len(bounds) - 1 > slabmod.MAX_GROUPS:
            continue
        cost = sum((b - a) * (top + 1 - min(first[a:b])) + slabmod.GROUP_COST for a, b in itertools.pairwise(bounds))
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("seed", range(40))
def test_groups_are_the_cheapest_split(seed: int) -> None:
    rnd = random.Random(seed)
    first = [rnd.choice([0, 5, 40, 120, 300]) + rnd.randrange(8) for _ in range(rnd.randint(1, 12))]
    groups = slabmod._groups(first)
    assert [a for a, _, _ in groups] == [0, *[b for _, b, _ in groups[:-1]]] and groups[-1][1] == len(first)
    assert all(col == min(first[a:b]) for a, b, col in groups)  # each group's window holds all its rows' columns
    top = max(first)
    cost = sum((b - a) * (top + 1 - col) + slabmod.GROUP_COST for a, b, col in groups)
    assert cost == _brute_groups(first), (first, groups)


def test_groups_of_a_large_batch_cover_it() -> None:
    rnd = random.Random(7)
    first = sorted(rnd.randrange(500) for _ in range(300))  # 300 rows: cuts only at 32 evenly spaced rows
    groups = slabmod._groups(first)
    assert groups[0][0] == 0 and groups[-1][1] == 300 and 1 < len(groups) <= slabmod.MAX_GROUPS
    assert all(b == c for (_, b, _), (c, _, _) in itertools.pairwise(groups))
    assert all(col == min(first[a:b]) for a, b, col in groups)


def test_groups_follow_joins_and_leaves() -> None:
    slab = Slab(torch.device("cpu"))
    slab.join([kv_of(0, range(200)), kv_of(1, range(190)), kv_of(2, range(4)), kv_of(3, range(3))])
    assert [(a, b) for a, b, _ in slab.groups()] == [(0, 2), (2, 4)]
    assert slab.groups()[1][2] == slab.end - 4  # the short rows' window starts at the longer one's first column
    slab.remove([0, 1])  # the long rows leave: one group again, over the short rows' columns only
    assert slab.groups() == [(0, 2, slab.end - 4)] and slab.start == slab.end - 4
