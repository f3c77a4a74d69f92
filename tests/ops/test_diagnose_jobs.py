"""diagnose groups a job's findings by job and rank in causal order, says "rank N" for ranks, and reads dirty
inputs without silent loss: UTF-16 logs (by BOM), binary files (skipped and counted), malformed OOM figures,
CR-only metrics CSVs."""

from __future__ import annotations

import codecs
import json

from clustertwin.ops.diagnosis.diagnose import diagnose
from tests.conftest import FIXTURES

OPS = FIXTURES / "ops"
JOB = OPS / "job-5150"


def test_first_oom_then_the_ranks_that_timed_out():
    r = diagnose([JOB])
    chain = next(f for f in r.findings if f.code == "JOB_FAILURE_CHAIN")
    assert chain.subject == "job 5150" and chain.severity == "error"
    assert chain.title == ("job 5150: CUDA out of memory on rank 7 first, then NCCL collective timeout on ranks "
                           "12,13, then teardown on rank 0")
    assert "fix the first failure (CUDA out of memory on rank 7)" in chain.action
    assert [e.line for e in chain.evidence] == [8, 9, 12]
    oom = next(f for f in r.findings if f.code == "CUDA_OOM")
    assert oom.subject == "job 5150" and "rank 7 (GPU 7)" in oom.title
    timeout = next(f for f in r.findings if f.code == "NCCL_TIMEOUT")
    assert timeout.subject == "job 5150" and timeout.title.endswith("on 2 rank(s): 12,13")


def test_order_without_time_stamps_follows_the_failure_chain(tmp_path):
    log = tmp_path / "slurm-77.out"
    log.write_text("[rank3]: Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLGATHER, "
                   "NumelIn=1, NumelOut=8, Timeout(ms)=600000) ran for 600001 milliseconds before timing out.\n"
                   "[rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n", encoding="utf-8")
    chain = next(f for f in diagnose([log]).findings if f.code == "JOB_FAILURE_CHAIN")
    assert chain.title.startswith("job 77: uncorrectable ECC error on rank 1 first, then NCCL collective timeout")
    assert chain.severity == "critical"


def test_two_jobs_are_not_mixed(tmp_path):
    for job, rank in (("101", 2), ("102", 5)):
        (tmp_path / f"slurm-{job}.out").write_text(
            f"[rank{rank}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
            "capacity of 79.15 GiB of which 10.00 MiB is free.\n", encoding="utf-8")
    ooms = [f for f in diagnose([tmp_path]).findings if f.code == "CUDA_OOM"]
    assert sorted((f.subject, f.title.split(":")[1].strip()) for f in ooms) == [
        ("job 101", "rank 2 (GPU 0)"), ("job 102", "rank 5 (GPU 0)")]


def test_utf16_logs_are_read_and_binary_files_counted(tmp_path, cli):
    text = (JOB / "slurm-5150.out").read_text(encoding="utf-8")
    (tmp_path / "slurm-5150.out").write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    (tmp_path / "core.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    r = diagnose([tmp_path])
    assert r.files_read == 1 and r.files_skipped == 1
    codes = {f.code for f in r.findings}
    assert {"CUDA_OOM", "NCCL_TIMEOUT", "JOB_FAILURE_CHAIN", "BINARY_SKIPPED"} <= codes
    skipped = next(f for f in r.findings if f.code == "BINARY_SKIPPED")
    assert skipped.severity == "warning" and "core.bin" in skipped.evidence[0].file
    res = cli("diagnose", str(tmp_path), "--json")
    assert res.code == 0 and json.loads(res.stdout)["files_skipped"] == 1
    only_binary = tmp_path / "b"
    only_binary.mkdir()
    (only_binary / "x.dat").write_bytes(b"\0" * 64)
    r = diagnose([only_binary])
    assert r.files_read == 0 and [f.code for f in r.findings] == ["BINARY_SKIPPED"]  # never 0 files silently


def test_malformed_oom_figures_are_counted_not_crashing(tmp_path, cli):
    log = tmp_path / "bad.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.2.3 GiB. GPU 0 has a total "
                   "capacity of 79.15 GiB of which 3.06 MiB is free.\n"
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                   f"capacity of {'9' * 400} GiB of which 3.06 MiB is free.\n", encoding="utf-8")
    res = cli("diagnose", str(log), "--json")
    assert res.code == 0, res.stderr
    d = json.loads(res.stdout)
    assert [f["code"] for f in d["findings"]] == ["MALFORMED_LINES"] and "2 malformed" in d["findings"][0]["title"]


def test_cr_only_metrics_csv(tmp_path):
    rows = ["timestamp,gpu_util_pct,iowait_pct"] + [f"{i},{10 if i % 2 else 95},{35 if i % 2 else 1}"
                                                   for i in range(8)]
    csv_path = tmp_path / "metrics.csv"
    csv_path.write_bytes("\r".join(rows).encode() + b"\r")
    r = diagnose([csv_path])
    stall = next(f for f in r.findings if f.code == "INPUT_PIPELINE_STALL")
    assert "4 of 8 samples" in stall.title
