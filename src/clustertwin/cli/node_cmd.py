"""``clustertwin node check|bench|validate``: real-node health, micro-benchmarks and staged validation."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import typer

from clustertwin.cli.common import JsonOpt, console, print_json, table
from clustertwin.cli.terminal import safe_text, styled
from clustertwin.errors import SpecError
from clustertwin.ops.calibration.calibrate import calibration_from_bench, write_calibration
from clustertwin.ops.findings import Finding, worst
from clustertwin.ops.health.check import CheckReport, ContainerInputs, InstallInputs, check_node
from clustertwin.ops.perf import bench as bm
from clustertwin.ops.perf import bench_collectives as bc
from clustertwin.ops.perf import bench_storage
from clustertwin.ops.perf.validate import validate
from clustertwin.units import GIB, MIB, parse_size

node_app = typer.Typer(help="Real nodes: health check, micro-benchmarks, staged validation.", no_args_is_help=True)
SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "cyan"}


def findings_table(findings: list[Finding], title: str = "findings") -> Any:
    t = table(title, ["severity", "code", "finding", "evidence", "action"], [])
    for col in t.columns:
        col.justify = "left"
    for f in findings:
        ev = f.evidence[0] if f.evidence else None
        where = (f"{ev.file}:{ev.line} " if ev and ev.line else (f"{ev.file}: " if ev else "")) + (ev.text if ev else "")
        if len(f.evidence) > 1:
            where += f" (+{len(f.evidence) - 1} more)"
        t.add_row(safe_text(f.severity, SEVERITY_STYLE[f.severity]), safe_text(f.code), safe_text(f.title),
                  safe_text(where), safe_text(f.action))
    return t


def _check_json(r: CheckReport) -> dict[str, Any]:
    return {
        "host": None if r.host is None else {**asdict(r.host), "cpu_flags": None},
        "gpu_source": r.gpu_source, "gpu_source_note": r.gpu_source_note,
        "driver_version": r.driver_version, "cuda_driver_version": r.cuda_driver_version,
        "gpus": [{**asdict(g), "catalog_id": cid} for g, cid in zip(r.gpus, r.gpu_catalog_ids, strict=True)],
        "topology": None if r.topology is None else {
            "devices": r.topology.devices, "nic_names": r.topology.nic_names,
            "links": {f"{a},{b}": v for (a, b), v in r.topology.links.items()},
            "gpu_nearest_nic": {g: r.topology.nearest_nics(g) for g in r.topology.gpus}},
        "ib_ports": [asdict(p) for p in r.ib_ports],
        "xid_events": [asdict(e) for e in r.xid_events],
        "kernel_log_source": r.kernel_log_source,
        "worst": r.worst,
        "findings": [f.to_dict() for f in r.findings],
        "diag": None if r.diag is None else {k: v for k, v in asdict(r.diag).items() if k != "findings"},
        "containers": None if r.containers is None else {
            "ctk_version": r.containers.ctk_version, "engines": r.containers.engines,
            "cdi_specs": [asdict(s) for s in r.containers.specs]},
    }


def _print_check(r: CheckReport) -> None:
    h = r.host
    rows = [] if h is None else [
        ["host", f"{h.hostname} ({h.os_name}, kernel {h.kernel})"],
        ["CPU", f"{h.cpu_model}: {h.sockets} socket(s), {h.physical_cores} cores, {h.logical_cpus} threads"],
        ["memory", f"{h.memory_total_bytes / GIB:.1f} GiB"],
        ["container runtime", h.container_runtime],
        ["torch / CUDA runtime / NCCL", f"{h.torch_version or '-'} / {h.torch_cuda_version or '-'} / "
                                        f"{h.nccl_version or '-'}"]]
    if h is None:
        rows.append(["host", "not read (--offline: only the given files)"])
    rows += [["GPU source", r.gpu_source_note],
            ["driver / CUDA (driver)", f"{r.driver_version or '-'} / {r.cuda_driver_version or '-'}"],
            ["kernel log", r.kernel_log_source or "not read"]]
    rows += [[f"NIC {n.name}", f"{'up' if n.is_up else 'down'}, "
              f"{f'{n.speed_gbit_per_s:g} Gbit/s' if n.speed_gbit_per_s else 'speed n/a'}, MTU {n.mtu}"]
             for n in (h.nics if h else [])]
    rows += [[f"disk {d.mountpoint}", f"{d.device} {d.fstype}, {d.total_bytes / GIB:,.0f} GiB "
              f"({d.free_bytes / GIB:,.0f} free)"] for d in (h.disks if h else [])]
    console.print(table("node", ["item", "value"], rows))
    if r.gpus:
        console.print(table("GPUs", ["#", "name", "catalog", "PCIe", "mem GiB", "temp C", "power W", "ECC unc vol",
                                     "throttle"],
                            [[g.index, g.name, cid or "-",
                              f"Gen{g.pcie_gen_current} x{g.pcie_width_current} / Gen{g.pcie_gen_max} "
                              f"x{g.pcie_width_max}", (g.memory_total_bytes or 0) / GIB, g.temperature_c, g.power_w,
                              g.ecc_volatile_uncorrected, ",".join(g.throttle_reasons) or "-"]
                             for g, cid in zip(r.gpus, r.gpu_catalog_ids, strict=True)]))
    if r.containers is not None and (r.containers.engines or r.containers.ctk_version or r.containers.specs):
        console.print(table("containers", ["item", "value"], [["NVIDIA Container Toolkit",
                            r.containers.ctk_version or "not found"], *[[f"CDI spec {s.path}", f"{s.kind}: "
                            f"{len(s.gpus)} GPU device(s)"] for s in r.containers.specs],
                            *[[k, v] for k, v in r.containers.engines.items()]]))
    if r.ib_ports:
        console.print(table("network ports", ["port", "state", "physical", "rate Gb/s", "link layer"],
                            [[p.name, p.state, p.phys_state, p.rate_gbit_per_s, p.link_layer] for p in r.ib_ports]))
    console.print(findings_table(r.findings))
    if r.diag is not None:
        for i, bw in r.diag.h2d.items():
            console.print(f"GPU {i} host->device {bw['h2d_gb_per_s']:.1f} GB/s, device->host "
                          f"{bw['d2h_gb_per_s']:.1f} GB/s; memory test "
                          f"{r.diag.memtest[i]['bytes_tested'] / GIB:.0f} GiB, {r.diag.memtest[i]['mismatches']} bad")
        for i, st in r.diag.stress.items():
            console.print(f"GPU {i} stress {st['seconds']:.0f} s: {st['tflops']:.0f} TFLOP/s, max power "
                          f"{st['power_w_max']} W, min SM clock {st['sm_clock_mhz_min']} MHz, reasons "
                          f"{','.join(st['throttle_reasons']) or '-'}")
        if r.diag.dcgmi:
            bad = [d for d in r.diag.dcgmi if d["status"].lower() in ("fail", "warn")]
            console.print(f"dcgmi diag: {len(r.diag.dcgmi)} results, {len(bad)} fail/warn")
        for why in r.diag.skipped:
            console.print(f"skipped: {why}")


def _inventory(directory: Path, json_out: bool) -> None:
    from clustertwin.ops.health.inventory import read_inventory

    inv = read_inventory(directory)
    if json_out:
        print_json({"nodes": [{"name": n.name, "file": n.file, **n.values} for n in inv.nodes],
                    "unreadable": inv.unreadable, "findings": [f.to_dict() for f in inv.findings],
                    "worst": worst(inv.findings)})
        return
    keys = list(inv.nodes[0].values)
    console.print(table(f"inventory {directory} ({len(inv.nodes)} nodes)", ["node", *keys],
                        [[n.name, *[n.values[k] or "-" for k in keys]] for n in inv.nodes]))
    console.print(findings_table(inv.findings))


@node_app.command("check")
def check_command(
    node: str | None = typer.Option(None, "--node", help="Catalog node id to compare GPU count/model with."),
    smi_q: Path | None = typer.Option(None, "--smi-q", help="Saved 'nvidia-smi -q' output instead of the live GPUs."),
    topo: Path | None = typer.Option(None, "--topo", help="Saved 'nvidia-smi topo -m' output."),
    kernel_log: Path | None = typer.Option(None, "--kernel-log", help="Saved kernel log (dmesg -T / journalctl -k)."),
    ibstat: Path | None = typer.Option(None, "--ibstat", help="Saved 'ibstat' output instead of sysfs."),
    perfquery: list[str] = typer.Option([], "--perfquery", help="HCA=FILE: saved 'perfquery' of that port."),
    offline: bool = typer.Option(False, "--offline", help="Only the saved files given; nothing live."),
    level: int = typer.Option(1, "--level", min=1, max=3, help="DCGM-style level: 1 deployment checks, 2 + GPU "
                              "memory test and host<->device bandwidth, 3 + power/clock stress (dcgmi diag -r N)."),
    stress_s: float = typer.Option(20.0, "--stress-s", min=1.0, max=3600.0, help="Level 3 stress duration, s."),
    dcgmi_json: Path | None = typer.Option(None, "--dcgmi-json", help="Saved 'dcgmi diag -r N -j' output."),
    lsmod: Path | None = typer.Option(None, "--lsmod", help="Saved 'lsmod' (or /proc/modules) for peermem."),
    sysfs_ib: Path | None = typer.Option(None, "--sysfs-ib", help="Copy of /sys/class/infiniband instead of sysfs."),
    nccl_env: Path | None = typer.Option(None, "--nccl-env", help="A job's saved 'env' (KEY=VALUE lines) for "
                                         "the NCCL_IB_HCA / NCCL_SOCKET_IFNAME / NCCL_NET_GDR_LEVEL checks."),
    sysfs_net: Path | None = typer.Option(None, "--sysfs-net", help="Copy of /sys/class/net (operstate, mtu)."),
    cmdline: Path | None = typer.Option(None, "--cmdline", help="Saved /proc/cmdline (IOMMU settings)."),
    lspci: Path | None = typer.Option(None, "--lspci", help="Saved 'lspci -vvv' as root (PCIe ACS)."),
    irq_root: Path | None = typer.Option(None, "--irq-root", help="Copy of proc/interrupts, proc/irq/*/"
                                         "smp_affinity_list and the NUMA sysfs files (NIC IRQ affinity)."),
    container_root: Path | None = typer.Option(None, "--container-root", help="Copy of the container runtime's "
                                               "files (etc/cdi, var/run/cdi, etc/containerd, etc/enroot, ...)."),
    ctk_version: Path | None = typer.Option(None, "--ctk-version", help="Saved 'nvidia-ctk --version'."),
    docker_info: Path | None = typer.Option(None, "--docker-info", help="Saved 'docker info --format json'."),
    container_image: str | None = typer.Option(None, "--container-image", help="Level 3: run this local image "
                                               "(nvidia-smi -L inside it with GPUs, 'true' without)."),
    container_engine: str | None = typer.Option(None, "--container-engine", help="podman or docker (default: "
                                                "the first installed)."),
    image_cuda: str | None = typer.Option(None, "--image-cuda", help="The image's CUDA version (e.g. 12.8) for "
                                          "the driver forward-compat check (live: read from the image)."),
    inventory: Path | None = typer.Option(None, "--inventory", help="Directory of 'node check --json' files of "
                                          "many nodes: version skew and compatibility across them."),
    sample_counters: float = typer.Option(0.0, "--sample-counters", min=0.0, max=3600.0, help="Live: sample "
                                          "every IB/RoCE port's counters twice this many seconds apart (packet "
                                          "loss, congestion); 0 = off."),
    json_out: bool = JsonOpt,
) -> None:
    """Check drivers, GPUs, topology, Xid events, network ports, the NCCL environment and the container runtime;
    every finding with evidence and action."""
    if inventory is not None:
        _inventory(inventory, json_out)
        return
    if container_engine not in (None, "podman", "docker"):
        raise SpecError(f"--container-engine takes podman or docker (got '{container_engine}')")
    pq: dict[str, Path] = {}
    for item in perfquery:
        hca, sep, file = item.partition("=")
        if not sep or not hca or not file:
            raise SpecError(f"--perfquery expects HCA=FILE (got '{item}')")
        pq[hca] = Path(file)
    r = check_node(smi_q=smi_q, topo=topo, kernel_log=kernel_log, ibstat=ibstat, perfquery=pq,
                   sysfs_ib=sysfs_ib, expect_node=node, live=not offline, modules=lsmod, level=level,
                   dcgmi_json=dcgmi_json, stress_s=stress_s,
                   install=InstallInputs(nccl_env, sysfs_net, cmdline, lspci, irq_root),
                   containers=ContainerInputs(container_root, ctk_version, docker_info, container_image,
                                              container_engine, image_cuda), sample_counters_s=sample_counters)
    if json_out:
        print_json(_check_json(r))
    else:
        _print_check(r)


@node_app.command("bench")
def bench_command(
    gemm_n: int | None = typer.Option(None, "--gemm-n", help="GEMM size n (n x n x n); default 8192 GPU, 2048 CPU."),
    precision: list[str] = typer.Option([], "--precision", "-p", help="GEMM precision(s): fp32, tf32, bf16, fp16."),
    memory_mib: int = typer.Option(256, "--memory-mib", help="Host copy array size, MiB."),
    cpu: str | None = typer.Option(None, "--cpu", help="Catalog CPU id for the host-memory peak."),
    ops: list[str] = typer.Option(["all_reduce", "all_gather", "reduce_scatter"], "--op", help="Collectives."),
    min_bytes: str = typer.Option("8K", "--min-bytes", "-b"),
    max_bytes: str | None = typer.Option(None, "--max-bytes", "-e", help="Default 256M NCCL, 16M gloo."),
    nprocs: int | None = typer.Option(None, "--nprocs", help="Local ranks (default: GPUs, or 2 on CPU)."),
    storage: Path | None = typer.Option(None, "--storage", help="Directory to benchmark (a temp file is used)."),
    storage_mib: int = typer.Option(1024, "--storage-mib", help="Storage test file size, MiB."),
    iodepth: int = typer.Option(16, "--iodepth", help="Random-read threads."),
    ssd: str | None = typer.Option(None, "--ssd", help="Catalog SSD id to compare storage with."),
    storage_tool: str = typer.Option("auto", "--storage-tool", help="fio, python, or auto (fio when installed)."),
    skip: list[str] = typer.Option([], "--skip", help="Skip parts: gemm, memory, collectives."),
    calibration_out: Path | None = typer.Option(None, "--calibration-out", help="Write a Calibration YAML here."),
    json_out: bool = JsonOpt,
) -> None:
    """GEMM, memory, collective and storage benchmarks, each against its catalog expectation."""
    for part in skip:
        if part not in ("gemm", "memory", "collectives"):
            raise SpecError(f"--skip takes gemm, memory or collectives (got '{part}')")
    gpu_name = None
    torch = bm.import_torch()
    if torch is not None and torch.cuda.is_available():
        gpu_name = torch.cuda.get_device_name(0)
    from clustertwin.ops.health.gpu import catalog_gpu_id
    from clustertwin.ops.health.host import host_info

    h = host_info()
    report = bm.BenchReport(device=f"cuda:0 ({gpu_name})" if gpu_name else f"cpu ({h.cpu_model})",
                            gpu_catalog_id=catalog_gpu_id(gpu_name) if gpu_name else None)
    if "gemm" not in skip:
        report.gemm, sk = bm.gemm(precision or None, gemm_n)
        report.skipped += sk
    if "memory" not in skip:
        from clustertwin.ops.perf.bench_io import stream_triad

        report.memory.append(bm.host_memory_bandwidth(memory_mib * MIB, cpu))
        report.memory.append(stream_triad(max(3, memory_mib) * MIB, cpu))
        dev, reason = bm.device_memory_bandwidth()
        if dev is not None:
            report.memory.append(dev)
        else:
            report.skipped.append(str(reason))
    if "collectives" not in skip:
        sizes = None
        if max_bytes is not None:
            sizes = bc.sweep_sizes(parse_size(min_bytes), parse_size(max_bytes))
        elif min_bytes != "8K":
            raise SpecError("--min-bytes needs --max-bytes")
        report.collectives, sk = bc.collectives(ops, sizes, nprocs)
        report.skipped += sk
    if storage_tool not in ("auto", "fio", "python"):
        raise SpecError(f"--storage-tool takes auto, fio or python (got '{storage_tool}')")
    if storage is not None:
        from clustertwin.ops.perf.bench_io import fio_storage, fio_version

        if storage_tool == "fio" or (storage_tool == "auto" and fio_version() is not None):
            report.storage = fio_storage(storage, storage_mib * MIB, iodepth, ssd)
        else:
            report.storage = bench_storage.storage(storage, storage_mib * MIB, iodepth, ssd)
            if storage_tool == "python":
                report.storage = replace(report.storage, tool="python (os.write/readv, preadv threads; "
                                                              "--storage-tool python)")
    cal = calibration_from_bench(report)
    if calibration_out is not None:
        write_calibration(cal, str(calibration_out))
    if json_out:
        print_json({"device": report.device, "gpu_catalog_id": report.gpu_catalog_id,
                    "gemm": [{**asdict(g), "pct_of_peak": g.pct_of_peak} for g in report.gemm],
                    "memory": [{**asdict(m), "pct_of_peak": m.pct_of_peak} for m in report.memory],
                    "collectives": [{**asdict(c), "avg_busbw_gb_per_s": c.avg_busbw_gb_per_s}
                                    for c in report.collectives],
                    "storage": asdict(report.storage) if report.storage else None,
                    "skipped": report.skipped, "calibration": cal.model_dump(mode="json"),
                    "calibration_file": str(calibration_out) if calibration_out else None})
        return
    console.print(f"device: {report.device}")
    if report.gemm:
        console.print(table("GEMM", ["precision", "n", "TFLOP/s", "peak TFLOP/s", "% of peak", "peak source"],
                            [[g.precision, g.n, g.tflops, g.peak_tflops, g.pct_of_peak, g.peak_source]
                             for g in report.gemm]))
    if report.memory:
        console.print(table("memory bandwidth", ["where", "tool", "bytes", "GB/s", "peak GB/s",
                                                 "% of peak", "peak source"],
                            [[m.where, m.tool, m.bytes_per_copy, m.gb_per_s, m.peak_gb_per_s, m.pct_of_peak,
                              m.peak_source] for m in report.memory]))
    for c in report.collectives:
        console.print(bc.format_nccl_tests(c), markup=False, highlight=False, soft_wrap=True)
    if report.storage:
        st = report.storage
        exp = st.expected
        console.print(table(f"storage {st.path} ({st.file_bytes / MIB:.0f} MiB file, "
                            f"{'O_DIRECT' if st.direct_io else 'page cache dropped'}; {st.tool})",
                            ["test", "measured", "catalog", "% of catalog"],
                            [["seq write GB/s", st.seq_write_gb_per_s, exp.get("seq_write_gb_per_s"),
                              _pct(st.seq_write_gb_per_s, exp.get("seq_write_gb_per_s"))],
                             ["seq read GB/s", st.seq_read_gb_per_s, exp.get("seq_read_gb_per_s"),
                              _pct(st.seq_read_gb_per_s, exp.get("seq_read_gb_per_s"))],
                             [f"rand 4 KiB read IOPS (QD{st.iodepth})", st.rand_read_iops, exp.get("rand_read_iops"),
                              _pct(st.rand_read_iops, exp.get("rand_read_iops"))]]))
    for s_ in report.skipped:
        console.print(f"skipped: {s_}")
    if calibration_out is not None:
        console.print(f"calibration written to {calibration_out}: comm {cal.comm or '{}'}, train {cal.train or '{}'}")


def _pct(measured: float, expected: float | None) -> float | None:
    return None if not expected else 100.0 * measured / expected


@node_app.command("validate")
def validate_command(
    node: str | None = typer.Option(None, "--node", help="Catalog node id (expected GPU count and model)."),
    nodes: int = typer.Option(2, "--nodes", help="Nodes for the multi-node stage command."),
    json_out: bool = JsonOpt,
) -> None:
    """Staged validation: single GPU, single node, then the multi-node command to run on the cluster."""
    if nodes < 2:
        raise SpecError(f"--nodes must be >= 2 for a multi-node stage (got {nodes})")
    r = validate(node, nodes)
    if json_out:
        print_json({"passed": r.passed, "stages": [asdict(s) for s in r.stages],
                    "findings": [f.to_dict() for f in r.check.findings]})
        return
    for i, s in enumerate(r.stages, 1):
        style = {"pass": "green", "fail": "red", "skipped": "yellow", "run-on-cluster": "cyan"}[s.status]
        console.print(styled(f"stage {i} {s.name}: ", (s.status, style), f" ({s.reason})" if s.reason else ""))
        for name, ok, detail in s.checks:
            console.print(f"  {'PASS' if ok else 'FAIL'} {name}: {detail}")
        if s.command:
            console.print(s.command, markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(node_app, name="node")
