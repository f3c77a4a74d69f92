"""Placement strategies on hand-set states, and the FGD fragmentation measure."""

from __future__ import annotations

import numpy as np
import pytest

from clustertwin.sched import cluster as C
from clustertwin.sched.jobs import make_jobs
from clustertwin.sched.placement import Placer, WorkloadShapes, node_fragmentation
from clustertwin.sched.state import ClusterState, Request

SHAPES = WorkloadShapes(whole_g=np.array([1]), whole_p=np.array([0.5]), share_m=np.array([500]),
                        share_p=np.array([0.5]))


def _state(free_rows):
    rows = np.array(free_rows, dtype=np.int64)
    cl = C.uniform(rows.shape[0], rows.shape[1])
    st = ClusterState(cl)
    st.free[:] = rows
    st._refresh(tuple(range(rows.shape[0])))
    return st


def _share(st, m=500):
    return Request("share", 0, m, 1, np.ones(st.cluster.nodes, dtype=bool))


def test_fragmentation_measure_by_hand():
    # [1000, 500]: a 0.5 task fits, nothing below 500 -> 0; a 1-GPU task fits, partial GPU 500 is stranded
    # F = 0.5 * 0 + 0.5 * 500 = 250.   [500, 500]: share 0; whole does not fit -> all 1000 -> F = 500
    f = node_fragmentation(np.array([[1000, 500], [500, 500]]), SHAPES)
    assert f.tolist() == [250.0, 500.0]


def test_fgd_fills_the_partial_gpu_where_first_fit_splits_a_whole_one():
    st = _state([[1000, 500]])
    ff = Placer("first-fit").place(st, _share(st))
    fgd = Placer("fgd", SHAPES).place(st, _share(st))
    assert ff.slots.tolist() == [0]  # leaves [500, 500]: no whole GPU for the next 1-GPU task
    assert fgd.slots.tolist() == [1]  # leaves [1000, 0]
    bf = Placer("best-fit").place(st, _share(st))
    assert bf.slots.tolist() == [1]


def test_fgd_prefers_node_whose_fragmentation_grows_least():
    # node 0 [1000, 1000] (F 0), node 1 [1000, 600] (F 0.5 * 600 = 300). A 0.5 share:
    # node 0 slot 0 -> [500, 1000], F 250 (+250); node 1 slot 1 -> [1000, 100], F 100 (-200);
    # node 1 slot 0 -> [500, 600], no whole GPU left, F 550 (+250). FGD takes node 1 slot 1.
    st = _state([[1000, 1000], [1000, 600]])
    before = node_fragmentation(st.free, SHAPES)
    assert before.tolist() == [0.0, 300.0]
    alloc = Placer("fgd", SHAPES).place(st, _share(st))
    assert (alloc.nodes.tolist(), alloc.slots.tolist()) == ([1], [1])
    ff = Placer("first-fit").place(st, _share(st))
    assert (ff.nodes.tolist(), ff.slots.tolist()) == ([0], [0])


def test_best_fit_packs_and_first_fit_takes_lowest_node():
    st = _state([[1000, 1000, 1000, 1000], [1000, 1000, 0, 0]])
    req = Request("whole", 2, 0, 1, np.ones(2, dtype=bool))
    assert Placer("first-fit").place(st, req).nodes.tolist() == [0, 0]
    assert Placer("best-fit").place(st, req).nodes.tolist() == [1, 1]


def test_workload_shapes_from_jobs():
    jobs = make_jobs(list("abcd"), [0, 0, 0, 0], [1, 1, 1, 1], [0.5, 0.5, 1, 16], units=[0, 0, 0, 0])
    sh = WorkloadShapes.from_jobs(jobs, max_gpus_per_node=8)
    assert sh.share_m.tolist() == [500] and sh.share_p.tolist() == pytest.approx([2 / 3])
    assert sh.whole_g.tolist() == [1] and sh.whole_p.tolist() == pytest.approx([1 / 3])


def test_unknown_placement_and_fgd_without_shapes():
    from clustertwin.errors import SpecError

    with pytest.raises(SpecError, match="did you mean 'best-fit'"):
        Placer("bestfit")
    with pytest.raises(SpecError):
        Placer("fgd")
