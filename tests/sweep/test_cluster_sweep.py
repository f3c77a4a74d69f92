"""Cluster spaces (``kind: cluster``): typed schema with nearest-name errors, points that are exactly the
co-simulations ``sched simulate --workload`` runs, the same rows from every executor and batch size, and a
Parquet file with the cluster layout."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from clustertwin import specs
from clustertwin.errors import SpecError
from clustertwin.sched import cluster as sched_cluster
from clustertwin.sched import contention, cosim, failures, workload
from clustertwin.sched.bodies import Bodies
from clustertwin.sweep import SweepSpace, load_space, run_local, run_ray
from clustertwin.sweep.cluster_eval import CLUSTER_COLUMNS, evaluate_cluster_points
from clustertwin.sweep.cluster_space import CLUSTER_AXES, ClusterSweepSpace
from clustertwin.sweep.stream import ParquetStream

ROOT = Path(__file__).resolve().parents[2]
FAT_TREE = str(ROOT / "examples" / "clusters" / "ref-1k-h100-fat-tree-4to1.yaml")
EXAMPLE = ROOT / "examples" / "sweeps" / "cluster-placements.yaml"
MIX = {"name": "small", "jobs": 30, "arrival": {"mean_interarrival_s": 240},
       "classes": [{"name": "8b", "model": "llama3-8b", "gpus": 64, "global_batch": 512, "share": 0.6,
                    "duration": {"steps": 200}},
                   {"name": "ft", "model": "llama2-7b", "gpus": [2, 8], "global_batch": 32, "share": 0.4,
                    "duration": {"hours": 0.3}, "duration_sigma": 0.5}]}
SPACE = {"kind": "cluster", "name": "tiny", "workload": MIX, "cluster": [FAT_TREE], "routing": ["ecmp", "adaptive"],
         "policy": ["fifo", "backfill"], "placement": ["first-fit", "random"], "seed": [0, 3]}


@pytest.fixture(scope="module")
def space() -> ClusterSweepSpace:
    return load_space(SPACE)


@pytest.fixture(scope="module")
def table(space):
    return run_local(space, processes=1).table


@pytest.mark.parametrize(("change", "message"), [
    ({"placement": ["leaf-packd"]}, "placement: unknown placement 'leaf-packd'; did you mean 'leaf-packed'?"),
    ({"policy": ["fifo", "backfil"]}, "policy: unknown policy 'backfil'; did you mean 'backfill'?"),
    ({"routing": ["adaptiv"]}, "routing: unknown routing 'adaptiv'; did you mean 'adaptive'?"),
    ({"cluster": ["ref-1k-h10"]}, "cluster[0]: unknown cluster 'ref-1k-h10'; did you mean 'ref-1k-h100'?"),
    ({"cluster": ["missing/fabric.yaml"]}, "cluster[0]: cluster file not found: missing/fabric.yaml"),
    ({"placements": ["random"]}, "placements: unknown key 'placements'; did you mean 'placement'?"),
    ({"kind": "clustr"}, "kind: unknown space kind 'clustr'; did you mean 'cluster'?"),
    ({"workload": "no-such-mix.yaml"}, "workload: workload file not found: no-such-mix.yaml"),
    ({"workload": {**MIX, "jbos": 3}}, "workload.jbos: unknown key 'jbos'; did you mean 'jobs'?"),
    ({"seed": [1, 1]}, "'seed' lists a choice twice"),
    ({"max_jobs": 0}, "max_jobs: Input should be greater than 0"),
    ({"network": "idael"}, "network: "),
])
def test_bad_fields_are_one_line_errors_with_the_nearest_name(change, message) -> None:
    with pytest.raises(SpecError) as e:
        load_space({**SPACE, **change})
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    f = tmp_path / "space.yaml"
    f.write_text(f"kind: cluster\nworkload: {ROOT / 'examples/workloads/llm-mix.yaml'}\ncluster: [ref-1k-h100]\n"
                 "placement: [randm]\n")
    with pytest.raises(SpecError, match=r"space\.yaml.*did you mean 'random'"):
        load_space(f)


def test_default_kind_is_the_design_space_unchanged() -> None:
    design = {"model": ["llama3-8b"], "node": ["dgx-h100"], "nodes": [2], "fabric": ["ib-ndr"]}
    plain, explicit = load_space(design), load_space({**design, "kind": "design"})
    assert isinstance(plain, SweepSpace) and plain == explicit
    assert "kind" not in json.loads(plain.model_dump_json())


def test_example_file_resolves_paths_from_its_folder() -> None:
    s = load_space(EXAMPLE)
    assert isinstance(s, ClusterSweepSpace) and s.workload_file == "../workloads/llm-mix.yaml"
    assert s.mix.name == "llm-mix" and s.max_jobs == 150
    assert Path(s.resolve(s.cluster[0])).resolve() == Path(FAT_TREE).resolve()
    assert s.size == 24 and s.shape == (1, 2, 2, 2, 3)


def _direct(policy: str, placement: str, routing: str, seed: int) -> dict:
    """The co-simulation of one point built here from the library, as ``sched simulate --workload`` does."""
    spec = specs.load(specs.ClusterSpec, FAT_TREE, kind="cluster")
    mix = workload.WorkloadMix.model_validate(MIX)
    bodies = Bodies(mix, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
    drawn = workload.draw(mix, bodies.iso_runtime_s, int(spec.node.gpus), seed=seed)
    res = cosim.simulate_mix(sched_cluster.from_spec(spec), drawn, bodies, policy=policy, placement=placement,
                             fabric=contention.fabric_of(bodies.topology, routing), seed=seed)
    return {**cosim.record(res, policy, placement), "jobs": len(drawn.jobs)}


def test_every_point_equals_a_direct_co_simulation(space, table) -> None:
    rows = table.to_pylist()
    assert len(rows) == space.size == 16 and [r["point_id"] for r in rows] == list(range(16))
    grid = list(np.ndindex(space.shape))
    for row, idx in zip(rows, grid, strict=True):
        point = {a: getattr(space, a)[i] for a, i in zip(CLUSTER_AXES, idx, strict=True)}
        assert {a: row[a] for a in CLUSTER_AXES} == point
        assert row["status"] == "ok" and row["reason"] is None
        want = _direct(point["policy"], point["placement"], point["routing"], point["seed"])
        for name in ("network", "jobs", "utilization", "goodput_gpu_hours", "interference_gpu_hours",
                     "failure_loss_gpu_hours", "slowdown_mean", "slowdown_p95", "queue_mean_s", "completed",
                     "killed", "requeued", "contention_updates"):
            assert row[name] == want[name], (point, name)


def test_the_axes_change_the_outcome(table) -> None:
    """Not a constant table: routing and placement move interference, the seed draws other jobs."""
    rows = table.to_pylist()

    def pick(**kw):
        return [r for r in rows if all(r[k] == v for k, v in kw.items())]
    rand = pick(placement="random", policy="backfill", seed=0)
    by_routing = {r["routing"]: r["interference_gpu_hours"] for r in rand}
    assert by_routing["ecmp"] > by_routing["adaptive"]
    ecmp = {r["placement"]: r["interference_gpu_hours"] for r in pick(policy="backfill", seed=0, routing="ecmp")}
    assert ecmp["random"] > ecmp["first-fit"]
    seeds = {r["seed"]: r["goodput_gpu_hours"] for r in pick(placement="first-fit", policy="fifo", routing="ecmp")}
    assert seeds[0] != seeds[3]


def test_deterministic_over_processes_and_batches(space, table) -> None:
    pooled = run_local(space, processes=2, batch_points=3)
    assert pooled.batches == 6  # two (cluster, seed) scenarios of 8 points, each cut into 3 + 3 + 2
    assert pooled.table.equals(table)
    assert run_local(space, processes=1).table.equals(table)


def test_a_point_does_not_depend_on_the_points_run_before_it(space, table) -> None:
    """Job bodies cache step profiles by allocation span, so the sweep runs every point on its own copy:
    points evaluated in reverse, or one alone after all the others, give the same rows."""
    ids = np.arange(space.size)[::-1]
    backwards = evaluate_cluster_points(space, ids)
    rows = table.to_pylist()
    for i, pid in enumerate(ids):
        assert backwards["interference_gpu_hours"][i] == rows[pid]["interference_gpu_hours"]
        assert backwards["queue_mean_s"][i] == rows[pid]["queue_mean_s"]
    alone = evaluate_cluster_points(space, np.array([5]))
    assert alone["goodput_gpu_hours"][0] == rows[5]["goodput_gpu_hours"]


def test_history_free_on_the_example_mix() -> None:
    """On the example's LLM mix, random placement under adaptive routing meets step profiles cached by span
    (one Bodies shared with a random/ECMP run before it gives it another interference, a few per cent
    off); the sweep gives the same row alone, after that run, and as a direct run on fresh bodies."""
    s = load_space(EXAMPLE).model_copy(update={"seed": [0], "routing": ["ecmp", "adaptive"], "policy": ["fifo"],
                                                 "placement": ["random"]})
    after = evaluate_cluster_points(s, np.arange(2))
    alone = evaluate_cluster_points(s, np.array([1]))
    spec = specs.load(specs.ClusterSpec, s.resolve(s.cluster[0]), kind="cluster")
    bodies = Bodies(s.mix, spec, node_mtbf_h=failures.DEFAULT_NODE_MTBF_H)
    drawn = workload.draw(s.mix, bodies.iso_runtime_s, 8, seed=0, max_jobs=150)
    res = cosim.simulate_mix(sched_cluster.from_spec(spec), drawn, bodies, policy="fifo", placement="random",
                             fabric=contention.fabric_of(bodies.topology, "adaptive"), seed=0)
    want = cosim.record(res, "fifo", "random")
    for name in ("interference_gpu_hours", "queue_mean_s", "slowdown_p95"):
        assert after[name][1] == alone[name][0] == want[name], name


def test_parquet_has_the_cluster_layout_and_the_space(space, tmp_path: Path) -> None:
    out = tmp_path / "cluster.parquet"
    with ParquetStream.for_space(out, space) as sink:
        run_local(space, processes=1, sink=sink)
    assert sink.rows == 16 and dict(sink.status) == {"ok": 16}
    schema = pq.read_schema(out)
    assert schema.names == [c[0] for c in CLUSTER_COLUMNS]
    assert all(schema.field(n).metadata[b"description"] for n in schema.names)
    stored = json.loads(schema.metadata[b"clustertwin.space"])
    assert stored["kind"] == "cluster" and stored["placement"] == ["first-fit", "random"]
    assert pq.read_table(out).equals(run_local(space, processes=1).table.replace_schema_metadata(
        pq.read_table(out).schema.metadata))


def test_a_mix_too_large_for_the_cluster_is_invalid_design_not_a_crash() -> None:
    big = {**MIX, "classes": [{**MIX["classes"][0], "gpus": 4096, "share": 1.0}]}
    s = load_space({**SPACE, "workload": big, "routing": ["ecmp"], "policy": ["fifo"], "seed": [0]})
    rows = run_local(s, processes=1).table.to_pylist()
    assert [r["status"] for r in rows] == ["invalid_design"] * 2  # first-fit and random
    assert all(r["reason"] and r["utilization"] is None and r["jobs"] is None for r in rows)


def test_ray_executor_equals_local(space, table) -> None:
    """The same cluster sweep on a local Ray started here gives the local executor's table."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("ray is not installed (CI installs the 'ray' extra)")
        pytest.skip("ray is not installed")
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        run = run_ray(space, batch_points=8)
    finally:
        ray.shutdown()
    assert run.executor == "ray" and run.batches == 2  # one batch per (cluster, seed) scenario
    assert run.table.equals(table)
