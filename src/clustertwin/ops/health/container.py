"""The container runtime every Slurm+pyxis or Kubernetes GPU job runs through: the NVIDIA Container Toolkit, its
CDI specs, the engines and their nvidia runtime, enroot + pyxis, and (level 3) one real container run.

Sources: NVIDIA Container Toolkit documentation ("Installing the NVIDIA Container Toolkit", "Support for
Container Device Interface": ``nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml``, specs read from
``/etc/cdi`` and ``/var/run/cdi``, ``nvidia-ctk cdi list``; "a CDI spec must be regenerated after a driver
upgrade or a GPU/MIG change"), ``nvidia-ctk runtime configure --runtime=docker|containerd|crio`` (the
``nvidia`` runtime entries in ``/etc/docker/daemon.json``, containerd's ``config.toml`` and CRI-O's
``crio.conf.d``), the NVIDIA security bulletins (CVE-2024-0132 fixed in 1.16.2, CVE-2025-23266 fixed in 1.17.8),
NVIDIA enroot (``/etc/enroot/hooks.d/98-nvidia.sh``) and pyxis (a ``spank_pyxis.so`` line in Slurm's
``plugstack.conf``).

Everything is read below a root directory (``/`` on a live node, a copy of the files for a saved check) and
from saved command outputs (``nvidia-ctk --version``, ``docker info --format json``); a live node runs the
commands itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from clustertwin.ops.findings import Evidence, Finding
from clustertwin.ops.health.compat import driver_supports
from clustertwin.ops.health.compat_matrix import GPU_ARCH, IMAGE_ON_DRIVER, image_on_driver, vtuple

CDI_DIRS = ("etc/cdi", "var/run/cdi")
CTK_SAFE_VERSION = "1.17.8"
"""First NVIDIA Container Toolkit release with the fixes of both container-escape bulletins (CVE-2024-0132 in
1.16.2, CVE-2025-23266 in 1.17.8)."""
CMD_TIMEOUT_S = 20.0
RUN_TIMEOUT_S = 120.0
_CTK_VERSION_RE = re.compile(r"NVIDIA Container Toolkit CLI version\s+(\S+)")
_ENGINE_CONFIGS = {
    "docker": ("etc/docker/daemon.json",),
    "containerd": ("etc/containerd/config.toml", "etc/containerd/conf.d/99-nvidia.toml"),
    "cri-o": ("etc/crio/crio.conf", "etc/crio/crio.conf.d/99-nvidia.toml"),
}
_NVIDIA_RUNTIME_RE = {
    "docker": re.compile(r'"nvidia"\s*:\s*\{[^}]*nvidia-container-runtime'),
    "containerd": re.compile(r"runtimes\.[\"']?nvidia[\"']?\]"),
    "cri-o": re.compile(r"crio\.runtime\.runtimes\.nvidia\]"),
}


@dataclass
class CdiSpec:
    path: str
    kind: str
    gpus: list[str]
    """Device names of per-GPU entries (``0``, ``1``, ``GPU-<uuid>``; ``all`` left out)."""
    libraries: list[str] = field(default_factory=list)
    """Host paths of the driver libraries the spec mounts (libcuda, libnvidia-ml)."""


@dataclass
class ContainerReport:
    ctk_version: str | None
    specs: list[CdiSpec]
    engines: dict[str, str]
    """Engine -> how it reaches the GPUs (``nvidia runtime``, ``CDI``, ``no nvidia runtime``, ...)."""
    findings: list[Finding]


def parse_ctk_version(text: str) -> str | None:
    """``NVIDIA Container Toolkit CLI version 1.17.8`` -> ``1.17.8``."""
    m = _CTK_VERSION_RE.search(text)
    return m.group(1) if m else None


def read_cdi_spec(path: Path) -> CdiSpec | None:
    """One CDI spec (YAML or JSON); None when it is not a CDI spec (no ``cdiVersion``/``kind``)."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, yaml.YAMLError):
        return None
    if not isinstance(doc, dict) or "kind" not in doc or "cdiVersion" not in doc:
        return None
    names = [str(d.get("name")) for d in doc.get("devices") or [] if isinstance(d, dict)]
    mounts: list[str] = []
    for edits in [doc.get("containerEdits") or {}, *[d.get("containerEdits") or {} for d in doc.get("devices") or []
                                                     if isinstance(d, dict)]]:
        for m in edits.get("mounts") or [] if isinstance(edits, dict) else []:
            host = str(m.get("hostPath", "")) if isinstance(m, dict) else ""
            if re.search(r"lib(cuda|nvidia-ml)\.so", host):
                mounts.append(host)
    return CdiSpec(str(path), str(doc["kind"]), [n for n in names if n != "all"], sorted(set(mounts)))


def cdi_specs(root: Path) -> list[CdiSpec]:
    out: list[CdiSpec] = []
    for d in CDI_DIRS:
        base = root / d
        if base.is_dir():
            for p in sorted(base.iterdir()):
                if p.suffix in (".yaml", ".yml", ".json") and (spec := read_cdi_spec(p)) is not None:
                    out.append(spec)
    return out


def _run(cmd: list[str], timeout: float = CMD_TIMEOUT_S) -> tuple[int, str, str] | None:
    exe = shutil.which(cmd[0])
    if exe is None:
        return None
    try:
        p = subprocess.run([exe, *cmd[1:]], capture_output=True, text=True, errors="replace", timeout=timeout,
                           check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 124, "", str(e)
    return p.returncode, p.stdout, p.stderr


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def docker_engine(info_text: str | None) -> str | None:
    """How docker reaches the GPUs from ``docker info --format json``; None when the text is not docker info."""
    if info_text is None:
        return None
    try:
        info = json.loads(info_text)
    except json.JSONDecodeError:
        return None
    if not isinstance(info, dict):
        return None
    if info.get("ServerErrors") or not info.get("ServerVersion"):
        return "CLI only, daemon unreachable"
    runtimes = info.get("Runtimes") or {}
    if "nvidia" in runtimes:
        return f"{info['ServerVersion']}, nvidia runtime" + (" (default)" if info.get("DefaultRuntime") == "nvidia"
                                                              else "")
    return f"{info['ServerVersion']}, CDI" if info.get("CDISpecDirs") else f"{info['ServerVersion']}, no nvidia runtime"


def engines(root: Path, live: bool, docker_info: str | None) -> dict[str, str]:
    """Engines present and their nvidia wiring (configuration files under ``root``; live: binaries on PATH)."""
    out: dict[str, str] = {}
    if docker_info is None and live and shutil.which("docker"):
        r = _run(["docker", "info", "--format", "json"])
        docker_info = r[1] if r else None
    if (d := docker_engine(docker_info)) is not None:
        out["docker"] = d
    for eng in ("containerd", "cri-o"):
        texts = [t for p in _ENGINE_CONFIGS[eng] if (t := _read(root / p)) is not None]
        if texts:
            ok = any(_NVIDIA_RUNTIME_RE[eng].search(t) for t in texts)
            out[eng] = "nvidia runtime" if ok else "no nvidia runtime"
    if "docker" not in out and (t := _read(root / "etc/docker/daemon.json")) is not None:
        out["docker"] = "nvidia runtime" if _NVIDIA_RUNTIME_RE["docker"].search(t) else "no nvidia runtime"
    if live and shutil.which("podman"):
        out["podman"] = "CDI"
    if (root / "etc/enroot").is_dir() or (live and shutil.which("enroot")):
        hook = (root / "etc/enroot/hooks.d/98-nvidia.sh").exists()
        out["enroot"] = "nvidia hook" if hook else "no nvidia hook"
    plug = [_read(p) or "" for p in [root / "etc/slurm/plugstack.conf",
                                      *sorted((root / "etc/slurm/plugstack.conf.d").glob("*.conf"))] if p.exists()]
    if any("spank_pyxis.so" in t for t in plug):
        out["pyxis"] = "spank plugin configured"
    return out


def _reaches_gpus(how: str) -> bool:
    return ("nvidia runtime" in how and "no nvidia runtime" not in how) or how.endswith("CDI") or how == "nvidia hook"


def container_findings(ctk_version: str | None, specs: list[CdiSpec], engs: dict[str, str], gpu_count: int,
                       driver: str | None, root: Path, source: str, ctk_checked: bool = True) -> list[Finding]:
    """Findings on the toolkit, CDI specs vs the GPUs and driver present, and engine wiring."""
    out: list[Finding] = []
    if gpu_count == 0 and ctk_version is None and not specs:
        return out
    if ctk_version is None and gpu_count and ctk_checked:
        out.append(Finding("warning", "CTK_MISSING", "NVIDIA Container Toolkit not found (nvidia-ctk): containers "
                           "cannot reach the GPUs", (Evidence(source, None, "nvidia-ctk: not found"),),
                           "install nvidia-container-toolkit from NVIDIA's repository, then 'nvidia-ctk runtime "
                           "configure --runtime=docker|containerd|crio' and 'nvidia-ctk cdi generate "
                           "--output=/etc/cdi/nvidia.yaml'"))
    elif ctk_version is not None and vtuple(ctk_version) < vtuple(CTK_SAFE_VERSION):
        out.append(Finding("warning", "CTK_VULNERABLE", f"NVIDIA Container Toolkit {ctk_version} is older than "
                           f"{CTK_SAFE_VERSION} (container-escape fixes CVE-2024-0132, CVE-2025-23266)",
                           (Evidence(source, None, f"nvidia-ctk version {ctk_version}"),),
                           f"upgrade nvidia-container-toolkit to {CTK_SAFE_VERSION} or later"))
    gpu_specs = [s for s in specs if s.kind == "nvidia.com/gpu"]
    if ctk_version is not None and gpu_count and not gpu_specs:
        out.append(Finding("warning", "CDI_SPEC_MISSING", "no nvidia.com/gpu CDI spec in /etc/cdi or /var/run/cdi: "
                           "podman, CDI-mode runtimes and the device plugin's CDI path find no GPUs",
                           (Evidence(str(root / CDI_DIRS[0]), None, "no spec of kind nvidia.com/gpu"),),
                           "nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml (and again after every driver "
                           "upgrade or GPU/MIG change); or enable nvidia-cdi-refresh.service"))
    for s in gpu_specs:
        indices = [n for n in s.gpus if n.isdigit()]
        if gpu_count and indices and len(indices) != gpu_count:
            out.append(Finding("error", "CDI_GPU_MISMATCH", f"CDI spec lists {len(indices)} GPU(s), the node has "
                               f"{gpu_count}: the spec is stale", (Evidence(s.path, None, "devices: "
                               + ", ".join(s.gpus[:16])),), "regenerate it: nvidia-ctk cdi generate "
                               f"--output={s.path}; containers asking for a missing index fail to start"))
        for lib in s.libraries:
            ver = re.search(r"\.so\.(\d+\.\d+(?:\.\d+)?)$", lib)
            if driver and ver and ver.group(1) != driver:
                out.append(Finding("error", "CDI_DRIVER_STALE", f"CDI spec injects {Path(lib).name}, the host driver "
                                   f"is {driver}: the spec predates a driver upgrade", (Evidence(s.path, None, lib),),
                                   f"regenerate it: nvidia-ctk cdi generate --output={s.path}"))
                break
            if not (root / lib.lstrip("/")).exists():
                out.append(Finding("error", "CDI_LIBRARY_MISSING", f"CDI spec injects {lib}, which does not exist on "
                                   "the host: containers start without the driver library", (Evidence(s.path, None,
                                   lib),), f"regenerate it: nvidia-ctk cdi generate --output={s.path}"))
                break
    for eng, how in engs.items():
        if how.endswith("no nvidia runtime") and gpu_count:
            out.append(Finding("warning", "ENGINE_NO_NVIDIA_RUNTIME", f"{eng} has no nvidia runtime configured",
                               (Evidence(source, None, f"{eng}: {how}"),),
                               f"nvidia-ctk runtime configure --runtime={eng.replace('-', '')} and restart it"))
        if how == "no nvidia hook":
            out.append(Finding("warning", "ENROOT_NO_NVIDIA_HOOK", "enroot is installed without its nvidia hook: "
                               "pyxis jobs see no GPUs", (Evidence(str(root / "etc/enroot/hooks.d"), None,
                               "98-nvidia.sh absent"),), "install enroot's hooks (enroot+caps package) and "
                               "libnvidia-container-tools"))
    if "enroot" in engs and "pyxis" not in engs:
        out.append(Finding("info", "PYXIS_MISSING", "enroot without pyxis: srun --container-image is unavailable",
                           (Evidence(str(root / "etc/slurm/plugstack.conf"), None, "no spank_pyxis.so line"),),
                           "install pyxis and add 'required /usr/lib/x86_64-linux-gnu/slurm/spank_pyxis.so' to "
                           "plugstack.conf (or a plugstack.conf.d file); restart slurmd"))
    if gpu_count and engs and not any(_reaches_gpus(h) for h in engs.values()):
        out.append(Finding("error", "CONTAINER_NO_GPU_PATH", "no container engine on this node can give a container "
                           "the GPUs", (Evidence(source, None, "; ".join(f"{k}: {v}" for k, v in engs.items())),),
                           "configure one: nvidia-ctk runtime configure, or a CDI spec for podman/CDI mode"))
    return out


def check_containers(root: Path | None = Path("/"), *, live: bool = True, ctk_version_text: str | None = None,
                     docker_info: str | None = None, gpu_count: int = 0, driver: str | None = None) -> ContainerReport:
    """The toolkit version (saved ``nvidia-ctk --version`` text, or run live), CDI specs under ``root``, engines
    (``root=None``: no files are read, only the texts given)."""
    source = "nvidia-ctk --version"
    if ctk_version_text is None and live:
        r = _run(["nvidia-ctk", "--version"])
        ctk_version_text = r[1] if r and r[0] == 0 else None
    ctk = parse_ctk_version(ctk_version_text) if ctk_version_text else None
    specs = cdi_specs(root) if root is not None else []
    engs = engines(root, live, docker_info) if root is not None else \
        ({"docker": d} if (d := docker_engine(docker_info)) else {})
    return ContainerReport(ctk, specs, engs, container_findings(ctk, specs, engs, gpu_count, driver,
                                                                root or Path("/"), source,
                                                                live or ctk_version_text is not None))


def image_cuda_findings(driver: str | None, image_cuda: str | None, catalog_ids: list[str | None],
                        image: str) -> list[Finding]:
    """Host driver vs the image's CUDA (``CUDA_VERSION`` of NVIDIA's images) by the forward-compat rules
    (:data:`clustertwin.ops.health.compat_matrix.IMAGE_ON_DRIVER`); data-center = a catalog GPU."""
    if not driver or not image_cuda:
        return []
    c = driver_supports(driver, image_cuda)
    if c.status == "unknown":
        return []
    row = image_on_driver(c.status, bool(catalog_ids) and all(i in GPU_ARCH for i in catalog_ids))
    sev, why = IMAGE_ON_DRIVER[row]
    if row == "ok":
        return []
    label = f"image {image}" if image else "the image"
    return [Finding(sev, f"IMAGE_CUDA_{row.upper().replace('-', '_')}", f"{label} (CUDA {image_cuda}) on "
                    f"driver {driver}: {why}", (Evidence("image CUDA_VERSION", None, f"CUDA {image_cuda}, driver "
                    f"{driver}, minimum {c.required or '?'}"),), f"upgrade the driver to >= {c.required} or use an "
                    "image built for an older CUDA" + ("" if row == "unsupported" else "; or keep the "
                    "cuda-compat package in the image"), subject=image or None)]
