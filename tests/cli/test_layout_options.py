"""CLI contract for layouts (cli/layout_options.py): every command that takes one training layout accepts each
layout option, and the run options around it (--seq-len, --precision, --stack, --strict-layout,
--global-batch), with the same name, type and default; the help comes from the spec field; each option has an
effect on every command that takes it; and a layout estimated with ``train estimate`` can be passed to
``explain`` as written (it once reported 245 GiB and "inf s (inf%)")."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from tests.conftest import FIXTURES

from clustertwin.cli import layout_options as layout_options_module
from clustertwin.cli.layout_options import (
    LAYOUT_OPTIONS,
    LAYOUT_PARAMS,
    LayoutOpts,
    command_args,
    field_help,
    layout_fields,
    layout_options,
)
from clustertwin.cli.main import COMMANDS, _load
from clustertwin.specs import ParallelismSpec

LAYOUT_COMMANDS: dict[tuple[str, ...], str] = {
    ("train", "estimate"): "given", ("explain",): "given", ("deploy", "slurm"): "given",
    ("deploy", "k8s"): "given", ("report",): "given", ("profile",): "given", ("calibrate",): "given",
    ("export", "chakra"): "given",
    ("train", "search"): "searched", ("train", "scale"): "searched",
}
"""Commands that take a training layout: "given" resolves it (the fields not given filled as train estimate
fills them), "searched" pins what is given and searches the rest (its help says so)."""
RUN_OPTIONS = ("--seq-len", "--precision", "--stack", "--strict-layout", "--global-batch")
"""The options around the layout, alike wherever they appear."""
EXEMPT: dict[tuple[tuple[str, ...], str], str] = {
    (("train", "search"), "--strict-layout"): "it searches every field not given; that is the command",
    (("train", "scale"), "--strict-layout"): "it searches every field not given at each GPU count",
    (("deploy", "slurm"), "--strict-layout"): "the job runs the layout as given (literal, as --strict-layout); "
                                             "--from-search pins the given fields and searches the rest",
    (("deploy", "k8s"), "--strict-layout"): "as deploy slurm",
    (("profile",), "--strict-layout"): "a traced job ran the layout it ran: fields not given keep their literal "
                                       "defaults, never a search (as calibrate --profile)",
    (("calibrate",), "--strict-layout"): "as profile: the traced job's layout as given, never a search",
    (("export", "chakra"), "--strict-layout"): "the trace is of the layout as given (literal, as --strict-layout)",
}
"""(command, option) not taken, with the reason."""
OPTIONAL_DEFAULT = {(("profile",), "--global-batch"): "profile reads traces without a model; only --compare "
                                                     "(against the twin) needs the batch",
                    (("calibrate",), "--global-batch"): "calibrate --nccl-tests needs no model; only --profile "
                                                       "(fitting the twin) needs the batch"}
"""(command, option) optional where the others require it, with the reason."""
OTHER_LAYOUTS = {
    "infer": "a serving layout (--tp/--pp of InferSpec), not a training one",
    "diagnose": "reads logs; --global-batch (optional) only sizes the out-of-memory advice",
    "sweep": "takes its layouts as a YAML space (sweep.yaml), not as options",
}
"""Command groups with layout-like options outside the contract, with the reason."""


def _command(path: tuple[str, ...]):
    cmd = _load(path[0])
    for sub in path[1:]:
        cmd = cmd.commands[sub]
    return cmd


def _params(path: tuple[str, ...]) -> dict[str, object]:
    return {opt: p for p in _command(path).params for opt in p.opts}


def _kind(p: object) -> object:
    return getattr(getattr(p, "type_descriptor", None), "annotation", None) or getattr(p, "type", None)


@pytest.mark.parametrize("field", sorted(LAYOUT_OPTIONS))
def test_every_layout_command_takes_the_option_alike(field: str) -> None:
    assert field in ParallelismSpec.model_fields
    option = LAYOUT_OPTIONS[field]
    seen = {}
    for path, variant in LAYOUT_COMMANDS.items():
        params = _params(path)
        assert option in params, f"{' '.join(path)} has no {option}"
        p = params[option]
        seen[path] = (_kind(p), p.default, p.help)
        if variant == "given":
            assert p.help == field_help(field), (path, option)
        else:
            assert p.help.endswith("(pinned when given, else searched)"), (path, option)
    first = next(iter(seen.values()))
    assert all(s[:2] == first[:2] for s in seen.values()), (option, seen)  # same type and default everywhere
    assert first[1] is None  # not given = filled by resolve_parallelism (estimate, explain) or searched


@pytest.mark.parametrize("option", RUN_OPTIONS)
def test_every_layout_command_takes_the_run_option_alike(option: str) -> None:
    seen = {}
    for path in LAYOUT_COMMANDS:
        params = _params(path)
        if (path, option) in EXEMPT:
            assert option not in params, f"{' '.join(path)} takes {option}: drop it from EXEMPT"
            continue
        assert option in params, f"{' '.join(path)} has no {option}"
        p = params[option]
        if (path, option) in OPTIONAL_DEFAULT:
            assert not p.required and p.default is None
            continue
        seen[path] = (_kind(p), p.default, p.required, p.help, tuple(p.opts))
    assert len({s for s in seen.values()}) == 1, (option, seen)  # one type, default, help and short name


def test_every_command_with_a_layout_option_is_in_the_contract() -> None:
    """A new command that takes --tp (or --global-batch) joins LAYOUT_COMMANDS or says why not."""
    marks = {"--tp", "--global-batch"}
    covered = set(LAYOUT_COMMANDS)

    def leaves(cmd, path):
        subs = getattr(cmd, "commands", None)
        return [leaf for n, c in subs.items() for leaf in leaves(c, (*path, n))] if subs else [(path, cmd)]

    for name in COMMANDS:
        for path, cmd in leaves(_load(name), (name,)):
            opts = {o for p in cmd.params for o in p.opts}
            if opts & marks and path not in covered:
                assert path[0] in OTHER_LAYOUTS, f"{' '.join(path)} takes a layout option but is not in the contract"
    assert all(reason for reason in (*EXEMPT.values(), *OTHER_LAYOUTS.values(), *OPTIONAL_DEFAULT.values()))


def test_the_layout_options_are_declared_once() -> None:
    """Every layout command takes its layout options from ``layout_options`` (one ``layout`` parameter), in
    the order of LAYOUT_OPTIONS; no command module declares a layout option's parameter by hand."""
    order = [LAYOUT_OPTIONS[f] for f in LAYOUT_OPTIONS]
    for path in LAYOUT_COMMANDS:
        opts = [o for p in _command(path).params for o in p.opts if o in set(order)]
        assert opts == order, path
    cli_dir = Path(layout_options_module.__file__).parent
    by_hand = re.compile(r"^\s+(" + "|".join(LAYOUT_PARAMS) + r"): (int|str|bool)\b.*= (\w+Opt\b|search_option\()", re.M)
    for module in cli_dir.glob("*.py"):
        assert not by_hand.search(module.read_text()), f"{module.name} declares a layout option by hand"


def test_layout_options_hands_the_command_one_dict() -> None:
    @layout_options()
    def command(cluster: str = "c", layout: dict = LayoutOpts, json_out: bool = False) -> dict:
        return {"cluster": cluster, "json_out": json_out, **layout}

    params = list(inspect.signature(command).parameters)
    assert params == ["cluster", *LAYOUT_PARAMS, "json_out"]
    out = command(cluster="x", tp=4, sp=True)
    assert out == {"cluster": "x", "json_out": False, **dict.fromkeys(LAYOUT_PARAMS), "tp": 4, "sp": True}
    assert command_args({"cluster": "x", "layout": {"tp": 2}, "json_out": True}, "json_out") == {"cluster": "x", "tp": 2}
    with pytest.raises(TypeError, match="no 'layout' parameter"):
        layout_options()(lambda cluster="c": None)


def test_layout_fields_maps_options_to_spec_fields() -> None:
    fields = layout_fields(tp=8, pp=None, sp=False, recompute_modules="layernorm, mla_up_proj", embedding_in_split=False)
    assert fields == {"tp": 8, "sequence_parallel": False, "recompute_modules": ["layernorm", "mla_up_proj"]}
    with pytest.raises(TypeError):
        layout_fields(tensor_parallel=8)


def test_explain_takes_the_estimated_layout(cli) -> None:
    layout = ["--gpus", "512", "-b", "1024", "--tp", "8", "--pp", "4", "--recompute", "full", "--vpp", "2",
              "--micro-batch", "1", "--precision", "fp8"]
    est = cli("train", "estimate", "-m", "llama3-70b", *layout, "--json")
    exp = cli("explain", "-m", "llama3-70b", *layout, "--json")
    assert est.code == 0 and exp.code == 0, (est.stderr, exp.stderr)
    e, x = json.loads(est.stdout), json.loads(exp.stdout)
    assert x["layout"] == e["layout"]
    assert x["step_time_s"] == pytest.approx(e["step_time_s"], rel=1e-9)  # no data stall on this cluster


def test_explain_names_a_layout_that_does_not_fit(cli) -> None:
    r = cli("explain", "-m", "llama3-70b", "--gpus", "512", "-b", "1024", "--tp", "1", "--pp", "1",
            "--no-sequence-parallel", "--zero", "0")
    assert r.code == 0, r.stderr
    assert "does not fit" in r.stdout and "inf s" not in r.stdout and "inf%" not in r.stdout


def test_old_spelling_warns(cli) -> None:
    r = cli("explain", "--data", "tokenized-text", "--gpus", "8", "-b", "64")
    assert r.code == 0 and "warning: --data is deprecated; use --dataset" in r.stderr


def test_search_pins_moe_overlap_and_recompute_modules() -> None:
    """DeepSeek-V3's own features reach the search: with DualPipe and per-module recompute pinned, every layout
    listed carries them and the best is faster than the search pinned to neither (the published layout once
    beat the searched best by 19% because the search could not use either); on the deepseek-2024 stack an
    unpinned search takes them from the stack (Stack.moe_layout_defaults)."""
    from tests.conftest import EXAMPLES

    from clustertwin import catalog, specs, train

    m = catalog.get("model", "deepseek-v3")
    c = specs.load(specs.ClusterSpec, str(EXAMPLES / "clusters" / "deepseek-v3-2048-h800.yaml"))
    base = {"tp": 1, "pp": 16, "ep": 64}
    kw = {"global_batch": 15360, "precision": "fp8", "top": 3, "software_stack": "deepseek-2024", "seq_len": 4096}
    plain = train.search(m, c, fixed={**base, "moe_overlap": "none", "recompute_modules": []}, **kw)
    pinned = train.search(m, c, fixed={**base, "moe_overlap": "dualpipe",
                                       "recompute_modules": ["layernorm", "mla_up_proj"]}, **kw)
    assert train.search(m, c, fixed=base, **kw).best.step_time_s == pinned.best.step_time_s
    assert pinned.top and all(e.layout["moe_overlap"] == "dualpipe" for e in pinned.top)
    assert all(set(e.layout["recompute_modules"]) == {"layernorm", "mla_up_proj"} for e in pinned.top)
    assert all(e.layout["pp"] % 2 == 0 for e in pinned.top)
    assert pinned.best.step_time_s < plain.best.step_time_s


def test_search_refuses_what_it_cannot_pin(cli) -> None:
    r = cli("train", "search", "--gpus", "8", "-b", "64", "--moe-overlap", "dualpipe")
    assert r.code == 2 and "needs an MoE model" in r.stderr
    r = cli("train", "search", "--gpus", "8", "-b", "64", "--pipeline-layout", "Et|tL")
    assert r.code == 2 and r.stderr.startswith("error: --pipeline-layout")
    r = cli("train", "search", "--gpus", "8", "-b", "64", "--moe-overlap", "dualpip")
    assert r.code == 2 and "did you mean 'dualpipe'" in r.stderr


# ------------------------------------------------------------------ each option has its effect where it is taken
def _deploy(cli, *extra: str) -> tuple[str, float]:
    r = cli("deploy", "slurm", "-m", "llama3-8b", "-b", "64", "--gpus", "16", "--tp", "2", "--flags", "megatron",
            *extra)
    assert r.code == 0, r.stderr
    step = re.search(r"step time ([0-9.]+) s", r.stdout)
    assert step, r.stdout[:400]
    return r.stdout, float(step.group(1))


def test_deploy_takes_seq_len_and_stack(cli) -> None:
    """--seq-len reaches the emitted Megatron flags and the predicted step; --stack the layout's defaults and
    the prediction (the 2021 stack has no distributed optimizer, so ZeRO-1 falls back to 0)."""
    short, t_short = _deploy(cli, "--seq-len", "4096")
    long, t_long = _deploy(cli, "--seq-len", "8192")
    assert "--seq-length 4096" in short and "--seq-length 8192" in long
    assert t_long > 1.5 * t_short
    old, t_old = _deploy(cli, "--stack", "megatron-2021")
    assert t_old != pytest.approx(t_long, rel=0.01)
    assert "zero=0" in old and "zero=1" in long
    bad = cli("deploy", "slurm", "-m", "llama3-8b", "-b", "64", "--stack", "megatron-cor")
    assert bad.code == 2 and bad.stderr.startswith("error: --stack") and "megatron-core-2024" in bad.stderr


def test_report_estimates_the_layout_as_train_estimate_does(cli, tmp_path) -> None:
    """report's breakdown is train estimate's estimate of the same options: the stack applies and the fields
    not given are chosen by search (and said so)."""
    common = ["-c", "ascend-910b-64", "-m", "llama3-8b", "-b", "64", "--tp", "2", "--stack", "megatron-2021"]
    out = tmp_path / "r.html"
    r = cli("report", *common, "--no-infer", "--trials", "1", "-o", str(out))
    assert r.code == 0, r.stderr
    assert "chosen by search" in r.stdout
    shown = float(re.search(r"step time, s</td><td>([0-9.]+)", out.read_text(encoding="utf-8")).group(1))
    est = json.loads(cli("train", "estimate", *common, "--json").stdout)
    auto = json.loads(cli("train", "estimate", *common[:-2], "--json").stdout)
    assert shown == pytest.approx(est["step_time_s"], rel=0.01)
    assert shown != pytest.approx(auto["step_time_s"], rel=0.05)


def test_profile_compare_predicts_with_the_layout_options(cli) -> None:
    """The predicted step of profile --compare is train estimate --strict-layout's of the same options (the
    traced job ran the layout it ran) and follows --stack, --precision and the layout fields."""
    trace = str(FIXTURES / "profile" / "gloo_tp2dp2" / "plain")
    layout = ["-m", "llama3-8b", "-b", "8", "--tp", "2"]

    def predicted(*extra: str) -> float:
        r = cli("profile", trace, "--compare", *layout, "--json", *extra)
        assert r.code == 0, r.stderr
        return next(row["predicted_s"] for row in json.loads(r.stdout)["rows"] if row["term"] == "step")

    plain = predicted()
    est = json.loads(cli("train", "estimate", *layout, "--gpus", "4", "--strict-layout", "--dataset", "none",
                         "--json").stdout)
    assert plain == pytest.approx(est["step_time_s"], rel=1e-9)
    assert predicted("--stack", "megatron-2021") > 1.5 * plain
    assert predicted("--precision", "fp8") < plain
    assert predicted("--recompute", "full") > plain


def test_scale_pins_the_layout_options(cli) -> None:
    r = cli("train", "scale", "-c", "ascend-910b-64", "-m", "llama3-8b", "-b", "64", "--tp", "4", "--json")
    assert r.code == 0, r.stderr
    points = [p for p in json.loads(r.stdout)["points"] if p["layout"]]
    assert len(points) >= 3 and all(p["layout"]["tp"] == 4 for p in points)
    bad = cli("train", "scale", "-b", "64", "--pipeline-layout", "Et|tL")
    assert bad.code == 2 and "not scale" in bad.stderr


def test_old_layout_spelling_warns_where_it_was_taken(cli) -> None:
    """--sp/--no-sp, once deploy's and train's spelling, still works there and says to use --sequence-parallel."""
    from clustertwin.cli.aliases import ALIASES

    old = [path for path in LAYOUT_COMMANDS if "--sp/--no-sp" in ALIASES.get(" ".join(path), {})]
    assert {("train", "estimate"), ("deploy", "slurm"), ("deploy", "k8s")} <= set(old)
    r = cli("deploy", "slurm", "-m", "llama3-8b", "-b", "64", "--gpus", "16", "--tp", "2", "--no-sp")
    assert r.code == 0, r.stderr
    assert "sequence_parallel=false" in r.stdout
    assert "warning: --no-sp is deprecated; use --no-sequence-parallel" in r.stderr


def test_a_batch_the_literal_dp_does_not_divide_is_searched(cli) -> None:
    """1,000,000 sequences on 1,024 GPUs: dp = 1,024 (the literal default) does not divide the batch, but
    dp = 64 with tp x pp x cp = 16 does; the search finds it, --strict-layout still refuses the default."""
    r = cli("train", "estimate", "--gpus", "1024", "-b", "1000000", "--json")
    assert r.code == 0, r.stderr
    lay = json.loads(r.stdout)["layout"]
    assert 1_000_000 % (lay["micro_batch"] * lay["dp"]) == 0
    assert lay["tp"] * lay["pp"] * lay["cp"] * lay["dp"] == 1024
    strict = cli("train", "estimate", "--gpus", "1024", "-b", "1000000", "--strict-layout")
    assert strict.code != 0 and "not divisible by micro_batch x dp = 1 x 1024" in strict.stderr
