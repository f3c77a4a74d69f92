"""The container runtime checks: NVIDIA Container Toolkit, CDI specs vs the GPUs and driver, engines, enroot +
pyxis, the image-CUDA forward-compat rows, and one real rootless container run where a runtime works."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile

import pytest

from clustertwin.ops.health import container_run as ctrun
from clustertwin.ops.health.check import ContainerInputs, check_node
from clustertwin.ops.health.container import (
    check_containers,
    docker_engine,
    image_cuda_findings,
    parse_ctk_version,
)
from tests.conftest import FIXTURES

CT = FIXTURES / "ops" / "containers"
H100 = FIXTURES / "ops" / "nvidia-smi-q-h100.txt"  # 2 GPUs, driver 550.54.15
CODES = {"CTK_MISSING", "CTK_VULNERABLE", "CDI_SPEC_MISSING", "CDI_GPU_MISMATCH", "CDI_DRIVER_STALE",
         "CDI_LIBRARY_MISSING", "ENGINE_NO_NVIDIA_RUNTIME", "ENROOT_NO_NVIDIA_HOOK", "PYXIS_MISSING",
         "CONTAINER_NO_GPU_PATH"}


def run(case: str, **kw):
    d = CT / case
    return check_node(live=False, smi_q=H100, containers=ContainerInputs(
        kw.get("root", d / "root"), d / "nvidia-ctk-version.txt", d / "docker-info.json"))


def test_passing_node():
    r = run("pass")
    assert not {f.code for f in r.findings} & CODES
    assert r.containers is not None and r.containers.ctk_version == "1.17.8"
    assert r.containers.engines == {"docker": "27.5.1, nvidia runtime", "containerd": "nvidia runtime",
                                    "enroot": "nvidia hook", "pyxis": "spank plugin configured"}
    assert r.containers.specs[0].gpus == ["0", "1"]


def test_failing_node():
    by = {}
    for f in run("fail").findings:
        by.setdefault(f.code, []).append(f)
    assert "8 GPU(s), the node has 2" in by["CDI_GPU_MISMATCH"][0].title
    assert "libcuda.so.535.129.03" in by["CDI_DRIVER_STALE"][0].title and "550.54.15" in by["CDI_DRIVER_STALE"][0].title
    assert "1.14.3" in by["CTK_VULNERABLE"][0].title
    assert {f.title.split()[0] for f in by["ENGINE_NO_NVIDIA_RUNTIME"]} == {"docker", "containerd"}
    assert by["CONTAINER_NO_GPU_PATH"][0].severity == "error"
    assert "ENROOT_NO_NVIDIA_HOOK" in by and "PYXIS_MISSING" in by
    for fs in by.values():
        assert all(f.action and f.evidence for f in fs)


def test_missing_library_and_missing_spec(tmp_path):
    root = tmp_path / "root"
    shutil.copytree(CT / "pass" / "root" / "etc", root / "etc")  # the spec, without the driver libraries
    by = {f.code for f in run("pass", root=root).findings}
    assert "CDI_LIBRARY_MISSING" in by
    shutil.rmtree(root / "etc" / "cdi")
    assert "CDI_SPEC_MISSING" in {f.code for f in run("pass", root=root).findings}


def test_parsers_and_cpu_only_node():
    assert parse_ctk_version((CT / "pass" / "nvidia-ctk-version.txt").read_text()) == "1.17.8"
    assert docker_engine((CT / "docker-info-no-daemon.json").read_text()) == "CLI only, daemon unreachable"
    assert docker_engine("not json") is None
    rep = check_containers(CT / "fail" / "root", live=False, gpu_count=0)  # no GPU: engine gaps are no fault
    assert not {f.code for f in rep.findings} & {"ENGINE_NO_NVIDIA_RUNTIME", "CONTAINER_NO_GPU_PATH", "CTK_MISSING",
                                                  "CDI_GPU_MISMATCH", "CDI_SPEC_MISSING"}
    assert check_node(live=False, smi_q=H100).containers is None  # offline, nothing given: not checked


def test_image_cuda_forward_compat_rows():
    assert image_cuda_findings("550.54.15", "12.4", ["h100-sxm"], "img") == []
    assert image_cuda_findings("550.54.15", "12.8", ["h100-sxm"], "img")[0].code == "IMAGE_CUDA_MINOR_COMPAT"
    fwd = image_cuda_findings("550.54.15", "13.0", ["h100-sxm"], "img")[0]
    assert fwd.code == "IMAGE_CUDA_FORWARD_COMPAT" and fwd.severity == "warning"
    bad = image_cuda_findings("550.54.15", "13.0", [None], "img")[0]  # a GPU outside the data-center catalog
    assert bad.code == "IMAGE_CUDA_UNSUPPORTED" and bad.severity == "error"


def test_run_rules():
    assert ctrun.run_command("podman", "img", 8)[-4:] == ["nvidia.com/gpu=all", "img", "nvidia-smi", "-L"]
    assert ctrun.run_command("docker", "img", 0) == ["docker", "run", "--rm", "--pull", "never", "--network", "none",
                                                      "img", "true"]
    ok = ctrun.RunResult("podman", "img", ["podman"], 0, "GPU 0: NVIDIA H100 (UUID: GPU-1)\nGPU 1: NVIDIA H100\n", "")
    assert ctrun.run_findings(ok, 2)[0].code == "CONTAINER_RUN_OK"
    assert ctrun.run_findings(ok, 8)[0].code == "CONTAINER_GPU_MISSING"
    fail = ctrun.RunResult("podman", "img", ["podman"], 126, "", "Error: unresolvable CDI devices nvidia.com/gpu=all")
    assert "unresolvable CDI devices" in ctrun.run_findings(fail, 2)[0].title


def _probe_image(tmp_path) -> tuple[str, str]:
    """A one-binary image (busybox) imported into podman's local storage; skips where that cannot be done."""
    busybox = shutil.which("busybox")
    if shutil.which("podman") is None or busybox is None:
        pytest.skip("podman or busybox not installed (apt-get install podman busybox-static)")
    tar = tmp_path / "rootfs.tar"
    with tarfile.open(tar, "w") as t:
        t.add(busybox, "bin/busybox")
        for name in ("sh", "true"):
            info = tarfile.TarInfo(f"bin/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            t.addfile(info)
    image = "localhost/clustertwin-probe:test"
    p = subprocess.run(["podman", "import", str(tar), image], capture_output=True, text=True, timeout=120,
                       check=False)
    if p.returncode != 0:
        pytest.skip(f"podman cannot store images here: {p.stderr.strip().splitlines()[-1:]}")
    return image, p.stdout.strip().splitlines()[-1].removeprefix("sha256:")


def test_real_rootless_container_check(tmp_path):
    image, image_id = _probe_image(tmp_path)
    try:
        r = ctrun.run_container("podman", image, gpu_count=0)
    finally:  # leave no image behind
        subprocess.run(["podman", "rmi", "-f", image_id], capture_output=True, timeout=60, check=False)
    found = ctrun.run_findings(r, 0)
    if r.returncode != 0:  # the check names the failure; the runtime itself does not work on this host
        assert found[0].code == "CONTAINER_RUN_FAILED" and found[0].evidence[0].text
        pytest.skip(f"podman installed but cannot run containers here: {found[0].title}")
    assert [f.code for f in found] == ["CONTAINER_RUN_NO_GPU"]
    assert "GPU injection not tested: no NVIDIA GPU" in found[0].title


def test_cli(cli):
    d = CT / "fail"
    res = cli("node", "check", "--offline", "--smi-q", str(H100), "--container-root", str(d / "root"),
              "--ctk-version", str(d / "nvidia-ctk-version.txt"), "--docker-info", str(d / "docker-info.json"),
              "--image-cuda", "13.0", "--json")
    assert res.code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["containers"]["ctk_version"] == "1.14.3"
    assert {"CDI_GPU_MISMATCH", "IMAGE_CUDA_FORWARD_COMPAT"} <= {f["code"] for f in data["findings"]}
    assert cli("node", "check", "--offline", "--container-engine", "lxc").code == 2


def test_cli_text_lists_the_runtime(cli):
    d = CT / "pass"
    res = cli("node", "check", "--offline", "--smi-q", str(H100), "--container-root", str(d / "root"),
              "--ctk-version", str(d / "nvidia-ctk-version.txt"), "--docker-info", str(d / "docker-info.json"))
    assert res.code == 0, res.stderr
    assert "NVIDIA Container Toolkit" in res.stdout and "27.5.1, nvidia runtime" in res.stdout
