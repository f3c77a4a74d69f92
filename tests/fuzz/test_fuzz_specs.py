"""Spec, calibration and raw-byte fuzz: model and cluster files with one hostile field (NaN, inf, negative,
2^63, 400 digits, wrong type, line separators), calibration sections with hostile values, and byte-level damage
(non-UTF-8, UTF-16, NUL, truncation, deep nesting). Every case exits 0 or 2 with one line."""

from __future__ import annotations

import copy

from hypothesis import given, seed
from hypothesis import strategies as st

from clustertwin.catalog import store
from tests.fuzz.harness import fuzz_settings, run, values, write_yaml

MODEL = store.raw("model", "llama3-8b")
MOE = store.raw("model", "mixtral-8x7b")
TRAIN = ("train", "estimate", "--gpus", "8", "-b", "16", "--tp", "8", "--zero", "0")
INFER = ("infer", "estimate", "--gpus", "1")
CLUSTER_PATHS = [("nodes",), ("node",), ("node", "gpus"), ("node", "gpu", "hbm_gib"), ("node", "gpu", "dense_tflops"),
                 ("network", "tiers"), ("network", "oversubscription"), ("network", "fabric", "gbit_per_s"),
                 ("network", "fabric", "achievable_fraction"), ("network", "fabric", "hop_latency_us"),
                 ("network", "topology"), ("storage", "read_gb_per_s"), ("storage", "capacity_pb"),
                 ("facility", "pue"), ("facility", "usd_per_kwh"), ("facility", "rack_kw_limit"), ("name",)]
CAL_KEYS = {"train": ["gemm_efficiency", "cp_overlap", "kernel_latency_s", "te_stack_min_year", "gemm_k_half",
                      "memory_reserved_gib", "fp8_gemm_efficiency_ratio", "nope"],
            "comm": ["nvlink_efficiency", "net_latency_scale", "channels", "pat_per_rank_us", "nvls_efficiency"],
            "infer": ["gemm_efficiency", "step_overhead_ms", "max_batch_seqs", "memory_utilization"]}


def _set(data: dict, path: tuple[str, ...], value: object) -> dict:
    out = copy.deepcopy(data)
    node = out
    for key in path[:-1]:
        nxt = node.get(key)
        if isinstance(nxt, str):  # a preset id: turn it into {preset: id} to override a field
            nxt = {"preset": nxt}
        elif not isinstance(nxt, dict):
            nxt = {}
        node[key] = nxt
        node = nxt
    node[path[-1]] = value
    return out


@seed(22)
@fuzz_settings(300)
@given(field=st.sampled_from([*sorted(k for k in MODEL if k not in ("id", "source")), "head_dim", "attention_window",
                              "moe", "bogus"]), value=values(),
       moe=st.booleans(), infer=st.booleans())
def test_model_field(tmp_path_factory, field: str, value: object, moe: bool, infer: bool) -> None:
    f = write_yaml(tmp_path_factory.getbasetemp() / "model.yaml", {**(MOE if moe else MODEL), field: value})
    run("specs model", *(INFER if infer else TRAIN), "-m", str(f))


@seed(22)
@fuzz_settings(80)
@given(field=st.sampled_from(["experts", "top_k", "expert_ffn_hidden", "shared_experts", "moe_layers"]),
       value=values())
def test_moe_field(tmp_path_factory, field: str, value: object) -> None:
    f = write_yaml(tmp_path_factory.getbasetemp() / "moe.yaml", _set(MOE, ("moe", field), value))
    run("specs model", *TRAIN, "-m", str(f))


@seed(22)
@fuzz_settings(200)
@given(path=st.sampled_from(CLUSTER_PATHS), value=values(), comm=st.booleans())
def test_cluster_field(tmp_path_factory, path: tuple[str, ...], value: object, comm: bool) -> None:
    f = write_yaml(tmp_path_factory.getbasetemp() / "cluster.yaml",
                   _set({"preset": "ref-1k-h100", "nodes": 2}, path, value))
    args = ("comm", "all_reduce", "-b", "1M", "-e", "1M") if comm else TRAIN
    run("specs cluster", *args, "-c", str(f))


@seed(22)
@fuzz_settings(200)
@given(section=st.sampled_from(sorted(CAL_KEYS)), data=st.data(), value=values())
def test_calibration(tmp_path_factory, section: str, data, value: object) -> None:
    key = data.draw(st.sampled_from(CAL_KEYS[section]))
    f = write_yaml(tmp_path_factory.getbasetemp() / "cal.yaml", {section: {key: value}})
    run("calibration", *TRAIN, "--calibration", str(f))




def _model_bytes() -> bytes:
    import yaml

    return yaml.safe_dump(MODEL, sort_keys=False).encode()


@seed(22)
@fuzz_settings(200)
@given(pos=st.integers(0, 400), junk=st.one_of(st.binary(min_size=1, max_size=6),
                                               st.sampled_from([b"\xff\xfe", b"\xfe\xff", b"\x00", b"\xc3\x28",
                                                                b"\xe2\x80\xa8", b"\x85", b"[[[[", b"{", b"&a *a",
                                                                b"!!python/object:os.system", b"\t", b"\r"])),
       truncate=st.booleans(), suffix=st.sampled_from([".yaml", ".json"]))
def test_model_bytes(tmp_path_factory, pos: int, junk: bytes, truncate: bool, suffix: str) -> None:
    raw = _model_bytes()
    if suffix == ".json":
        import json

        raw = json.dumps(MODEL).encode()
    pos = min(pos, len(raw))
    mutated = raw[:pos] + junk + (b"" if truncate else raw[pos:])
    f = tmp_path_factory.getbasetemp() / f"bytes{suffix}"
    f.write_bytes(mutated)
    run("specs bytes", *TRAIN, "-m", str(f))


@seed(22)
@fuzz_settings(40)
@given(depth=st.sampled_from([10, 63, 64, 65, 1000, 100_000]), kind=st.sampled_from(["json", "yaml-flow", "digits"]))
def test_depth_and_digits(tmp_path_factory, depth: int, kind: str) -> None:
    base = tmp_path_factory.getbasetemp()
    if kind == "json":
        f = base / "deep.json"
        f.write_text('{"preset": "llama3-8b", "notes": ' + "[" * depth + "]" * depth + "}")
    elif kind == "yaml-flow":
        f = base / "deep.yaml"
        f.write_text("preset: llama3-8b\nnotes: " + "[" * depth + "]" * depth + "\n")
    else:
        f = base / "digits.yaml"
        f.write_text(f"preset: llama3-8b\nvocab: {'9' * min(depth, 20_000)}\n")
    run("specs limits", *TRAIN, "-m", str(f))
