"""``node check --level 3``: one real container run through the engine a job would use.

With GPUs: ``podman run --rm --device nvidia.com/gpu=all IMAGE nvidia-smi -L`` (CDI, as the NVIDIA Container
Toolkit documents it) or ``docker run --rm --gpus all IMAGE nvidia-smi -L``; the GPUs listed inside must be the
GPUs the host has. Without a GPU the container runs ``true``: the runtime is proven, GPU injection is reported
as not tested (never as passed). The image must be present locally (``--pull never``: nothing is downloaded)
and the container gets no network (``--network none``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass

from clustertwin.ops.findings import Evidence, Finding

RUN_TIMEOUT_S = 180.0
ENGINES = ("podman", "docker")
_GPU_LINE_RE = re.compile(r"^GPU \d+: ", re.MULTILINE)


@dataclass(frozen=True)
class RunResult:
    engine: str
    image: str
    command: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_command(engine: str, image: str, gpu_count: int) -> list[str]:
    """The command line of the check (see the module docstring)."""
    gpu = (["--device", "nvidia.com/gpu=all"] if engine == "podman" else ["--gpus", "all"]) if gpu_count else []
    inner = ["nvidia-smi", "-L"] if gpu_count else ["true"]
    return [engine, "run", "--rm", "--pull", "never", "--network", "none", *gpu, image, *inner]


def pick_engine(preferred: str | None = None) -> str | None:
    """The engine to run with: ``preferred`` if installed, else the first of podman, docker on PATH."""
    for e in ([preferred] if preferred else list(ENGINES)):
        if shutil.which(e):
            return e
    return None


def run_container(engine: str, image: str, gpu_count: int, timeout_s: float = RUN_TIMEOUT_S) -> RunResult:
    cmd = run_command(engine, image, gpu_count)
    exe = shutil.which(engine)
    if exe is None:
        return RunResult(engine, image, cmd, 127, "", f"{engine}: not found")
    try:
        p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, errors="replace", timeout=timeout_s,
                           check=False)
    except subprocess.TimeoutExpired:
        return RunResult(engine, image, cmd, 124, "", f"timed out after {timeout_s:g} s")
    except OSError as e:
        return RunResult(engine, image, cmd, 126, "", str(e))
    return RunResult(engine, image, cmd, p.returncode, p.stdout, p.stderr)


def run_findings(r: RunResult, gpu_count: int) -> list[Finding]:
    """What the run shows: the runtime works (GPU injection tested or explicitly not), or why it failed."""
    shown = " ".join(r.command)
    if r.returncode != 0:
        why = next((ln.strip() for ln in r.stderr.splitlines() if ln.strip().lower().startswith("error")),
                   (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1])
        return [Finding("error", "CONTAINER_RUN_FAILED", f"{r.engine} could not run {r.image}: {why}",
                        (Evidence(shown, None, why[:300]),),
                        "run the command by hand; 'unresolvable CDI devices' = regenerate the CDI spec; "
                        "'unsatisfied condition: cuda>=' = the image needs a newer driver (compatibility matrix); "
                        "permission errors = the engine's user namespace/cgroup setup", subject=r.engine)]
    if not gpu_count:
        return [Finding("info", "CONTAINER_RUN_NO_GPU", f"{r.engine} ran a container ({r.image}); GPU injection not "
                        "tested: no NVIDIA GPU on this host", (Evidence(shown, None, "exit status 0"),),
                        "none on a CPU-only node; on a GPU node rerun with the GPU visible", subject=r.engine)]
    seen = len(_GPU_LINE_RE.findall(r.stdout))
    first = (r.stdout.strip().splitlines() or [""])[0]
    if seen != gpu_count:
        return [Finding("error", "CONTAINER_GPU_MISSING", f"the container saw {seen} of the host's {gpu_count} "
                        "GPU(s)", (Evidence(shown, None, first[:300]),), "regenerate the CDI spec (nvidia-ctk cdi "
                        "generate) and check NVIDIA_VISIBLE_DEVICES / the runtime's mode", subject=r.engine)]
    return [Finding("info", "CONTAINER_RUN_OK", f"{r.engine} container sees all {gpu_count} GPU(s) ({r.image})",
                    (Evidence(shown, None, first[:300]),), "none", subject=r.engine)]


def image_cuda(engine: str, image: str) -> str | None:
    """``CUDA_VERSION`` from the image's environment (``ENGINE image inspect``); None when absent or unreadable."""
    exe = shutil.which(engine)
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, "image", "inspect", "--format", "{{json .Config.Env}}", image], capture_output=True,
                           text=True, errors="replace", timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"CUDA_VERSION=(\d+\.\d+(?:\.\d+)?)", p.stdout) if p.returncode == 0 else None
    return m.group(1) if m else None
