"""The alert rules under Prometheus' own tool: ``promtool check rules`` on the generated file, and ``promtool
test rules`` over a series recorded from the exporter's real /metrics output (a GPU whose uncorrectable-ECC
count is already 2 when scraping starts): the ECC alert fires at the first evaluation, not only on a rise.
promtool comes from the Debian package ``prometheus`` (installed by .ci/run); without it the tests skip
locally and fail in CI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import urllib.request

import pytest
import yaml

from clustertwin.ops.telemetry import exporter as ex
from tests.ops.test_exporter import FakeBackend


@pytest.fixture(scope="module")
def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("CI must run promtool (apt-get install prometheus)")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return exe


def scrape() -> str:
    server, thread = ex.start(FakeBackend(), "node017", port=0, addr="127.0.0.1", environ={})
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}/metrics", timeout=10) as resp:
            return resp.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=5)


_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})? (\S+)$")


def recorded_series(body: str, repeats: int = 30) -> list[dict[str, str]]:
    """Every sample of one scrape as a promtool input series held constant for ``repeats`` steps."""
    out = []
    for line in body.splitlines():
        m = _SAMPLE.match(line)
        if m:
            out.append({"series": f"{m.group(1)}{m.group(2) or ''}", "values": f"{float(m.group(3)):g}x{repeats}"})
    return out


def test_promtool_check_rules_passes(cli, promtool, tmp_path):
    rules = tmp_path / "rules.yml"
    assert cli("exporter", "--rules", str(rules)).code == 0
    res = subprocess.run([promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout + res.stderr


def test_ecc_count_present_at_start_fires(cli, promtool, tmp_path):
    rules = tmp_path / "rules.yml"
    assert cli("exporter", "--rules", str(rules)).code == 0
    body = scrape()
    series = recorded_series(body)
    assert any(s["series"].startswith("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{") and 'gpu="1"' in s["series"]
               and s["values"] == "2x30" for s in series)
    gpu1 = {"gpu": "1", "UUID": "GPU-bbbb", "device": "nvidia1", "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "node017", "hpc_job": "", "pod": "", "namespace": "", "container": ""}
    gpu1 = {k: v for k, v in gpu1.items() if v}  # promtool drops empty labels from alert label sets
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": series,
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "GpuUncorrectableEcc", "exp_alerts": [{
                "exp_labels": {**gpu1, "severity": "critical"},
                "exp_annotations": {"summary": "GPU 1 of node017 has 2 uncorrectable ECC errors since its last "
                                               "reset: drain and reset it"}}]},
            # the counter did not rise, but it appeared non-zero: the "new" rule fires too
            {"eval_time": "1m", "alertname": "GpuUncorrectableEccNew", "exp_alerts": [{
                "exp_labels": {**gpu1, "severity": "critical"},
                "exp_annotations": {"summary": "new uncorrectable ECC errors on GPU 1 of node017 (job )"}}]},
            # ... and stops being new after the window, while the level alert keeps firing
            {"eval_time": "20m", "alertname": "GpuUncorrectableEccNew", "exp_alerts": []},
            {"eval_time": "1m", "alertname": "GpuLastXidCritical", "exp_alerts": [{
                "exp_labels": {**gpu1, "severity": "critical"},
                "exp_annotations": {"summary": "GPU 1 of node017: last Xid 79 needs a reset or RMA"}}]},
            {"eval_time": "6m", "alertname": "GpuHot", "exp_alerts": [{
                "exp_labels": {**gpu1, "severity": "warning"},
                "exp_annotations": {"summary": "GPU 1 of node017 above 85 C"}}]},
        ]}]}
    path = tmp_path / "ecc_at_start.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # the old rule (increase() only) would not have fired on this series
    old = {"groups": [{"name": "old", "rules": [{"alert": "Old", "expr":
                                                  "increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[10m]) > 0"}]}]}
    (tmp_path / "old.yml").write_text(yaml.safe_dump(old), encoding="utf-8")
    test["rule_files"] = [str(tmp_path / "old.yml")]
    test["tests"][0]["alert_rule_test"] = [{"eval_time": "5m", "alertname": "Old", "exp_alerts": []}]
    path.write_text(yaml.safe_dump(test, sort_keys=False), encoding="utf-8")
    res = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr


def test_exporter_rules_into_a_missing_directory_is_one_line(cli, tmp_path):
    res = cli("exporter", "--rules", str(tmp_path / "nope" / "rules.yml"))
    assert res.code == 2 and len(res.stderr.strip().splitlines()) == 1 and "does not exist" in res.stderr
    ok = cli("exporter", "--rules", str(tmp_path / "r.yml"), "--json")
    assert ok.code == 0 and '"alert": "GpuUncorrectableEcc"' in ok.stdout


def test_job_labels_from_slurm_and_kubernetes(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "1").write_text("81234\n", encoding="utf-8")
    env = {"SLURM_JOB_ID": "555", "POD_NAME": "train-0", "POD_NAMESPACE": "ml", "CONTAINER_NAME": "pytorch"}
    lab = ex.job_labels(env, None, [0, 1])
    assert lab[0] == {"hpc_job": "555", "pod": "train-0", "namespace": "ml", "container": "pytorch"}
    mapped = ex.job_labels({}, jobs, [0, 1])
    assert mapped[1]["hpc_job"] == "81234" and mapped[0]["hpc_job"] == ""
    body = ex.exposition(ex.registry_for(FakeBackend(), "n1", env)).decode()
    assert 'hpc_job="555"' in body and 'pod="train-0"' in body and 'namespace="ml"' in body
    snap = ex.snapshot(FakeBackend(), "n1", env)
    assert any(s["name"] == "DCGM_FI_DEV_XID_ERRORS" and s["value"] == 79.0 for s in snap)
