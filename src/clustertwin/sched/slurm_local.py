"""A throw-away multi-node Slurm on localhost for the simulator cross-check.

One ``slurmctld`` and one ``slurmd -N vnK`` per virtual node, all on 127.0.0.1 with their own ports,
spool, state and log directories under a temporary directory, so that it runs next to (and never
touches) a Slurm the host already runs (``/etc/slurm``). Each virtual node declares ``CPUs`` and
``Gres=gpu:G`` (``SlurmdParameters=config_overrides``: the host's real CPU count does not matter);
the GPUs are GRES with stand-in device files (character devices 1:3, the numbers of ``/dev/null``),
because Slurm drops file-less ``gpu`` GRES ("Removing file-less GPU"), and nothing opens them.

Scheduling is configured to mirror the simulator's ``backfill`` policy (FIFO + EASY):
``PriorityType=priority/basic`` (job id order = submit order), ``SchedulerType=sched/backfill`` with
``bf_job_part_count_reserve=1`` (only the top pending job of the partition gets a reservation; any
later job that does not delay it may start: EASY), ``bf_interval`` and ``bf_resolution`` as given, and
``sched_min_interval=0`` (the main scheduler runs on every submission and completion).

Records come from ``jobcomp/filetxt`` and ``sacct --completion`` (no slurmdbd needed). Daemons are
stopped by the process ids in their pid files when the context exits. Needs root and a running munged.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from clustertwin.errors import SpecError

SLURM_BINARIES = ("slurmctld", "slurmd", "sbatch", "sacct", "squeue", "sinfo", "scontrol", "munge")
DEFAULT_BF_INTERVAL_S = 1
"""Backfill pass interval used by the cross-check (Slurm's default is 30 s)."""
DEFAULT_BF_RESOLUTION_S = 1
"""Backfill time resolution used by the cross-check (Slurm's default is 60 s)."""
DEFAULT_STARTUP_TIMEOUT_S = 60.0


def missing_binaries() -> list[str]:
    """Slurm/munge programs absent from ``PATH`` (or ``/usr/sbin``)."""
    out = []
    for b in SLURM_BINARIES:
        if shutil.which(b) is None and not Path("/usr/sbin", b).exists():
            out.append(b)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _free_port_range(n: int) -> int:
    """First of ``n`` consecutive free TCP ports on 127.0.0.1."""
    for _ in range(200):
        base = _free_port()
        if base + n >= 65535:
            continue
        socks = []
        try:
            for k in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + k))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SpecError("no free range of TCP ports for the local Slurm")


@dataclass
class LocalSlurm:
    """A running local Slurm; use :func:`start` as a context manager."""

    root: Path
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    partition: str = "xc"
    bf_interval_s: int = DEFAULT_BF_INTERVAL_S
    bf_resolution_s: int = DEFAULT_BF_RESOLUTION_S
    env: dict[str, str] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def node_names(self) -> list[str]:
        return [f"vn{k}" for k in range(1, self.nodes + 1)]

    def run(self, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        """Run a Slurm client command against this instance; return stdout."""
        try:
            p = subprocess.run(list(args), capture_output=True, text=True, env=self.env, timeout=timeout,
                               cwd=self.root)
        except subprocess.TimeoutExpired:
            raise SpecError(f"'{args[0]}' did not answer within {timeout:g} s") from None
        if check and p.returncode != 0:
            raise SpecError(f"'{' '.join(args[:3])} ...' failed: {(p.stderr or p.stdout).strip()[:300]}")
        return p.stdout

    # ------------------------------------------------------------------ lifecycle
    def write_config(self) -> None:
        r = self.root
        for d in ("state", "spool", "log", "dev"):
            (r / d).mkdir(parents=True, exist_ok=True)
        for name in self.node_names:
            (r / "spool" / name).mkdir(exist_ok=True)
        for i in range(self.gpus_per_node):
            dev = r / "dev" / f"gpu{i}"
            if not dev.exists():
                os.mknod(dev, 0o600 | 0o020000, os.makedev(1, 3))  # character device 1:3
        ctld_port = _free_port()
        node_base = _free_port_range(self.nodes)
        last = self.nodes
        sched = (f"bf_interval={self.bf_interval_s},bf_resolution={self.bf_resolution_s},"
                 "bf_job_part_count_reserve=1,bf_continue,sched_min_interval=0")
        self.conf.write_text(f"""\
# local Slurm for the clustertwin scheduler cross-check (temporary; removed afterwards)
ClusterName=ctcrosscheck
SlurmctldHost=localhost
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool/%n
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.%n.pid
SlurmctldLogFile={r}/log/slurmctld.log
SlurmdLogFile={r}/log/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters={sched}
PriorityType=priority/basic
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc={r}/jobcomp.log
ReturnToService=2
MinJobAge=3600
KillWait=2
NodeName=vn[1-{last}] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[{node_base}-{node_base + last - 1}] \
CPUs={self.cpus_per_node} RealMemory=1000 Gres=gpu:{self.gpus_per_node} State=UNKNOWN
PartitionName={self.partition} Nodes=vn[1-{last}] Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
""")
        (r / "gres.conf").write_text(f"Name=gpu File={r}/dev/gpu[0-{self.gpus_per_node - 1}]\n")
        (r / "jobcomp.log").touch()
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}

    def _pids(self) -> list[int]:
        out = []
        for f in sorted(self.root.glob("*.pid")):
            with contextlib.suppress(OSError, ValueError):
                out.append(int(f.read_text().strip()))
        return out

    def start(self, timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> None:
        self.write_config()
        self._daemon("slurmctld", "-f", str(self.conf))
        for name in self.node_names:
            self._daemon("slurmd", "-f", str(self.conf), "-N", name)
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False).split()
            idle = [s for s in states[1::2] if s == "idle"]
            if len(idle) == self.nodes:
                return
            if time.monotonic() > deadline:
                raise SpecError(f"local Slurm not ready after {timeout_s:g} s (node states {states[1::2]}); "
                                f"see {self.root}/log")
            time.sleep(0.5)

    def _daemon(self, prog: str, *args: str) -> None:
        exe = shutil.which(prog) or f"/usr/sbin/{prog}"
        try:
            p = subprocess.run([exe, *args], capture_output=True, text=True, env=self.env, timeout=30)
        except subprocess.TimeoutExpired:
            raise SpecError(f"{prog} did not detach within 30 s (munged not answering? ci/slurm-setup.sh starts "
                            f"it); see {self.root}/log") from None
        if p.returncode != 0:
            raise SpecError(f"{prog} did not start: {(p.stderr or p.stdout).strip()[:300]}")

    def stop(self) -> None:
        pids = self._pids()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, 15)
        deadline = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except (ProcessLookupError, PermissionError):
                    break
                time.sleep(0.1)

    def __enter__(self) -> LocalSlurm:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def munge_running() -> bool:
    """Whether munged answers: a credential made by ``munge -n`` decodes with ``unmunge``."""
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start(nodes: int, gpus_per_node: int, *, cpus_per_node: int | None = None,
          bf_interval_s: int = DEFAULT_BF_INTERVAL_S, bf_resolution_s: int = DEFAULT_BF_RESOLUTION_S,
          timeout_s: float = DEFAULT_STARTUP_TIMEOUT_S) -> LocalSlurm:
    """Start a local Slurm of ``nodes`` virtual nodes with ``gpus_per_node`` GRES GPUs each."""
    missing = missing_binaries()
    if missing:
        raise SpecError(f"Slurm is not installed (missing {', '.join(missing)}); run ci/slurm-setup.sh as root")
    if os.geteuid() != 0:
        raise SpecError("the local Slurm cross-check must run as root (it starts slurmctld and slurmd)")
    if nodes < 1 or gpus_per_node < 1:
        raise SpecError("the local Slurm needs nodes >= 1 and gpus_per_node >= 1")
    if not munge_running():
        raise SpecError("munged is not running (the local Slurm authenticates with it): run ci/slurm-setup.sh "
                        "as root, or start munged")
    root = Path(tempfile.mkdtemp(prefix="ct-slurm-"))
    inst = LocalSlurm(root, nodes, gpus_per_node, cpus_per_node or gpus_per_node, bf_interval_s=bf_interval_s,
                      bf_resolution_s=bf_resolution_s)
    try:
        inst.start(timeout_s)
    except BaseException:
        inst.__exit__(None, None, None)
        raise
    return inst
