"""Property tests of the output-safety layer: every user string of `deploy slurm`, `deploy k8s`, the HTML
report and the exporter, filled with every Unicode line break, control and shell metacharacter, leaves the
generated text with one document, the same keys and the same shell words as a benign string does."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from clustertwin import specs
from clustertwin.deploy import DeploySpec, Prediction, plan_job
from clustertwin.deploy.k8s import render_manifests
from clustertwin.deploy.slurm import render_sbatch
from clustertwin.ops.health.gpu import GpuInfo
from clustertwin.ops.telemetry import exporter as ex
from clustertwin.safety import LINE_BREAKS, UNSAFE_IN_LINE, one_line, script_json

HOSTILE_CHARS = sorted(set(UNSAFE_IN_LINE + LINE_BREAKS + " \t$;'\"`\\|&()<>{}#*?~=:-!%/" + "\u2028\u2029\x85"))
hostile = st.text(alphabet=st.sampled_from(HOSTILE_CHARS + list("aZ9_.")), min_size=0, max_size=24).map(
    lambda s: "a" + s)  # never empty after strip (script, image must be non-empty)
# DeploySpec rejects NUL in argv-bound strings (no exec can carry it); names may hold it
argv_safe = hostile.map(lambda s: s.replace("\x00", ""))
PRED = Prediction(step_time_s=7.8, mfu=0.5, tokens_per_s=1.07e6, memory_gib_per_gpu=41.9, memory_capacity_gib=74.5,
                  fits=True, tokens=1.4e12, days=15.2, gpu_hours=373_888.0, source="given layout")
CLUSTER = specs.load(specs.ClusterSpec, "ref-1k-h100", kind="cluster")
MODEL = specs.load(specs.ModelSpec, "llama3-8b", kind="model")
LAYOUT = specs.ParallelismSpec(tp=8, dp=2, global_batch=16)
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plan(name: str, cname: str, job: str, script: str, args: tuple[str, ...], ckpt: str, image: str,
          hca: str | None = None):
    """The job plan. An image or NCCL list outside its grammar is refused at the input (deploy/grammars.py:
    it never reaches a generated file); the plan then carries benign ones, so the other strings are tested."""
    try:
        opts = DeploySpec(job_name=job, script=script, script_args=args, checkpoint_dir=ckpt, image=image,
                          ib_hca=hca, socket_ifname=hca)
    except ValidationError as e:
        assert {err["loc"][0] for err in e.errors()} <= {"image", "ib_hca", "socket_ifname"}, e
        opts = DeploySpec(job_name=job, script=script, script_args=args, checkpoint_dir=ckpt, image="i",
                          ib_hca="h", socket_ifname="h")
    return plan_job(CLUSTER.model_copy(update={"name": cname}), MODEL.model_copy(update={"name": name}), LAYOUT,
                    opts, PRED)


BENIGN = dict(name="m", cname="c", job="j", script="s", args=("x", "y"), ckpt="k", image="i", hca="h")


def _shell_words(text: str) -> list[str]:
    # bash drops backslash-newline outside quotes (line continuation); done here before lexing, and on the
    # expected words too (inside single quotes bash keeps it, so both sides change alike)
    lex = shlex.shlex(_join(text), posix=True, punctuation_chars=";&|()<>")
    lex.whitespace_split = True
    lex.commenters = "#"
    return list(lex)


def _join(text: str) -> str:
    return text.replace("\\\n", " ")


def _keys(doc: object) -> object:
    """The key structure of a YAML document (values dropped, list lengths kept)."""
    if isinstance(doc, dict):
        return {k: _keys(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_keys(v) for v in doc]
    return None


def _key_tree_sans_values(doc: object) -> object:
    # annotation/label *values* and env values hold user strings; the key set must not change
    return _keys(doc)


BASE_K8S = render_manifests(_plan(**BENIGN))
BASE_SLURM = render_sbatch(_plan(**BENIGN))


@seed(22)
@SETTINGS
@given(name=hostile, cname=hostile, job=argv_safe, script=argv_safe, a1=argv_safe, ckpt=argv_safe, image=argv_safe)
def test_k8s_manifest_stays_one_document_per_kind(name, cname, job, script, a1, ckpt, image) -> None:
    text = render_manifests(_plan(name, cname, job, script, (a1, "y"), ckpt, image, "h"))
    docs = [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]
    base = [d for d in yaml.load_all(BASE_K8S, Loader=LOADER) if d is not None]
    assert [d["kind"] for d in docs] == [d["kind"] for d in base]
    assert [_key_tree_sans_values(d) for d in docs] == [_key_tree_sans_values(d) for d in base]
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert len(header) == len([ln for ln in BASE_K8S.splitlines() if ln.startswith("#")])
    # the user's argument reaches the container verbatim (k8s $$ escaping undone), as one list item
    cmd = docs[0]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"] \
        if "pytorchReplicaSpecs" in docs[0]["spec"] else None
    if cmd is not None:
        flat = json.dumps(cmd)
        assert json.dumps(a1.replace("$", "$$"))[1:-1] in flat


@seed(22)
@SETTINGS
@given(name=hostile, cname=hostile, job=argv_safe, script=argv_safe, a1=argv_safe, a2=argv_safe, ckpt=argv_safe,
       hca=argv_safe)
def test_sbatch_has_no_new_shell_word(name, cname, job, script, a1, a2, ckpt, hca) -> None:
    text = render_sbatch(_plan(name, cname, job, script, (a1, a2), ckpt, "i", hca))
    assert len(_shell_words(text)) == len(_shell_words(BASE_SLURM))
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert len(header) == len([ln for ln in BASE_SLURM.splitlines() if ln.startswith("#")])
    words = _shell_words(text)
    # each argument is one word (an argument equal to the checkpoint dir is written as "$CHECKPOINT_DIR")
    assert all(_join(a) in words for a in (a1, a2, script) if a != ckpt)


class _Backend:
    def __init__(self, gpu_name: str, uuid: str) -> None:
        self.gpu_name, self.uuid = gpu_name, uuid

    def gpus(self) -> list[GpuInfo]:
        return [GpuInfo(index=0, uuid=self.uuid, name=self.gpu_name, memory_total_bytes=1, memory_used_bytes=0,
                        utilization_gpu_pct=1.0, temperature_c=40.0, power_w=100.0)]

    def xid_counts(self) -> dict[tuple[int, int], int]:
        return {(0, 79): 1}


@seed(22)
@SETTINGS
@given(host=hostile, gpu=hostile, uuid=hostile)
def test_exporter_scrape_keeps_its_lines_and_labels(host, gpu, uuid) -> None:
    def scrape(h: str, g: str, u: str) -> str:
        return generate_latest(ex.registry_for(_Backend(g, u), h)).decode()

    text, base = scrape(host, gpu, uuid), scrape("h", "g", "u")
    assert text.count("\n") == base.count("\n")
    fams = list(text_string_to_metric_families(text))
    assert [f.name for f in fams] == [f.name for f in text_string_to_metric_families(base)]
    hostnames = {s.labels["Hostname"] for f in fams for s in f.samples if "Hostname" in s.labels}
    assert hostnames == {one_line(host)}


@seed(22)
@settings(max_examples=300, deadline=None)
@given(s=st.text(alphabet=st.sampled_from(HOSTILE_CHARS + list("ab<>&/script")), max_size=40))
def test_helpers(s: str) -> None:
    line = one_line(s)
    assert len(line.splitlines()) <= 1 and not any(c in line for c in UNSAFE_IN_LINE)
    docs = list(yaml.safe_load_all(yaml.safe_dump({"k": s}, allow_unicode=True)))
    assert docs == [{"k": s}]  # the emitter escapes every break: one scalar, one document
    js = str(script_json(json.dumps(s)))
    assert "</" not in js and "\u2028" not in js and json.loads(js) == s


def test_report_escapes_every_break_in_names() -> None:
    """One real HTML report whose cluster and model names hold every break and a closing script tag."""
    pytest.importorskip("plotly")
    from clustertwin.report import ReportOptions, build_report, render_html

    evil = "x</script><script>alert(1)</script>" + "".join(sorted(set(LINE_BREAKS + "\u2028\u2029\x85\x1b")))
    cluster = specs.load(specs.ClusterSpec, {"name": evil, "node": "dgx-h100", "nodes": 2,
                                             "network": {"fabric": "ib-ndr", "topology": "fat-tree"}})
    html = render_html(build_report(cluster, MODEL.model_copy(update={"name": evil}),
                                    ReportOptions(global_batch=128, tokens=1e11, trials=20, infer=None)))
    assert "<script>alert(1)" not in html
    assert "\u2028" not in html and "\u2029" not in html
    assert html.count("</html>") == 1
