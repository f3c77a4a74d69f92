"""Chakra execution traces of a predicted step: files decode with Chakra's schema (mlc-chakra's generated
et_def_pb2 when installed, and always a wire-level reader keyed on et_def.proto's field numbers), hold one
collective node per collective the twin counts, sends meet receives, groups name their members."""

from __future__ import annotations

import json
import sys
from collections import Counter

import pytest
from tests.conftest import run_cli

from clustertwin import catalog, specs
from clustertwin.deploy.chakra import export_chakra, integer_layers
from clustertwin.deploy.chakra_schema import decode_messages, parse_proto, proto_text, schema
from clustertwin.errors import SpecError
from clustertwin.train import estimate
from clustertwin.train.step_collectives import buckets, step_collectives

pytest.importorskip("google.protobuf")

# et_def.proto field numbers (Node: id 1, name 2, type 3, data_deps 5, duration_micros 7, attr 10;
# AttributeProto: name 1, int32_val 7, int64_val 9, bool_val 27, string_val 29)
NODE_TYPES = {4: "COMP_NODE", 5: "COMM_SEND_NODE", 6: "COMM_RECV_NODE", 7: "COMM_COLL_NODE"}
COMM_TYPES = {0: "ALL_REDUCE", 2: "ALL_GATHER", 6: "ALL_TO_ALL", 7: "REDUCE_SCATTER"}


def _varint(b: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        n |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return n, i


def _fields(b: bytes):
    """(field number, value) of a message: varints as ints, length-delimited as bytes (packed repeated
    varints included)."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
        elif wire == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        yield num, v


def _node(b: bytes) -> dict:
    out = {"id": 0, "type": "INVALID_NODE", "dur": 0, "deps": [], "attr": {}}  # proto3 omits zero values
    for num, v in _fields(b):
        if num == 1:
            out["id"] = v
        elif num == 2:
            out["name"] = v.decode()
        elif num == 3:
            out["type"] = NODE_TYPES[v]
        elif num == 5:
            j, deps = 0, []
            while j < len(v):
                d, j = _varint(v, j)
                deps.append(d)
            out["deps"] = deps
        elif num == 7:
            out["dur"] = v
        elif num == 10:
            a = dict(_fields(v))
            out["attr"][a[1].decode()] = a.get(29, b"").decode() if 29 in a else a.get(9, a.get(7, a.get(27, 0)))
    return out


def _read(path):
    msgs = decode_messages(path.read_bytes())
    return msgs[0], [_node(m) for m in msgs[1:]]


@pytest.fixture(scope="module")
def h100():
    return catalog.get("cluster", "ref-1k-h100")


def _export(tmp_path, model_id, h100, max_ranks=64, **kw):
    m = catalog.get("model", model_id)
    par = specs.ParallelismSpec(**kw)
    est = estimate(m, h100, par)
    res = export_chakra(m, h100, par, est, tmp_path, max_ranks=max_ranks)
    return m, par, est, res


def _expected(m, h100, par, est, stage):
    """Collectives per step of ``stage`` from the twin's per-step collectives."""
    layers = integer_layers(est.stage_plan, m.layers)
    plan = step_collectives(m, h100, par, layers)
    sc, micro = plan.collectives, plan.collectives.microbatches
    passes = 2  # forward + backward (selective recompute re-runs no TP/EP collective)
    first_moe = m.layers - m.n_moe_layers
    start = sum(layers[:stage])
    moe_layers = sum(1 for i in range(start, start + layers[stage]) if i >= first_moe)
    want = Counter()
    for c in sc.tp_pass:
        want[("tp", c.op)] += layers[stage] * micro * passes
    for c in sc.ep_pass:
        want[("ep", c.op)] += moe_layers * micro * passes
    for kind, n, _, _ in buckets(plan, stage):
        want[(kind, "reduce_scatter" if par.zero else "all_reduce")] += n
        if par.zero in (1, 2):
            want[(kind, "all_gather")] += n
    return want


@pytest.mark.parametrize("model_id,kw", [
    ("llama3-8b", dict(tp=2, pp=2, dp=2, global_batch=16, sequence_parallel=True, zero=1)),
    ("llama3-8b", dict(tp=2, pp=2, dp=2, vpp=2, global_batch=16, sequence_parallel=False, zero=0)),
    ("mixtral-8x7b", dict(tp=2, pp=2, dp=2, ep=2, global_batch=8, sequence_parallel=True, zero=1)),
])
def test_one_collective_node_per_predicted_collective(tmp_path, h100, model_id, kw):
    m, par, est, res = _export(tmp_path, model_id, h100, **kw)
    groups = json.loads((tmp_path / "workload.json").read_text())
    assert res.ranks == par.gpus == len(list(tmp_path.glob("workload.*.et")))
    for rank in range(res.ranks):
        _, nodes = _read(tmp_path / f"workload.{rank}.et")
        stage = rank // (par.tp * par.cp * par.dp)
        got = Counter()
        for n in nodes:
            if n["type"] != "COMM_COLL_NODE":
                continue
            members = groups[n["attr"]["pg_name"]]
            assert rank in members
            kind = n["name"].split()[-2]
            assert members == _members(kind, rank, par)
            got[(kind, COMM_TYPES[n["attr"]["comm_type"]].lower())] += 1
            assert n["attr"]["comm_size"] > 0
        assert got == _expected(m, h100, par, est, stage)
        assert sum(got.values()) == res.nodes[rank]["COMM_COLL_NODE"]
        ids = [n["id"] for n in nodes]
        assert ids == list(range(len(nodes)))
        assert all(d < n["id"] for n in nodes for d in n["deps"])  # a DAG in file order


def _members(kind, rank, par):
    """Group members in Megatron-Core's rank order (tp fastest, then cp, dp, pp), written out for the test."""
    stride = par.tp * par.cp * par.dp
    base, tp_r = rank - rank % stride, rank % par.tp
    if kind == "tp":
        return list(range(rank - tp_r, rank - tp_r + par.tp))
    if kind == "dp":
        return [base + tp_r + par.tp * i for i in range(par.cp * par.dp)]
    d = rank % stride  # expert groups: etp (= tp) fastest, then ep
    ep_r = (d // par.tp) % par.ep
    return [rank + par.tp * (e - ep_r) for e in range(par.ep)]


def test_sends_meet_receives_and_durations_are_the_twins(tmp_path, h100):
    m, _par, est, res = _export(tmp_path, "llama3-8b", h100, tp=2, pp=4, dp=1, vpp=2, global_batch=8,
                               sequence_parallel=True, zero=0)
    sends, recvs = Counter(), Counter()
    for rank in range(res.ranks):
        _, nodes = _read(tmp_path / f"workload.{rank}.et")
        for n in nodes:
            a = n["attr"]
            key = (a.get("comm_src"), a.get("comm_dst"), a.get("comm_tag"))
            if n["type"] == "COMM_SEND_NODE":
                assert a["comm_src"] == rank
                sends[key] += 1
            elif n["type"] == "COMM_RECV_NODE":
                assert a["comm_dst"] == rank
                recvs[key] += 1
        if rank == res.ranks - 1:  # last stage: layers, output layer and optimizer as the twin charges them
            sc = est.schedule
            micro = round(sc["microbatches"])
            layers = integer_layers(est.stage_plan, m.layers)[-1]
            want = micro * (layers * (sc["layer_compute_s"] + sc["layer_host_s"]) + sc["logits_s"]) + \
                est.breakdown["optimizer"]
            got = sum(n.get("dur", 0) for n in nodes if n["type"] == "COMP_NODE") / 1e6
            assert got == pytest.approx(want, rel=1e-3)
    assert sends == recvs and sends
    assert all(v == 1 for v in sends.values())


def test_decodes_with_chakras_generated_schema(tmp_path, h100):
    pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    _, _, _, res = _export(tmp_path, "llama3-8b", h100, tp=2, pp=2, dp=1, global_batch=4, zero=0)
    msgs = decode_messages((tmp_path / "workload.1.et").read_bytes())
    meta = pb.GlobalMetadata()
    meta.ParseFromString(msgs[0])
    assert meta.version and {a.name for a in meta.attr} >= {"dp_modelled", "dp_exported"}
    types = Counter()
    for raw in msgs[1:]:
        node = pb.Node()
        node.ParseFromString(raw)
        types[pb.NodeType.Name(node.type)] += 1
        if node.type == pb.COMM_COLL_NODE:
            attrs = {a.name: a for a in node.attr}
            assert attrs["comm_type"].WhichOneof("value") == "int64_val"
            assert attrs["comm_size"].WhichOneof("value") == "int64_val"
            assert attrs["pg_name"].WhichOneof("value") == "string_val"
    assert types["COMM_COLL_NODE"] == res.nodes[1]["COMM_COLL_NODE"]
    assert types["COMP_NODE"] == res.nodes[1]["COMP_NODE"]


def _shape(f):
    return (f.name, f.number, f.type, f.is_repeated, f.containing_oneof.name if f.containing_oneof else None,
            f.message_type.name if f.message_type else None, f.enum_type.name if f.enum_type else None)


def test_the_runtime_schema_matches_chakras_descriptor():
    pb = pytest.importorskip("chakra.schema.protobuf.et_def_pb2")
    S = schema()
    for name in ("Node", "GlobalMetadata", "AttributeProto", "IOInfo"):
        ours = {_shape(f) for f in getattr(S, name).DESCRIPTOR.fields}
        theirs = {_shape(f) for f in getattr(pb, name).DESCRIPTOR.fields}
        assert ours == theirs, name
    parsed = parse_proto(proto_text())
    assert dict(parsed["enums"]["CollectiveCommType"])["ALL_TO_ALL"] == pb.ALL_TO_ALL


def test_a_large_world_keeps_the_pipeline_and_drops_dp_replicas(tmp_path, h100):
    _, _par, _, res = _export(tmp_path, "llama3-8b", h100, max_ranks=16, tp=2, pp=2, dp=8, global_batch=32, zero=1)
    assert (res.ranks, res.dp_exported, res.dp_modelled) == (16, 4, 8)
    with pytest.raises(SpecError, match="raise --ranks"):
        _export(tmp_path / "x", "llama3-8b", h100, max_ranks=2, tp=2, pp=2, dp=8, global_batch=32, zero=1)


def test_cli_and_missing_protobuf(tmp_path, monkeypatch):
    r = run_cli("export", "chakra", "--cluster", "ref-1k-h100", "--model", "llama3-8b", "--gpus", "4", "--tp", "2",
                "--pp", "2", "-b", "4", "--out", str(tmp_path), "--json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["ranks"] == 4 and len(d["files"]) == 4
    bad = run_cli("export", "chakra", "--cluster", "ref-1k-h100", "--model", "llama3-8b", "--gpus", "4", "--tp", "2",
                  "-b", "4", "--out", str(tmp_path), "--prefix", "../up")
    assert bad.code == 2 and "--prefix" in bad.stderr
    schema.cache_clear()
    monkeypatch.setitem(sys.modules, "google.protobuf", None)
    try:
        missing = run_cli("export", "chakra", "--cluster", "ref-1k-h100", "--model", "llama3-8b", "--gpus", "4",
                          "--tp", "2", "--pp", "2", "-b", "4", "--out", str(tmp_path / "m"))
    finally:
        schema.cache_clear()
    assert missing.code == 2 and "pip install 'clustertwin[chakra]'" in missing.stderr
    assert "Traceback" not in missing.stderr
