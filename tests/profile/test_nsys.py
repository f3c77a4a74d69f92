"""The Nsight Systems SQLite reader on an export built here with Nsight Systems' table and column names:
two GPUs, two NVTX steps, a GEMM, an NCCL all-reduce partly under it, a copy, a sync; terms by hand."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from clustertwin.profile.report import profile
from tests.conftest import run_cli

US = 1000  # ns


def _export(path: Path, *, with_memcpy: bool = True) -> Path:
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INT, end INT, deviceId INT, contextId INT, streamId INT,
            correlationId INT, globalPid INT, demangledName INT, shortName INT, mangledName INT);
        CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INT, end INT, eventClass INT, globalTid INT,
            correlationId INT, nameId INT, returnValue INT);
        CREATE TABLE NVTX_EVENTS (start INT, end INT, eventType INT, rangeId INT, category INT, color INT,
            text TEXT, globalTid INT, endGlobalTid INT, textId INT, domainId INT);
    """)
    if with_memcpy:
        db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INT, end INT, deviceId INT, contextId INT, "
                   "streamId INT, correlationId INT, globalPid INT, bytes INT, copyKind INT)")
        db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?,?,?,?)",
                   (90 * US, 100 * US, 0, 1, 7, 5, 1, 4096, 1))
    db.executemany("INSERT INTO StringIds VALUES (?,?)", [
        (1, "sm90_xmma_gemm_bf16bf16_bf16f32"), (2, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)"),
        (3, "cudaLaunchKernel"), (4, "cudaDeviceSynchronize"), (5, "ProfilerStep#7")])
    kernels = [(0, 40, 1, 1), (30, 60, 2, 2), (0, 50, 1, 3)]  # start us, end us, name, correlation
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?,?,?,?,?,?,?,?,?,?)", [
        (s * US, e * US, 0 if c < 3 else 1, 1, 7, c, 1, n, n, n) for s, e, n, c in kernels])
    db.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?)", [
        (0, 1 * US, 1, 1, 1, 3, 0), (1 * US, 2 * US, 1, 1, 2, 3, 0), (2 * US, 3 * US, 1, 1, 3, 3, 0),
        (70 * US, 80 * US, 1, 1, 4, 4, 0)])
    db.executemany("INSERT INTO NVTX_EVENTS VALUES (?,?,?,?,?,?,?,?,?,?,?)", [
        (0, 100 * US, 59, None, None, None, None, 1, 1, 5, 0),
        (100 * US, 150 * US, 59, None, None, None, "ProfilerStep#8", 1, 1, None, 0)])
    db.commit()
    db.close()
    return path


def test_two_gpus_two_steps_by_hand(tmp_path: Path):
    rep = profile([_export(tmp_path / "report.sqlite")])
    assert [r.rank for r in rep.ranks] == [0, 1]
    s7, s8 = rep.ranks[0].steps
    assert (s7["name"], s8["name"]) == ("ProfilerStep#7", "ProfilerStep#8")
    assert s7["wall_s"] == pytest.approx(100e-6)
    assert s7["compute_by_class_s"]["gemm"] == pytest.approx(40e-6)
    assert s7["comm_s"] == pytest.approx(30e-6) and s7["exposed_comm_s"] == pytest.approx(20e-6)
    assert s7["memcpy_s"] == pytest.approx(10e-6) and s7["gpu_busy_s"] == pytest.approx(70e-6)
    assert s7["idle_s"] == pytest.approx(30e-6) and s7["rank_wait_s"] == pytest.approx(10e-6)
    assert s7["collectives"] == {"unknown": {"count": 1, "bytes": 0}}
    assert s8["gpu_busy_s"] == 0 and s8["partial"]  # the last step saw no device work: flagged, not dropped
    assert rep.ranks[1].steps[0]["compute_s"] == pytest.approx(50e-6)
    assert rep.ranks[0].hta["comm_comp_overlap"] == pytest.approx(1 / 3)


def test_step_range_and_missing_table(tmp_path: Path):
    p = _export(tmp_path / "r.sqlite", with_memcpy=False)
    rep = profile([p], step_range="ProfilerStep#8")
    assert [s["name"] for s in rep.ranks[0].steps] == ["ProfilerStep#8"]
    out = run_cli("profile", str(p), "--json")
    assert out.code == 0


def test_a_damaged_sqlite_file_is_one_error_line(tmp_path: Path):
    good = _export(tmp_path / "r.sqlite").read_bytes()
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(good[:100] + b"\0" * 50)
    r = run_cli("profile", str(bad))
    assert r.code == 2 and r.stderr.count("error:") == 1 and "Traceback" not in r.stderr
