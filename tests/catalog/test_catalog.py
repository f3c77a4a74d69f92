"""The packaged catalog: every entry validates and is sourced, the ids the docs and examples use resolve, figures follow
the catalog conventions (dense peaks, per-direction scale-up), and the example clusters load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from tests.conftest import EXAMPLES, run_cli

from clustertwin import catalog, specs
from clustertwin.units import BITS_PER_BYTE

ALL_ENTRIES = [(kind, entry_id) for kind in catalog.kinds() for entry_id in catalog.ids(kind)]

#: ids the docs promise (validation cases and examples rely on them)
DESIGN_IDS: dict[str, list[str]] = {
    "gpu": ["k80", "v100-sxm2-32gb", "a100-sxm-40gb", "a100-sxm-80gb", "h100-sxm", "h100-pcie", "h800-sxm",
            "h20", "h200-sxm", "b200", "gb200", "l40s", "mi250x", "mi300x", "mi325x", "ascend-910b"],
    "node": ["dgx-a100-40gb", "dgx-a100-80gb", "dgx-h100", "dgx-h200", "dgx-b200", "hgx-h100-roce", "hgx-h800",
             "mi300x-8", "atlas-800-910b", "gb200-nvl72", "k80-4"],
    "fabric": ["ib-hdr", "ib-ndr", "ib-xdr", "roce-400g", "roce-800g", "eth-100g", "eth-25g", "eth-10g",
               "eth-1g", "opa-100g"],
    "model": ["gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
              "mixtral-8x7b", "deepseek-v3"],
    "cluster": ["ref-1k-h100"],
}

#: per-GPU scale-up bandwidth PER DIRECTION, GB/s (vendors print twice these as bidirectional sums)
SCALE_UP_PER_DIRECTION_GB_PER_S: dict[str, float] = {
    "h100-sxm": 450, "h200-sxm": 450, "h20": 450, "h800-sxm": 200, "a100-sxm-40gb": 300, "a100-sxm-80gb": 300,
    "v100-sxm2-32gb": 150, "b200": 900, "gb200": 900, "mi300x": 448, "mi250x": 400, "ascend-910b": 196,
    "l40s": 0, "k80": 0,
}

#: parts with NVLink SHARP through NVSwitch (Hopper and later)
NVLS_GPUS = {"h100-sxm", "h200-sxm", "h800-sxm", "h20", "b200", "gb200", "gh200", "h100-sxm-64gb", "b300", "gb300"}

#: parts without tensor/matrix units (no TF32/BF16/FP16-tensor/FP8 peaks)
NO_TENSOR_UNITS = {"k80"}

#: datasheets round dense peaks independently; the L40S prints BF16 362.05 and FP8 733 (2.02x)
DATASHEET_ROUNDING = 0.02

#: parameter counts the model names advertise, billions (papers / model cards)
ADVERTISED_PARAMS_B: dict[str, float] = {
    "gpt3-175b": 175.0, "llama2-7b": 6.74, "llama2-13b": 13.0, "llama2-70b": 69.0,
    "llama3-8b": 8.03, "llama3-70b": 70.6, "llama3-405b": 405.0, "bert-large": 0.34, "gpt2-1.5b": 1.542,
}
PARAMS_REL_TOL = 0.03
BILLION = 1e9
SWIGLU_MATRICES = 3
GELU_MATRICES = 2

EXAMPLE_FILES = sorted(EXAMPLES.glob("clusters/*.yaml"))


@pytest.mark.parametrize(("kind", "entry_id"), ALL_ENTRIES)
def test_every_entry_validates_and_has_a_source(kind: str, entry_id: str) -> None:
    entry = catalog.get(kind, entry_id)
    assert entry.id == entry_id
    assert entry.name
    source = entry.source if isinstance(entry.source, str) else " ".join(entry.source or [])
    assert source.strip()


@pytest.mark.parametrize(("kind", "entry_id"), [(k, i) for k, ids in DESIGN_IDS.items() for i in ids])
def test_design_ids_resolve(kind: str, entry_id: str) -> None:
    assert catalog.get(kind, entry_id).id == entry_id


def test_every_kind_is_populated() -> None:
    for kind in catalog.kinds():
        assert catalog.ids(kind), kind


@pytest.mark.parametrize("gpu_id", catalog.ids("gpu"))
def test_gpu_dense_peaks_are_sane(gpu_id: str) -> None:
    g = catalog.get("gpu", gpu_id)
    assert g.hbm_gb_per_s > 0 and g.hbm_gb > 0 and g.tdp_w > 0
    if g.bf16_tflops is not None and g.fp8_tflops is not None:
        assert g.bf16_tflops < g.fp8_tflops <= 2 * g.bf16_tflops * (1 + DATASHEET_ROUNDING)
    if g.tf32_tflops is not None and g.bf16_tflops is not None:
        assert g.tf32_tflops <= g.bf16_tflops
    if g.fp64_tflops is not None and g.fp64_tensor_tflops is not None:
        assert g.fp64_tflops <= g.fp64_tensor_tflops
    if g.fp4_tflops is not None and g.fp8_tflops is not None:
        # FP4 is twice FP8, except Blackwell Ultra's NVFP4 tensor cores (B300 / GB300: 3x)
        assert g.fp8_tflops < g.fp4_tflops <= (3 if gpu_id in ("b300", "gb300") else 2) * g.fp8_tflops
    half_precision = g.peak_tflops("fp16")
    if gpu_id in NO_TENSOR_UNITS:
        assert half_precision is None and g.bf16_tflops is None and g.fp8_tflops is None
    else:
        assert half_precision is not None and half_precision > 0


def test_h100_peaks_are_dense_not_sparse() -> None:
    h100 = catalog.get("gpu", "h100-sxm")
    assert h100.peak_tflops("bf16") == pytest.approx(989.4)
    assert h100.peak_tflops("fp8") == pytest.approx(1978.9)


@pytest.mark.parametrize(("gpu_id", "gb_per_s"), SCALE_UP_PER_DIRECTION_GB_PER_S.items())
def test_scale_up_is_per_direction(gpu_id: str, gb_per_s: float) -> None:
    assert catalog.get("gpu", gpu_id).scale_up_gb_per_s == pytest.approx(gb_per_s)


def test_nvls_only_on_hopper_and_later_nvswitch_parts() -> None:
    with_nvls = {i for i in catalog.ids("gpu") if catalog.get("gpu", i).nvls}
    assert with_nvls == NVLS_GPUS


@pytest.mark.parametrize("node_id", catalog.ids("node"))
def test_node_scale_up_matches_its_gpu(node_id: str) -> None:
    node = catalog.get("node", node_id)
    assert node.cpu is not None and node.cpus > 0
    if node.scale_up.kind in ("nvswitch", "nvlink-mesh", "infinity-fabric", "hccs"):
        assert node.scale_up_gb_per_s == pytest.approx(node.gpu.scale_up_gb_per_s)
    else:
        assert 0 < node.scale_up_gb_per_s < node.gpu.hbm_gb_per_s


def test_gb200_nvl72_is_one_72_gpu_nvlink_domain() -> None:
    rack = catalog.get("node", "gb200-nvl72")
    assert rack.gpus == 72 and rack.scale_up.kind == "nvswitch" and rack.cooling == "liquid"
    assert rack.nics.count == rack.gpus


CPUS_WITH_DDR_FIGURES = [i for i in catalog.ids("cpu") if catalog.get("cpu", i).memory_channels is not None]


@pytest.mark.parametrize("cpu_id", CPUS_WITH_DDR_FIGURES)
def test_cpu_bandwidth_is_channels_times_rate_times_8_bytes(cpu_id: str) -> None:
    cpu = catalog.get("cpu", cpu_id)
    derived_gb_per_s = cpu.memory_channels * cpu.memory_mts * BITS_PER_BYTE / 1000
    assert cpu.memory_gb_per_s == pytest.approx(derived_gb_per_s, abs=0.1)


@pytest.mark.parametrize("fabric_id", catalog.ids("fabric"))
def test_fabric_switch_resolves_and_fraction_is_a_fraction(fabric_id: str) -> None:
    fabric = catalog.get("fabric", fabric_id)
    assert 0 < fabric.achievable_fraction <= 1
    assert fabric.default_switch is not None
    switch = catalog.get("switch", fabric.default_switch)
    assert switch.port_gbit_per_s == fabric.gbit_per_s
    if fabric.kind == "infiniband":
        assert fabric.congestion_penalty == 0 and fabric.lossless == "credit"
    if fabric.kind == "ethernet":
        assert fabric.lossless == "none" and not fabric.sharp


def test_nccl_per_nic_ceilings() -> None:
    """The NCCL maintainers' busbw ceilings: HDR ~20 GB/s, NDR 46-48 GB/s, 100G 12.2 GB/s per NIC."""
    assert catalog.get("fabric", "ib-hdr").gb_per_s * catalog.get("fabric", "ib-hdr").achievable_fraction == (
        pytest.approx(20.0))
    ndr = catalog.get("fabric", "ib-ndr")
    assert 46.0 <= ndr.gb_per_s * ndr.achievable_fraction <= 48.0
    opa = catalog.get("fabric", "opa-100g")
    assert opa.gb_per_s * opa.achievable_fraction == pytest.approx(12.2)
    # TCP sockets reach less of the line rate than RDMA at the same speed
    assert catalog.get("fabric", "eth-100g").achievable_fraction < opa.achievable_fraction


@pytest.mark.parametrize("switch_id", catalog.ids("switch"))
def test_switch_capacity_is_ports_times_rate(switch_id: str) -> None:
    sw = catalog.get("switch", switch_id)
    if sw.capacity_tbit_per_s is not None:
        assert sw.capacity_tbit_per_s == pytest.approx(sw.ports * sw.port_gbit_per_s / 1000)


def _dense_params(m: specs.ModelSpec) -> float:
    """Weights of a dense decoder: embeddings (+ untied output) + per layer attention and FFN matrices."""
    kv_width = m.n_kv_heads * m.d_head
    attention = 2 * m.hidden * m.heads * m.d_head + 2 * m.hidden * kv_width
    ffn = (SWIGLU_MATRICES if m.ffn == "swiglu" else GELU_MATRICES) * m.hidden * m.d_ffn
    embeddings = (1 if m.tied_embeddings else 2) * m.vocab * m.hidden
    return m.layers * (attention + ffn) + embeddings


@pytest.mark.parametrize(("model_id", "params_b"), ADVERTISED_PARAMS_B.items())
def test_dense_model_dimensions_give_the_advertised_size(model_id: str, params_b: float) -> None:
    model = catalog.get("model", model_id)
    assert _dense_params(model) / BILLION == pytest.approx(params_b, rel=PARAMS_REL_TOL)


def test_kv_cache_bytes_per_token_match_published_examples() -> None:
    """2 x layers x kv_heads x head_dim x 2 B: Llama-2-7B 512 KiB, Llama-3-8B 128 KiB, 70B 320 KiB (FP16)."""
    fp16_bytes = 2
    expected = {"llama2-7b": 524_288, "llama3-8b": 131_072, "llama3-70b": 327_680, "llama2-70b": 327_680}
    for model_id, kv_bytes in expected.items():
        m = catalog.get("model", model_id)
        assert 2 * m.layers * m.n_kv_heads * m.d_head * fp16_bytes == kv_bytes, model_id


def test_moe_models() -> None:
    mixtral = catalog.get("model", "mixtral-8x7b")
    assert (mixtral.moe.experts, mixtral.moe.top_k, mixtral.n_moe_layers) == (8, 2, 32)
    v3 = catalog.get("model", "deepseek-v3")
    assert (v3.moe.experts, v3.moe.top_k, v3.moe.shared_experts, v3.n_moe_layers) == (256, 8, 1, 58)
    assert v3.layers - v3.n_moe_layers == 3 and v3.mla_kv_lora_rank == 512 and v3.mla_rope_dim == 64


def test_examples_exist() -> None:
    assert len(EXAMPLE_FILES) >= 8


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_cluster_loads_with_consistent_gpu_count(path: Path) -> None:
    cluster = specs.load(specs.ClusterSpec, path)
    assert cluster.total_gpus == cluster.nodes * cluster.node.gpus
    if cluster.gpus is not None:
        assert cluster.gpus == cluster.total_gpus
    assert cluster.source
    assert path.read_text(encoding="utf-8").startswith("#"), "examples start with a comment header"


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_example_matches_its_catalog_cluster(path: Path) -> None:
    from_file = specs.load(specs.ClusterSpec, path).model_dump(exclude={"id"})
    from_catalog = catalog.get("cluster", path.stem).model_dump(exclude={"id"})
    assert from_file == from_catalog


def test_issue_example_designs() -> None:
    """The designs the issue asks for: sizes, topologies and fabrics."""
    expect = {
        "llama3-16k-h100-roce": (16384, "fat-tree", "roce"),
        "tpu-style-torus-4k": (4096, "torus3d", "infiniband"),
        "dragonfly-16k-mi300x": (16384, "dragonfly+", "roce"),
        "ascend-910b-64": (64, "fat-tree", "roce"),
        "a100-512-1gbe": (512, "fat-tree", "ethernet"),
        "gb200-nvl72-576": (576, "rail-optimized", "infiniband"),
    }
    for cluster_id, (gpus, topology, fabric_kind) in expect.items():
        c = catalog.get("cluster", cluster_id)
        assert (c.total_gpus, c.net.topology, c.fabric.kind) == (gpus, topology, fabric_kind), cluster_id
    torus = catalog.get("cluster", "tpu-style-torus-4k")
    assert math.prod(torus.net.torus_dims) == torus.nodes
    k80 = catalog.get("cluster", "k80-8gpu-node")
    assert k80.nodes == 1 and k80.node.gpu.id == "k80" and k80.node.scale_up.kind == "pcie"
    assert catalog.get("cluster", "a100-512-1gbe").node.nics.gbit_per_s == 1


def test_cli_shows_entry_with_source_as_json() -> None:
    result = run_cli("catalog", "gpu", "h100-sxm", "--json")
    assert result.code == 0
    data = json.loads(result.stdout)
    assert data["id"] == "h100-sxm" and data["bf16_tflops"] == pytest.approx(989.4)
    assert "datasheet" in data["source"]


def test_cli_typo_exits_2_and_suggests() -> None:
    result = run_cli("catalog", "gpu", "h100-smx")
    assert result.code == 2
    assert "h100-sxm" in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
