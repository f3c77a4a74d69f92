"""Layout search: valid candidates only, fixed fields kept, rejection classes, best-of published layouts."""

from __future__ import annotations

import pytest

from clustertwin import catalog, specs
from clustertwin.train import estimate, search


@pytest.fixture(scope="module")
def h100():
    return catalog.get("cluster", "ref-1k-h100")


def test_search_ranks_fitting_layouts_and_reports_rejections(h100):
    m = catalog.get("model", "llama3-70b")
    res = search(m, h100, global_batch=512, gpus=256, top=5)
    assert res.best is not None and res.fitting >= 5 and res.valid <= res.evaluated
    tps = [e.tokens_per_s for e in res.top]
    assert tps == sorted(tps, reverse=True)
    assert all(e.fits and e.gpus == 256 for e in res.top)
    assert any(k.startswith("out of memory") for k in res.rejected)
    assert sum(res.rejected.values()) + res.fitting == res.evaluated
    d = res.to_dict()
    assert d["layout"] == res.best.layout and d["step_time_s"] == res.best.step_time_s


def test_fixed_fields_are_never_changed(h100):
    m = catalog.get("model", "llama3-70b")
    res = search(m, h100, global_batch=256, gpus=64, fixed={"tp": 4, "pp": 8, "vpp": 5, "micro_batch": 1})
    assert res.best is not None
    for e in res.top:
        assert (e.layout["tp"], e.layout["pp"], e.layout["vpp"], e.layout["micro_batch"]) == (4, 8, 5, 1)


def test_search_beats_or_matches_a_published_layout(h100):
    m = catalog.get("model", "llama3-70b")
    published = estimate(m, h100, specs.ParallelismSpec(tp=4, pp=8, dp=2, vpp=5, micro_batch=1, global_batch=256,
                                                        sequence_parallel=True, recompute="full", zero=1))
    res = search(m, h100, global_batch=256, gpus=64)
    assert res.best.tokens_per_s >= published.tokens_per_s * (1 - 1e-9)


def test_infeasible_problem_lists_reasons(h100):
    m = catalog.get("model", "llama3-405b")
    res = search(m, h100, global_batch=8, gpus=8)
    assert res.best is None
    assert any("out of memory" in k for k in res.rejected)
    assert res.fastest_oom is not None and not res.fastest_oom.fits


def test_non_power_of_two_gpu_counts_use_any_dp(h100):
    m = catalog.get("model", "llama2-7b")
    res = search(m, h100, global_batch=48 * 4, gpus=48, top=3)
    assert res.best is not None and res.best.gpus == 48


def test_a_huge_global_batch_is_searched_not_counted_to():
    """Micro-batch candidates are the divisors of the per-replica batch, found by trial division up to its
    square root: a global batch of 10^12 sequences once hung the search (and the web API) counting to 10^12."""
    import time

    m = catalog.get("model", "llama3-8b")
    c = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
    c0 = time.process_time()
    res = search(m, c, global_batch=10**12, gpus=8, top=3)
    assert time.process_time() - c0 < 60
    assert res.top
    for e in res.top:
        per_replica = 10**12 // e.layout["dp"]
        assert per_replica % e.layout["micro_batch"] == 0
