"""The real Alibaba PAI 2023 trace and node list: every policy runs; FGD leaves fewer GPUs unallocated
than first-fit at the same load."""

from __future__ import annotations

import pytest

from clustertwin.sched import cluster as C
from clustertwin.sched import engine, fill, metrics, readers
from tests.conftest import TRACES, need_shared

PAI = TRACES / "alibaba-pai-2023"


@pytest.fixture(scope="module")
def pai():
    pods = need_shared(PAI / "openb_pod_list_default.csv")
    nodes = need_shared(PAI / "openb_node_list_gpu_node.csv")
    return C.from_node_list(nodes), readers.read_trace(pods, "pai2023", strict=True).jobs


@pytest.mark.parametrize("policy", list(engine.POLICIES))
def test_all_policies_replay_the_real_trace(pai, policy):
    cl, jobs = pai
    res = engine.simulate(cl, jobs, policy)
    m = metrics.compute(res)
    assert m.completed + m.killed + m.queued + m.running + m.unschedulable == len(jobs) == 6203
    assert m.queued == 0
    assert 0 < m.gpu_utilization < 1


def test_fgd_leaves_fewer_unallocated_gpus_than_first_fit(pai):
    cl, jobs = pai
    loads = (0.9, 1.0, 1.1)
    ff = fill.fill(cl, jobs, "first-fit", loads=loads, seed=0)
    fgd = fill.fill(cl, jobs, "fgd", loads=loads, seed=0)
    print("\nunallocated GPUs of 6,212 at arrived load", loads, "first-fit", ff.unallocated_gpus,
          "fgd", fgd.unallocated_gpus)
    assert ff.arrived_tasks == fgd.arrived_tasks  # same arrivals, same load
    for u_ff, u_fgd in zip(ff.unallocated_gpus[1:], fgd.unallocated_gpus[1:], strict=True):
        # CPU and memory strand GPUs on CPU-poor nodes; FGD avoids it (measured: 293 vs 335 at 100 %)
        assert u_fgd < 0.95 * u_ff
    # below capacity nothing fails, so both leave exactly the unrequested GPUs free
    assert ff.unallocated_gpus[0] == pytest.approx(fgd.unallocated_gpus[0])
