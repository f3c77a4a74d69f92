"""Design spaces: grid order, random draws, and one-line errors for bad spaces."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from clustertwin.errors import SpecError
from clustertwin.sweep import AXES, load_space, point_ids
from clustertwin.sweep.space import axis_indices, batches, design_batches

BASE = {"model": ["llama3-8b"], "node": ["dgx-h100", "dgx-b200"], "nodes": [2, 4, 8], "fabric": ["ib-ndr"],
        "layout": [{"tp": 8}, {"tp": 4, "pp": 2}], "checkpoint": [{"policy": "restart"}, {"policy": "spares"}]}


def test_grid_counts_every_combination_and_varies_the_last_axis_fastest() -> None:
    """The grid holds the product of the axis lengths; point 1 differs from point 0 in the checkpoint only."""
    space = load_space(BASE)
    assert space.grid_size == 2 * 3 * 2 * 2 == space.size
    ax = axis_indices(space, point_ids(space))
    assert [int(ax[a][1]) for a in AXES] == [0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert [int(ax[a][-1]) for a in AXES] == [n - 1 for n in space.shape]


def test_random_space_is_a_seeded_subset_of_the_grid() -> None:
    """A random space draws distinct grid ids, the same ones for the same seed."""
    space = load_space({**BASE, "mode": "random", "samples": 7, "seed": 3})
    ids = point_ids(space)
    assert len(np.unique(ids)) == 7 and ids.max() < space.grid_size
    assert np.array_equal(ids, point_ids(load_space({**BASE, "mode": "random", "samples": 7, "seed": 3})))
    assert not np.array_equal(ids, point_ids(load_space({**BASE, "mode": "random", "samples": 7, "seed": 4})))


def test_batches_cover_the_points_in_order() -> None:
    """Batches are consecutive slices that join back to the ids."""
    ids = np.arange(10)
    assert [len(b) for b in batches(ids, 4)] == [4, 4, 2]
    assert np.array_equal(np.concatenate(batches(ids, 4)), ids)


@pytest.mark.parametrize(("change", "message"), [
    ({"node": ["dgx-h10"]}, "node[0]: unknown node 'dgx-h10'; did you mean 'dgx-h100'?"),
    ({"mode": "random"}, "a random space needs 'samples'"),
    ({"nodes": [2, 2]}, "'nodes' lists a choice twice"),
    ({"fabrik": ["ib-ndr"]}, "unknown key 'fabrik'; did you mean 'fabric'?"),
    ({"layout": [{"tp": 0}]}, "layout[0]"),
])
def test_bad_spaces_raise_spec_errors(change, message) -> None:
    """Typos, missing samples, duplicates and bad values are SpecErrors naming the field."""
    with pytest.raises(SpecError) as err:
        load_space({**BASE, **change})
    assert message in str(err.value)


def test_design_batches_cut_between_designs() -> None:
    """Each batch holds whole designs (4 points each here) up to the batch size; a design larger than the
    batch is split; the batches join back to the ids, also for a random subset."""
    space = load_space(BASE)
    ids = point_ids(space)
    work = design_batches(space, ids, 10)
    assert [len(b) for b in work] == [8, 8, 8]
    assert all(len({int(i) // 4 for i in b}) == len(b) // 4 for b in work)
    assert [len(b) for b in design_batches(space, ids, 3)] == [3, 1] * 6
    sample = point_ids(load_space({**BASE, "mode": "random", "samples": 15, "seed": 1}))
    parts = design_batches(space, sample, 5)
    assert np.array_equal(np.concatenate(parts), sample) and all(len(b) <= 5 for b in parts)
    designs = [{int(i) // 4 for i in b} for b in parts]
    assert all(not (a & b) for a, b in itertools.pairwise(designs))
    with pytest.raises(SpecError, match="batch size must be >= 1"):
        design_batches(space, ids, 0)
