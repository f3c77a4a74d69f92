"""``clustertwin plan``: default reference plan, JSON keys, --compare, every example cluster."""

from __future__ import annotations

import json

import pytest
from tests.conftest import EXAMPLES, run_cli

# 128 x DGX H100 at 10.2 kW maximum (NVIDIA DGX H100 User Guide) plus the DGX SuperPOD H100 4-SU network:
# 32 leaf + 16 spine QM9700 at 1.72 kW, and 1,024 node-leaf + 1,024 leaf-spine optical links whose
# 3,072 switch-side 400G port ends draw 8.5 W each (17 W per twin-port OSFP).
REFERENCE_IT_KW = 128 * 10.2 + 48 * 1.72 + 3072 * 8.5 / 1000

SECTIONS = {"compute", "memory", "network", "storage", "facility", "cost"}


def _plan_json(*args: str) -> dict:
    r = run_cli("plan", *args, "--json")
    assert r.code == 0, r.stderr
    return json.loads(r.stdout)


def test_default_plan_prints_the_reference_cluster():
    r = run_cli("plan")
    assert r.code == 0, r.stderr
    assert r.stderr == ""
    out = r.stdout
    assert "ref-1k-h100" in out
    for section in SECTIONS:
        assert section in out
    for label in ("FP64 vector", "FP64 tensor", "BF16 tensor", "HBM total, TB", "bisection, TB/s",
                  "IT power, kW", "cooling recommended", "PUE", "TCO / yr", "USD per GPU-hour"):
        assert label in out
    assert "1024" in out  # GPUs


def test_plan_json_has_stable_sections_and_unit_keys():
    d = _plan_json()
    assert set(d) == {"name", *SECTIONS, "warnings", "breakdown"}
    assert d["name"] == "ref-1k-h100"
    assert set(d["compute"]["peak"]) >= {"fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8"}
    assert set(d["compute"]["peak"]["bf16"]) == {"per_gpu_tflops", "total_pflops"}
    assert {"hbm_total_tb", "hbm_total_tb_per_s", "host_dram_total_tb"} <= set(d["memory"])
    assert {"bisection_tb_per_s", "diameter_hops", "switches", "cables", "transceivers",
            "injection_gb_per_s_per_gpu", "scale_up_domain_gpus", "oversubscription"} <= set(d["network"])
    assert {"read_gb_per_s", "read_gb_per_s_per_gpu", "capacity_pb"} <= set(d["storage"])
    assert set(d["facility"]) == {"power", "racks", "cooling", "energy"}
    assert {"it_kw", "nodes_kw", "switches_kw", "transceivers_kw", "storage_kw"} <= set(d["facility"]["power"])
    assert {"facility_kw", "annual_mwh", "annual_energy_usd", "pue"} <= set(d["facility"]["energy"])
    assert set(d["cost"]) == {"capex", "tco"}
    assert {"tco_usd_per_year", "usd_per_gpu_hour"} <= set(d["cost"]["tco"])
    items = d["cost"]["capex"]["items"]
    assert all(item["source"] and item["confidence"] in ("list", "street", "cloud", "estimate") for item in items)
    assert all(item["estimate"] == (item["confidence"] == "estimate") for item in items)
    assert d["cost"]["capex"]["price_note"]


def test_reference_figures():
    d = _plan_json()
    c, m, n, f = d["compute"], d["memory"], d["network"], d["facility"]
    assert c["gpus"] == 1024
    assert c["peak"]["bf16"]["total_pflops"] == pytest.approx(1024 * 989.4 / 1000)
    assert c["peak"]["fp64"]["total_pflops"] == pytest.approx(1024 * 33.5 / 1000)
    assert m["hbm_total_tb"] == pytest.approx(1024 * 80 / 1000)
    assert n["switch_count"] == 48  # DGX SuperPOD H100, 4 SU: 32 leaf + 16 spine
    assert n["injection_gb_per_s_per_gpu"] == pytest.approx(50.0)
    assert n["scale_up_domain_gpus"] == 8
    it_kw = f["power"]["it_kw"]
    assert abs(it_kw - REFERENCE_IT_KW) / REFERENCE_IT_KW < 0.15
    assert f["cooling"]["applied"] == "liquid" and f["cooling"]["pue"] == 1.15
    assert f["energy"]["facility_kw"] == pytest.approx(it_kw * 1.15)


def test_compare_shows_two_columns(tmp_path):
    other = EXAMPLES / "clusters" / "a100-512-1gbe.yaml"
    if not other.exists():
        other = tmp_path / "small.yaml"
        other.write_text("name: small\nnode: dgx-h100\nnodes: 2\n")
    r = run_cli("plan", "ref-1k-h100", "--compare", str(other))
    assert r.code == 0, r.stderr
    name = other.stem
    header = next(line for line in r.stdout.splitlines() if "ref-1k-h100" in line and name in line)
    assert header.index("ref-1k-h100") < header.index(name)
    d = _plan_json("ref-1k-h100", "--compare", str(other))
    assert [p["name"] for p in d["compare"]] == ["ref-1k-h100", name]


def test_unnamed_cluster_file_is_named_after_the_file(tmp_path):
    f = tmp_path / "two_nodes.yaml"
    f.write_text("node: dgx-h100\nnodes: 2\n")
    d = _plan_json(str(f))
    assert d["name"] == "two_nodes"
    assert d["compute"]["gpus"] == 16


EXAMPLE_FILES = sorted((EXAMPLES / "clusters").glob("*.yaml"))


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=[p.stem for p in EXAMPLE_FILES])
def test_every_example_cluster_plans(path):
    r = run_cli("plan", str(path))
    assert r.code == 0, r.stderr
    d = _plan_json(str(path))
    power = d["facility"]["power"]
    assert power["it_kw"] >= power["nodes_kw"] > 0
    assert d["cost"]["tco"]["usd_per_gpu_hour"] > 0


def test_plan_compares_several_clusters_and_fabrics(cli) -> None:
    """`--compare` repeats, and `--fabric` shows the first cluster with another fabric (no YAML per fabric)."""
    import json

    r = cli("plan", "ref-1k-h100", "--compare", "a100-512-1gbe", "--compare", "gb200-nvl72-576", "--json")
    assert r.code == 0, r.stderr
    assert len(json.loads(r.stdout)["compare"]) == 3
    r = cli("plan", "ref-1k-h100", "--fabric", "ib-hdr", "--json")
    assert r.code == 0, r.stderr
    a, b = json.loads(r.stdout)["compare"]
    assert a["network"]["fabric"] == "ib-ndr" and b["network"]["fabric"] == "ib-hdr"
    assert b["network"]["port_gbit_per_s"] == a["network"]["port_gbit_per_s"] / 2
    bad = cli("plan", "ref-1k-h100", "--fabric", "ib-nd")
    assert bad.code == 2 and "ib-ndr" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def _component(d: dict, name: str) -> float:
    return next(item["usd"] for item in d["cost"]["capex"]["items"] if item["component"] == name)


# catalog clusters whose every part is a catalog id with the spec's defaults elsewhere (no storage or facility)
PARTS_OF = {
    "deepseek-v3-2048-h800": ["--node", "hgx-h800", "--nodes", "256", "--network-fabric", "ib-ndr",
                              "--topology", "fat-tree", "--tiers", "2", "--oversubscription", "1"],
    "dgx-b300-1k": ["--node", "dgx-b300", "--nodes", "128", "--network-fabric", "ib-xdr",
                    "--topology", "rail-optimized"],
}


@pytest.mark.parametrize("cluster", sorted(PARTS_OF))
def test_a_cluster_built_from_a_catalog_clusters_parts_plans_as_it_does(cluster):
    built = _plan_json(*PARTS_OF[cluster])
    whole = _plan_json("--cluster", cluster)
    assert built.pop("name") == f"{whole['compute']['nodes']} x {whole['compute']['node']}"
    whole.pop("name")
    assert built == whole


def test_nodes_scales_the_bill_of_materials_power_and_cost():
    small = _plan_json("--node", "dgx-h100", "--nodes", "64", "--topology", "fat-tree")
    large = _plan_json("--node", "dgx-h100", "--nodes", "128", "--topology", "fat-tree")
    assert (small["compute"]["gpus"], large["compute"]["gpus"]) == (512, 1024)
    assert large["facility"]["power"]["nodes_kw"] == pytest.approx(2 * small["facility"]["power"]["nodes_kw"])
    assert _component(large, "compute") == pytest.approx(2 * _component(small, "compute"))
    assert large["network"]["switch_count"] > small["network"]["switch_count"]
    assert large["facility"]["power"]["it_kw"] > 1.9 * small["facility"]["power"]["it_kw"]
    assert large["cost"]["tco"]["tco_usd_per_year"] > 1.9 * small["cost"]["tco"]["tco_usd_per_year"]


def test_parts_options_reach_the_network_and_storage():
    d = _plan_json("--node", "dgx-h100", "--nodes", "64", "--topology", "fat-tree", "--tiers", "3",
                   "--oversubscription", "1", "--oversubscription", "2", "--storage", "weka")
    default = _plan_json("--node", "dgx-h100", "--nodes", "64")
    assert d["network"]["topology"] == "fat-tree" and default["network"]["topology"] == "rail-optimized"
    links = d["network"]["links"]  # 3 tiers, non-blocking leaves, 2:1 from the spines to the core
    assert links["node-leaf"] == links["leaf-spine"] == 2 * links["spine-core"]
    assert default["network"]["links"]["spine-core"] == 0
    assert d["storage"]["kind"] == "weka" and default["storage"]["kind"] != "weka"


BAD_PARTS = [
    (["--node", "dgx-h10"], "error: --node: unknown node 'dgx-h10'; did you mean 'dgx-h100'?"),
    (["--node", "dgx-h100", "--network-fabric", "ib-nd"],
     "error: --network-fabric: unknown fabric 'ib-nd'; did you mean 'ib-ndr'?"),
    (["--node", "dgx-h100", "--storage", "lustr"], "error: --storage: unknown storage 'lustr'; did you mean 'lustre'?"),
    (["--node", "dgx-h100", "--gpu", "h100-sx"], "error: --gpu: unknown gpu 'h100-sx'; did you mean 'h100-sxm'?"),
    (["--node", "dgx-h100", "--tiers", "4"], "error: --tiers: "),
    (["--node", "dgx-h100", "--oversubscription", "0.5"], "error: --oversubscription: "),
    (["--nodes", "4"], "error: --nodes: the parts options build a cluster from catalog parts; give --node NODE"),
    (["--cluster", "dgx-a100-1k", "--node", "dgx-h100"], "error: give --cluster or a cluster built from parts"),
]


@pytest.mark.parametrize(("argv", "message"), BAD_PARTS, ids=[" ".join(a) for a, _ in BAD_PARTS])
def test_bad_parts_give_one_line_naming_the_option(argv, message):
    r = run_cli("plan", *argv)
    assert r.code == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith(message), r.stderr
