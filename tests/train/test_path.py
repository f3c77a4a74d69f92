"""The whole path in training: the data-loading stall term, and each parallel group's traffic on the
topology and placement (contention between concurrent groups), on the same 16,384-GPU cluster as four
network designs (docs/topology.md table)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from clustertwin import catalog, specs
from clustertwin.catalog import store
from clustertwin.datapath import binding_read_gb_per_s
from clustertwin.errors import SpecError
from clustertwin.specs import ClusterSpec
from clustertwin.specs.loading import build
from clustertwin.train import estimate, search
from clustertwin.train.layout import Layouts
from clustertwin.train.topology_comm import net_fractions, node_shape, parse_placement

DESIGNS = {
    "fat-tree 1:1": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3},
    "fat-tree 1:7 aggregation": {"fabric": "ib-ndr", "topology": "fat-tree", "tiers": 3,
                                 "oversubscription": [1.0, 7.0]},
    "3D torus": {"fabric": "ib-ndr", "topology": "torus3d"},
    "Dragonfly+": {"fabric": "ib-ndr", "topology": "dragonfly+"},
}
L405 = dict(tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048, sequence_parallel=True, zero=1, recompute="none")
DSV3 = dict(tp=1, pp=16, dp=1024, ep=64, micro_batch=1, global_batch=8192, zero=1, recompute="none")
L8B = dict(tp=1, pp=1, dp=1024, micro_batch=1, global_batch=1024, zero=1)


def ref_with_storage(read_gb_per_s: float) -> ClusterSpec:
    raw = copy.deepcopy(store.raw("cluster", "ref-1k-h100"))
    raw["storage"]["read_gb_per_s"] = read_gb_per_s
    return build(ClusterSpec, raw)


@pytest.fixture(scope="module")
def l8b():
    return catalog.get("model", "llama3-8b")


@pytest.fixture(scope="module")
def designs():
    return {k: ClusterSpec(node="dgx-h100", nodes=2048, network=v) for k, v in DESIGNS.items()}


@pytest.fixture(scope="module")
def runs(designs):
    out = {}
    for mname, lay in (("llama3-405b", L405), ("deepseek-v3", DSV3)):
        m = catalog.get("model", mname)
        for k, c in designs.items():
            for pl in ("contiguous", "scattered"):
                out[mname, k, pl] = estimate(m, c, specs.ParallelismSpec(**lay), placement=pl)
    return out


# --- data path ---------------------------------------------------------------------------------------

def test_starved_storage_raises_step_time_and_is_named(l8b):
    par = specs.ParallelismSpec(**L8B)
    base = estimate(l8b, ref_with_storage(400.0), par)
    assert base.breakdown["data_stall"] == 0.0 and base.data_bottleneck is None
    need = binding_read_gb_per_s("tokenized-text", base.step_time_s, 1024, seq_len=l8b.seq_len)
    above = estimate(l8b, ref_with_storage(need * 1.2), par)
    assert above.step_time_s == pytest.approx(base.step_time_s, rel=1e-9)
    slow = estimate(l8b, ref_with_storage(need / 4), par)
    assert slow.data_bottleneck == "storage read"
    # prefetch hides the compute: the step becomes the load time S b / R
    assert slow.step_time_s == pytest.approx(4 * base.step_time_s, rel=1e-6)
    assert sum(slow.breakdown.values()) == pytest.approx(slow.step_time_s, rel=1e-9)
    assert slow.to_dict()["data_path"]["bottleneck"] == "storage read"


def test_vision_dataset_binds_at_much_higher_bandwidth_than_text(l8b):
    par = specs.ParallelismSpec(**L8B)
    text = estimate(l8b, ref_with_storage(400.0), par)
    vision = estimate(l8b, ref_with_storage(400.0), par, dataset="imagenet-jpeg")
    t = text.data_path["demand_gb_per_s"]
    v = vision.data_path["demand_gb_per_s"]
    assert v > 3 * t  # 110 KB JPEGs vs 32 KB of int32 tokens per sample at the same step time
    # at 0.05 GB/s text shards still stream fast enough, random small JPEGs stall the GPUs
    c = ref_with_storage(0.05)
    assert estimate(l8b, c, par).breakdown["data_stall"] == 0.0
    starved = estimate(l8b, c, par, dataset="imagenet-jpeg")
    assert starved.breakdown["data_stall"] > 0 and starved.data_bottleneck == "storage read"
    assert estimate(l8b, c, par, dataset=None).data_path is None


def test_search_takes_the_dataset(l8b):
    c = ref_with_storage(0.01)
    res = search(l8b, c, global_batch=1024, gpus=1024, top=2)
    assert res.best is not None and res.best.data_bottleneck == "storage read"
    assert res.best.breakdown["data_stall"] > 0


# --- topology and placement ---------------------------------------------------------------------------

def test_node_groups_of_each_kind():
    assert node_shape(128, 8, 8) == (128, 1)  # DP with TP filling the node: 128 consecutive-rank nodes
    assert node_shape(64, 1, 8) == (8, 1)  # EP 64 with tp1 cp1: 8 consecutive nodes
    assert node_shape(16, 8192, 8) == (16, 1024)  # PP: stages 1,024 nodes apart
    assert node_shape(4, 1, 8) == (1, 1)  # inside a node


def test_four_designs_give_different_step_times_each_explained(runs):
    for m in ("llama3-405b", "deepseek-v3"):
        t = {k: runs[m, k, "contiguous"].step_time_s for k in DESIGNS}
        assert len({round(v, 4) for v in t.values()}) == 4, t
        flat = runs[m, "fat-tree 1:1", "contiguous"]
        assert all(v == 1.0 for v in flat.net_fractions.values())
        # 1:7 at the aggregation: the pipeline hops cross pods (stages are 1,024 nodes apart)
        agg = runs[m, "fat-tree 1:7 aggregation", "contiguous"]
        assert agg.net_fractions["pp"] < 0.3 and agg.breakdown["pp_comm"] > 2 * flat.breakdown["pp_comm"]
        # DP keeps its bandwidth; its rings that straddle the 224-node pods cross the core (5 switch hops
        # instead of 3): only the per-step switch latency changes
        assert agg.net_fractions["dp"] == 1.0
        assert agg.breakdown["dp_comm"] == pytest.approx(flat.breakdown["dp_comm"], rel=0.02)
        # Dragonfly+: stage hops between groups share m global links
        df = runs[m, "Dragonfly+", "contiguous"]
        assert df.breakdown["pp_comm"] > 5 * flat.breakdown["pp_comm"]
    torus = runs["llama3-405b", "3D torus", "contiguous"]
    flat = runs["llama3-405b", "fat-tree 1:1", "contiguous"]
    assert torus.breakdown["dp_comm"] > 2 * flat.breakdown["dp_comm"]  # rings over part of the dimensions
    torus_moe = runs["deepseek-v3", "3D torus", "contiguous"]
    flat_moe = runs["deepseek-v3", "fat-tree 1:1", "contiguous"]
    assert torus_moe.breakdown["ep_comm"] > 5 * flat_moe.breakdown["ep_comm"]  # all-to-all on a sub-block bisection


def test_scattered_is_slower_than_contiguous_on_oversubscribed_fabric(runs):
    for m in ("llama3-405b", "deepseek-v3"):
        c = runs[m, "fat-tree 1:7 aggregation", "contiguous"]
        s = runs[m, "fat-tree 1:7 aggregation", "scattered"]
        assert s.step_time_s > 1.03 * c.step_time_s and s.net_fractions["dp"] < 0.25
        assert s.placement == "scattered"
        # a non-blocking fat-tree keeps the bandwidth; only switch hops (latency) differ
        assert runs[m, "fat-tree 1:1", "scattered"].step_time_s == pytest.approx(
            runs[m, "fat-tree 1:1", "contiguous"].step_time_s, rel=1e-3)


def test_explicit_node_list_and_bad_placements(designs):
    c = designs["fat-tree 1:7 aggregation"]
    lay = Layouts.from_spec(specs.ParallelismSpec(**L405))
    nodes = parse_placement("0-2047")
    assert net_fractions(c, lay, 8, nodes) == net_fractions(c, lay, 8, "contiguous")
    assert parse_placement("0,5,9") == [0, 5, 9] and parse_placement(None) == "contiguous"
    with pytest.raises(SpecError, match="did you mean 'scattered'"):
        parse_placement("scatterd")
    with pytest.raises(SpecError, match="lists 3 nodes"):
        net_fractions(c, lay, 8, [0, 5, 9])
    with pytest.raises(SpecError, match="twice"):
        net_fractions(c, lay, 8, [0] * 2048)


def test_vectorised_fractions_match_scalar(designs):
    c = designs["3D torus"]
    lays = [specs.ParallelismSpec(**L405), specs.ParallelismSpec(**{**L405, "pp": 8, "dp": 256})]
    arr = Layouts(*(np.array([getattr(Layouts.from_spec(p), f) for p in lays]) for f in Layouts.__dataclass_fields__))
    vec = net_fractions(c, arr, 8)
    for i, p in enumerate(lays):
        one = net_fractions(c, Layouts.from_spec(p), 8)
        assert {k: float(v[i]) for k, v in vec.items()} == pytest.approx(one)


def test_1gbe_cluster_throughput_falls_past_the_network_and_explain_names_it(l8b):
    from clustertwin.explain import explain
    from clustertwin.train import scale

    c = catalog.get("cluster", "a100-512-1gbe")
    res = scale(l8b, c, global_batch=512, max_gpus=32)
    tps = [p.estimate.tokens_per_s for p in res.points]
    assert [p.gpus for p in res.points] == [8, 16, 32]
    assert tps[1] < tps[0] and tps[2] < tps[0]  # 2 and 4 nodes deliver less than one node
    assert res.points[-1].fractions["communication"] > 0.5
    ex = explain(l8b, c, global_batch=512, gpus=32)
    assert ex.bottleneck == "network" and "0.125 GB/s" in ex.verdict


def test_cli_placement_and_dataset(cli):
    import json

    base = ["train", "estimate", "-c", "a100-512-1gbe", "-m", "llama3-8b", "-g", "64", "-b", "64", "--tp", "8"]
    r = cli(*base, "--placement", "scattered", "--dataset", "imagenet-jpeg", "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["placement"] == "scattered" and d["data_path"]["bytes_per_sample"] == 110e3
    assert set(d["net_fractions"]) == {"tp", "cp", "dp", "ep", "edp", "pp", "etp"}
    r = cli(*base, "--placement", "0-7", "--dataset", "none", "--json")
    assert r.code == 0 and json.loads(r.stdout)["data_path"] is None
    for bad, msg in ((["--placement", "scatterd"], "did you mean 'scattered'"),
                     (["--placement", "0-3"], "placement lists 4 nodes"),
                     (["--dataset", "imagenet"], "unknown dataset")):
        r = cli(*base, *bad)
        assert r.code == 2 and msg in r.stderr and "Traceback" not in r.stderr, r.stderr
    r = cli("train", "scale", "-c", "a100-512-1gbe", "-m", "llama3-8b", "-b", "64", "-g", "16", "--placement",
            "scattered")
    assert r.code == 0 and "data" in r.stdout
