"""Port counters sampled twice (ethtool -S of a ConnectX-7 RoCE port, perfquery -x of an InfiniBand port) and
``diagnose --counters``: packet loss is named from a failing log + lossy counters, never from a clean pair."""

from __future__ import annotations

import json

import pytest

from clustertwin.errors import SpecError
from clustertwin.inputs import RowDamage
from clustertwin.ops.diagnosis.diagnose import diagnose
from clustertwin.ops.health.netloss import network_diagnosis, scan_symptoms
from clustertwin.ops.health.port_counters import judge, parse_counters, port_delta, read_counters
from tests.conftest import FIXTURES

C = FIXTURES / "ops" / "counters"
NET = FIXTURES / "ops" / "netloss"
ETH_B, ETH_LOSS, ETH_OK = (C / f"ethtool-S-ens1f0np0-{s}.txt" for s in ("before", "after-loss", "after-clean"))
IB_B, IB_LOSS, IB_OK = (C / f"perfquery-x-mlx5_0-{s}.txt" for s in ("before", "after-loss", "after-clean"))


def codes(findings):
    return {f.code: f for f in findings}


def test_parsers_read_both_formats():
    e = read_counters(ETH_B)
    assert e.kind == "ethtool" and e.values["rx_prio3_pause_duration"] == 88213 and e.port_hint is None
    assert e.lines["rx_discards_phy"] == 46  # 1-based, after the "NIC statistics:" header
    p = read_counters(IB_B)
    assert p.kind == "perfquery" and p.port_hint == "lid 20 port 1"
    assert p.values["PortXmitWait"] == 18331 and "PortSelect" not in p.values and "CounterSelect2" not in p.values
    old = parse_counters((FIXTURES / "ops" / "perfquery-mlx5_3.txt").read_text())  # plain perfquery
    assert old.values["PortXmitDiscards"] == 41


def test_parser_errors_are_one_line():
    with pytest.raises(SpecError, match="neither 'ethtool -S' nor 'perfquery'"):
        parse_counters("hello world\n", "x.txt")
    with pytest.raises(SpecError, match="line 2: rx_discards_phy"):
        parse_counters("NIC statistics:\n     rx_discards_phy: 1.5.5\n", "x.txt")
    dmg = RowDamage()
    s = parse_counters("NIC statistics:\n     rx_discards_phy: 1.5.5\n     rx_packets: 3\n", "x.txt", dmg)
    assert s.values == {"rx_packets": 3} and dmg.total == 1
    with pytest.raises(SpecError, match="perfquery output, but"):
        port_delta(read_counters(ETH_B), read_counters(IB_B), 60)
    with pytest.raises(SpecError, match="interval-s"):
        port_delta(read_counters(IB_B), read_counters(IB_OK), 0)


def test_rates_and_thresholds_roce():
    v = judge(port_delta(read_counters(ETH_B), read_counters(ETH_LOSS), 60, "ens1f0np0"))
    by = codes(v.findings)
    assert by["PORT_DISCARDS"].severity == "error"  # 38,411 / 60 s = 640/s > 10/s
    assert "640/s" in by["PORT_DISCARDS"].title and v.loss["rx_discards_phy"] == 38411
    assert "16.5%" in by["PFC_PAUSE"].title  # 9,874,310 us of pause in 60 s
    assert by["PFC_PAUSE_STORM"].severity == "warning"  # warning events only
    assert by["ROCE_ECN_CNP"].severity == "info"
    clean = judge(port_delta(read_counters(ETH_B), read_counters(ETH_OK), 60, "ens1f0np0"))
    assert not clean.bad and [f.code for f in clean.findings] == ["ROCE_ECN_CNP"]  # DCQCN at work is no fault
    slow = judge(port_delta(read_counters(ETH_B), read_counters(ETH_LOSS), 86400, "ens1f0np0"))
    assert codes(slow.findings)["PORT_DISCARDS"].severity == "warning"  # same drops over a day: below 10/s


def test_rates_and_thresholds_ib():
    v = judge(port_delta(read_counters(IB_B), read_counters(IB_LOSS), 60))
    by = codes(v.findings)
    assert v.port == "lid 20 port 1"
    assert by["PORT_PHY_ERRORS"].severity == "error" and "237/s" in by["PORT_PHY_ERRORS"].title
    assert by["PORT_DISCARDS"].severity == "error" and "PortXmitDiscards +4,417" in by["PORT_DISCARDS"].title
    assert not judge(port_delta(read_counters(IB_B), read_counters(IB_OK), 60)).findings
    # a counter cleared between samples (perfquery -R) is reported and its later value used
    reset = judge(port_delta(read_counters(IB_LOSS), read_counters(IB_B), 60))
    assert "COUNTERS_RESET" in codes(reset.findings)


def test_symptom_scanner_formats():
    lines = ["x NCCL WARN NET/IB : Got completion from peer 10.0.1.12<48133> with error 12, opcode 0",
             "x NCCL WARN NET/IB: Got completion from peer 10.0.2.29<1> with status=IBV_WC_RETRY_EXC_ERR(12) "
             "opcode=IBV_WC_RDMA_WRITE(1) vendor_err=129 hca mlx5_0",
             "x NET/IB: Got completion from peer 10.0.2.29<1> with status=IBV_WC_WR_FLUSH_ERR(5) hca mlx5_0",
             "ibv_poll_cq: transport retry counter exceeded",
             "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE)",
             "step 1 | loss 2.0"]
    s = scan_symptoms(lines, "f.log")
    assert [x.kind for x in s] == ["retry_exceeded", "retry_exceeded", "retry_exceeded", "watchdog_timeout"]
    assert s[1].hca == "mlx5_0" and s[0].peer == "10.0.1.12<48133>"


def test_diagnose_names_packet_loss_from_log_and_counters():
    f, bad = network_diagnosis([NET / "rank16-node021.log"], ETH_B, ETH_LOSS, "ens1f0np0", 60)
    top = f[0]
    assert bad == 0 and top.code == "PACKET_LOSS" and top.severity == "error"
    assert top.title.startswith("packet loss / congestion on port ens1f0np0:")
    assert "rx_discards_phy +38,411" in top.title and "hca mlx5_0" in top.title
    assert top.evidence[0].line == 6  # the IBV_WC_RETRY_EXC_ERR line, not the flush that follows
    f, _ = network_diagnosis([FIXTURES / "ops" / "logs"], IB_B, IB_LOSS, "mlx5_0/1", 60)
    assert codes(f)["PACKET_LOSS"].title.startswith("packet loss / congestion on port mlx5_0/1")


def test_clean_pairs_name_no_loss():
    # failing log + clean counters: the loss is elsewhere; never PACKET_LOSS, never critical
    for logs, b, a in ((NET / "rank16-node021.log", ETH_B, ETH_OK), (FIXTURES / "ops" / "logs", IB_B, IB_OK)):
        f, _ = network_diagnosis([logs], b, a, "p", 60)
        assert {x.code for x in f} <= {"NET_PORT_CLEAN", "ROCE_ECN_CNP"}
        assert codes(f)["NET_PORT_CLEAN"].severity == "info"
    # clean log + clean counters: nothing at all
    f, _ = network_diagnosis([NET / "clean-rank0.log"], IB_B, IB_OK, "p", 60)
    assert f == []
    # clean log + lossy counters: the counter findings only, no joined diagnosis
    f, _ = network_diagnosis([NET / "clean-rank0.log"], IB_B, IB_LOSS, "p", 60)
    assert "PACKET_LOSS" not in codes(f) and "PORT_DISCARDS" in codes(f)


def test_no_false_criticals_on_existing_log_set():
    before = {(x.code, x.severity) for x in diagnose([FIXTURES / "ops" / "logs"]).findings}
    for b, a in ((IB_B, IB_OK), (ETH_B, ETH_OK), (IB_B, IB_LOSS), (ETH_B, ETH_LOSS)):
        f, _ = network_diagnosis([FIXTURES / "ops" / "logs"], b, a, "p", 60)
        assert not [x for x in f if x.severity == "critical"]
    assert ("IB_COMPLETION_ERROR", "error") in before


def test_new_nccl_completion_format_reaches_the_ib_rule():
    r = diagnose([NET / "rank16-node021.log"])
    assert "12" in codes(r.findings)["IB_COMPLETION_ERROR"].title


def test_cli_counters(cli):
    args = ["diagnose", str(NET / "rank16-node021.log"), "--counters", str(ETH_B), str(ETH_LOSS),
            "--port", "ens1f0np0", "--interval-s", "60", "--json"]
    res = cli(*args)
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert set(data) == {"findings", "files_read", "lines_read", "files_skipped"}
    assert data["findings"][0]["code"] == "PACKET_LOSS"
    assert cli("diagnose", str(NET), "--port", "x").code == 2
    assert cli("diagnose", str(NET), "--counters", str(ETH_B), str(IB_B)).code == 2
    assert cli("diagnose", str(NET), "--counters", str(ETH_B), str(ETH_OK), "--interval-s", "-1").code == 2


def test_live_sampling_takes_two_samples(tmp_path):
    texts = iter([ETH_B.read_text(), ETH_LOSS.read_text()])
    ib = tmp_path / "ib" / "mlx5_0" / "ports" / "1" / "counters"
    ib.mkdir(parents=True)
    (ib / "port_xmit_discards").write_text("7\n")
    from clustertwin.ops.health.netloss import sample_live

    f = sample_live(tmp_path / "ib", ["ens1f0np0"], 0.01, lambda _iface: next(texts))
    assert {x.subject for x in f if x.code == "PORT_DISCARDS"} == {"ens1f0np0"}  # the IB port did not change
    assert sample_live(tmp_path / "none", [], 0.01, lambda _i: None) == []
