"""Install verification that catches what breaks multi-node jobs: NCCL environment vs the node, GPUDirect RDMA
level, IOMMU, PCIe ACS and MTU; each check with a passing and a failing fixture."""

from __future__ import annotations

import json

from clustertwin.ops.health.check import InstallInputs, check_node
from clustertwin.ops.health.ib import read_sysfs
from clustertwin.ops.health.nccl_env import (
    NetIf,
    acs_findings,
    env_from_file,
    gdr_findings,
    gdr_level,
    iommu_findings,
    mtu_findings,
    parse_selector,
)
from clustertwin.ops.health.topo import parse_topo_matrix
from tests.conftest import FIXTURES

INST = FIXTURES / "ops" / "install"
NEW = {"NCCL_IB_HCA_MISSING", "NCCL_IB_HCA_DOWN", "NCCL_SOCKET_IFNAME_MISSING", "NCCL_SOCKET_IFNAME_DOWN",
       "NCCL_GDR_DISABLED", "NCCL_GDR_WITHOUT_PEERMEM", "NCCL_GDR_LEVEL_INVALID", "NCCL_GDR_NOT_USED", "MTU_MISMATCH",
       "ROCE_MTU_LOW", "IOMMU_TRANSLATING", "PCIE_ACS_ENABLED", "IRQ_AFFINITY_REMOTE"}


def run(case: str, topo: str = "nvidia-smi-topo-m-dgx-h100.txt"):
    d = INST / case
    return check_node(live=False, sysfs_ib=d / "sys-class-infiniband", topo=FIXTURES / "ops" / topo,
                      install=InstallInputs(d / "nccl-env.txt", d / "sys-class-net", d / "proc-cmdline.txt",
                                            d / "lspci-vvv.txt", d / "irq-root"))


def test_passing_node_has_no_install_findings():
    r = run("pass")
    assert not {f.code for f in r.findings} & NEW, [f.code for f in r.findings]


def test_failing_node_names_each_fault_with_evidence():
    by = {f.code: f for f in run("fail").findings}
    assert "'mlx5_4'" in by["NCCL_IB_HCA_MISSING"].title and by["NCCL_IB_HCA_MISSING"].severity == "error"
    assert by["NCCL_IB_HCA_DOWN"].subject == "mlx5_1/1"
    assert "'ib0'" in by["NCCL_SOCKET_IFNAME_MISSING"].title
    assert "ens2f0np0" in by["NCCL_SOCKET_IFNAME_DOWN"].title
    assert "eno1=1500, ens1f0np0=9000" in by["MTU_MISMATCH"].title
    assert by["NCCL_GDR_DISABLED"].evidence[0].text == "NCCL_NET_GDR_LEVEL=LOC"
    assert "intel_iommu=on" in by["IOMMU_TRANSLATING"].title
    irq = by["IRQ_AFFINITY_REMOTE"]
    assert irq.subject == "0000:17:00.0" and "3 of 4" in irq.title and "IRQ 152 -> CPU 4" in irq.evidence[0].text
    acs = by["PCIE_ACS_ENABLED"].evidence[0]
    assert acs.line == 9 and acs.text.startswith("0000:15:01.0: ACSCtl:")
    for code in NEW & set(by):
        assert by[code].action and by[code].evidence


def test_selector_syntax():
    assert parse_selector("=mlx5_0:1,mlx5_1") == (False, True, [("mlx5_0", 1), ("mlx5_1", None)])
    assert parse_selector("^docker,lo")[0] is True
    assert env_from_file("export NCCL_IB_HCA='mlx5'\n# c\nfoo\n") == {"NCCL_IB_HCA": "mlx5"}
    ports = read_sysfs(INST / "pass" / "sys-class-infiniband")
    from clustertwin.ops.health.nccl_env import ib_hca_findings
    assert ib_hca_findings({"NCCL_IB_HCA": "mlx5"}, ports) == []  # prefix: both HCAs
    assert ib_hca_findings({"NCCL_IB_HCA": "=mlx5"}, ports)[0].code == "NCCL_IB_HCA_MISSING"  # exact
    assert ib_hca_findings({"NCCL_IB_HCA": "^mlx5_9"}, ports) == []  # exclusion lists name nothing required


def test_gdr_level_rules():
    assert gdr_level("2") == "PXB" and gdr_level("sys") == "SYS" and gdr_level("far") is None
    topo = parse_topo_matrix((FIXTURES / "ops" / "nvidia-smi-topo-m-dgx-h100.txt").read_text())
    assert gdr_findings({"NCCL_NET_GDR_LEVEL": "PXB"}, topo, {"nvidia", "nvidia_peermem"}, True) == []
    pix = gdr_findings({"NCCL_NET_GDR_LEVEL": "PIX"}, topo, {"nvidia", "nvidia_peermem"}, True)
    assert [f.code for f in pix] == ["NCCL_GDR_NOT_USED"] and "8 GPU(s)" in pix[0].title  # every GPU is PXB
    assert gdr_findings({"NCCL_NET_GDR_LEVEL": "far"}, None, None, True)[0].code == "NCCL_GDR_LEVEL_INVALID"
    nopm = gdr_findings({"NCCL_NET_GDR_LEVEL": "PXB"}, None, {"nvidia"}, True)
    assert [f.code for f in nopm] == ["NCCL_GDR_WITHOUT_PEERMEM"]


def test_iommu_acs_mtu_units():
    assert iommu_findings("ro intel_iommu=on iommu=pt") == [] and iommu_findings("ro quiet") == []
    assert iommu_findings("ro amd_iommu=on")[0].code == "IOMMU_TRANSLATING"
    assert acs_findings("0000:15:01.0 PCI bridge\n\t\tACSCtl:\tSrcValid- ReqRedir- CmpltRedir-\n") == []
    nics = [NetIf("ens1f0np0", True, 1500, "s"), NetIf("ens2f0np0", True, 1500, "s")]
    low = mtu_findings(nics, {}, {"ens1f0np0": "mlx5_0", "ens2f0np0": "mlx5_1"})
    assert [f.code for f in low] == ["ROCE_MTU_LOW", "ROCE_MTU_LOW"]  # equal MTUs, but too small for RoCE
    assert mtu_findings([NetIf("ens1f0np0", True, 9000, "s"), NetIf("eno1", True, 1500, "s")], {},
                        {"ens1f0np0": "mlx5_0"}) == []  # management NIC outside NCCL's selection: not compared


def test_cpu_list_and_missing_irq_files(tmp_path):
    from clustertwin.ops.health.irq_affinity import cpu_list, irq_findings

    assert cpu_list("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11} and cpu_list("x,2") == {2}
    assert irq_findings(tmp_path) == []  # nothing readable: nothing claimed


def test_cli_install_options(cli):
    d = INST / "fail"
    res = cli("node", "check", "--offline", "--sysfs-ib", str(d / "sys-class-infiniband"), "--nccl-env",
              str(d / "nccl-env.txt"), "--sysfs-net", str(d / "sys-class-net"), "--cmdline",
              str(d / "proc-cmdline.txt"), "--lspci", str(d / "lspci-vvv.txt"), "--json")
    assert res.code == 0, res.stderr
    assert NEW & {f["code"] for f in json.loads(res.stdout)["findings"]} >= {"NCCL_IB_HCA_MISSING", "MTU_MISMATCH"}
    assert cli("node", "check", "--offline", "--nccl-env", str(d / "nope.txt")).code == 2
