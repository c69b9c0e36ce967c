"""`rapid run`: one configuration, as a readable breakdown or one JSON record."""
import json
import math
from dataclasses import fields

from rich.console import Console
from rich.table import Table

from core import BACKENDS, InferWorkload, Parallelism, SpecError, TrainWorkload, estimate_memory, evaluate, list_presets
from core.model.specs import (COMPUTE_DTYPES, GRAD_DTYPES, KV_DTYPES, MASTER_WEIGHTS, MAX_WORKLOAD_SIZE,
                              OPTIMIZER_DTYPES, RECIPE_CHOICES, RECOMPUTE, SCHEDULES, WORKLOAD_SIZE_ALLOWED,
                              ZERO_STAGES)
from core.model.layout import recipe_mismatch, served_etp
from core.model.loader import load_hardware, load_model, with_dtype

from . import serve_run
from .args import POSITIVE, check_folder_path
from sweep.study.cost_block import CostSpec, cost_fields, parse_cost
from sweep.study.loader import OPTIONAL_WORKLOAD_KEYS, WORKLOAD_KEYS


def add_arguments(parser) -> None:
    parser.add_argument("--model", help="model preset name, model YAML or Hugging Face config.json")
    parser.add_argument("--hardware", help="GPU preset name or hardware YAML")
    parser.add_argument("--list-presets", action="store_true", help="list model and GPU presets and exit")
    parser.add_argument("--gpus", type=POSITIVE, help="total GPUs (default: dp*tp*pp*cp)")
    parser.add_argument("--dp", default="auto", help="data-parallel degree, or auto = gpus/(tp*pp*cp)")
    for axis, text in (("tp", "tensor"), ("pp", "pipeline"), ("cp", "context"), ("ep", "expert")):
        parser.add_argument(f"--{axis}", type=POSITIVE, default=1, help=f"{text}-parallel degree")
    parser.add_argument("--sp", action=_BooleanFlag, default=None,
                        help="sequence parallelism (default: on when tp > 1 in training)")
    parser.add_argument("--etp", type=int, default=0,
                        help="expert tensor-parallel degree (default: tp; in --mode serve with --ep, tp / ep)")
    parser.add_argument("--first-stage-layers", type=int, default=0,
                        help="layers on the first pipeline stage (default: Megatron's split)")
    parser.add_argument("--last-stage-layers", type=int, default=0,
                        help="layers on the last pipeline stage (default: Megatron's split)")
    parser.add_argument("--overlap-tp-comm", action="store_true",
                        help="pipeline the sequence-parallel collectives with their GEMMs (TE userbuffers)")
    parser.add_argument("--overlap-p2p-comm", action="store_true",
                        help="hide pipeline sends behind the next chunk under the interleaved schedule")
    parser.add_argument("--no-grad-accumulation-fusion", dest="grad_accumulation_fusion", action="store_false",
                        help="add weight gradients into the main gradients with kernels of their own "
                             "(PyTorch DDP / FSDP) instead of inside the weight-gradient GEMM (Megatron)")
    parser.add_argument("--fused-cross-entropy", action="store_true",
                        help="the loss holds 16-bit logits (fused kernel) instead of FP32 logits and gradient")
    parser.add_argument("--grad-dtype", default="fp32", choices=GRAD_DTYPES,
                        help="main gradients and their data-parallel reduction")
    parser.add_argument("--master-weights", default="fp32", choices=MASTER_WEIGHTS,
                        help="optimizer's master weights: fp32 (Megatron-Core), remainders or none/bf16 (apex)")
    parser.add_argument("--optimizer-dtype", default="fp32", choices=OPTIMIZER_DTYPES,
                        help="dtype of Adam's two moments")
    parser.add_argument("--kv-dtype", default=None, choices=KV_DTYPES,
                        help="inference KV-cache dtype (default: the activation dtype)")
    parser.add_argument("--recompute", default="none", choices=RECOMPUTE)
    parser.add_argument("--schedule", default="1f1b", choices=SCHEDULES)
    parser.add_argument("--virtual-stages", type=POSITIVE, default=1, help="model chunks per stage (interleaved)")
    parser.add_argument("--placement", default="tp,cp,dp,pp",
                        help="order of the parallel axes over the NPUs, innermost first")
    parser.add_argument("--mode", default="train", choices=("train", "infer", "serve"),
                        help="train, infer (one static batch) or serve (the engine simulator, core.serving)")
    parser.add_argument("--global-batch", type=POSITIVE, default=None, help="sequences per training iteration")
    parser.add_argument("--micro-batch", type=POSITIVE, default=1)
    parser.add_argument("--seq", type=POSITIVE, default=None, help=f"training sequence length (default {DEFAULT_SEQ})")
    for name, text in (("batch", "batch size"), ("prompt", "prompt tokens"), ("decode", "output tokens")):
        parser.add_argument(f"--{name}", type=POSITIVE, default=None,
                            help=f"inference {text} (default {INFERENCE_DEFAULTS[name]})")
    parser.add_argument("--backend", default="analytical", choices=BACKENDS,
                        help="closed forms, or a replay on the compiled network simulator")
    parser.add_argument("--emit-traces", metavar="DIR",
                        help="with an astra backend: write the replayed graph as Chakra traces <model>.<rank>.et")
    parser.add_argument("--power-limit", default=None,
                        help="GPU power limit, e.g. 500 W (default: the hardware's; it lowers the clock)")
    parser.add_argument("--mtp-layers", type=int, default=None,
                        help="training: MTP modules trained beside the model (default: the model file's, e.g. "
                             "DeepSeek-V3's num_nextn_predict_layers = 1; 0 = none)")
    parser.add_argument("--tokens-total", type=float, default=None,
                        help="a training run's tokens: adds its days, MWh (and dollars with a price)")
    parser.add_argument("--gpu-hour-usd", type=float, default=None, help="price of a GPU-hour, for the cost lines")
    parser.add_argument("--kwh-usd", type=float, default=None, help="price of a kilowatt-hour, for the cost lines")
    parser.add_argument("--json", action="store_true", help="print one JSON record")
    serve_run.add_arguments(parser)
    _add_precision_and_optimizer(parser.add_argument_group(
        "precision and data parallelism (defaults: Megatron-Core / NeMo performance recipes)"))


def _add_precision_and_optimizer(group) -> None:
    group.add_argument("--dtype", default=None, choices=COMPUTE_DTYPES,
                       help="compute dtype (default: the hardware file's); fp8, mxfp8 and nvfp4 run the GEMMs "
                            "only in that format")
    group.add_argument("--fp8-recipe", default="", choices=RECIPE_CHOICES,
                       help="how low-precision GEMM inputs are scaled (default: delayed for fp8; mxfp8 and "
                            "nvfp4 are block-scaled; none: bf16/fp16, no recipe)")
    group.add_argument("--fp8-params", action="store_true", help="keep weights quantized (no BF16 copy)")
    group.add_argument("--zero", type=int, default=None, choices=ZERO_STAGES,
                       help="ZeRO stage (default 1: Megatron-Core's distributed optimizer; 0 turns it off)")
    group.add_argument("--overlap-grad-reduce", action=_BooleanFlag, default=None,
                       help="reduce gradients bucket by bucket during the backward (default: on)")
    group.add_argument("--overlap-param-gather", action=_BooleanFlag, default=None,
                       help="gather updated parameters during the next forward; under zero 3, prefetch each layer's "
                            "(default: on with zero 1 or more)")
    group.add_argument("--reshard-after-forward", action=_BooleanFlag, default=None,
                       help="ZeRO-3: free gathered parameters after each forward (default: on); "
                            "--no-reshard-after-forward keeps them gathered all step")
    group.add_argument("--expandable-segments", action=_BooleanFlag, default=None,
                       help="PyTorch allocator segments that grow in place (default: on, as NeMo's launch "
                            "templates set); --no-expandable-segments: fixed-size segments, which fragment")


class _BooleanFlag:
    """--sp / --no-sp without argparse's BooleanOptionalAction help noise."""

    def __new__(cls, option_strings, dest, **kwargs):
        import argparse
        return argparse.BooleanOptionalAction(option_strings, dest, **kwargs)


def _positive(name: str, value: int) -> int:
    if value < 1:
        raise SpecError("command line", name, value, "expected a positive integer")
    return value


def _workload_size(name: str, value: int) -> int:
    if not 1 <= value <= MAX_WORKLOAD_SIZE:
        raise SpecError("command line", name, value, WORKLOAD_SIZE_ALLOWED)
    return value


def _at_least_zero(name: str, value: int) -> int:
    if value < 0:
        raise SpecError("command line", name, value, "expected 0 (the default) or a positive integer")
    return value


DEFAULT_SEQ = 2048
# data-parallel flags left to Parallelism's defaults unless given
OPTIMIZER_FLAGS = ("zero", "overlap_grad_reduce", "overlap_param_gather", "reshard_after_forward",
                   "expandable_segments")
INFERENCE_DEFAULTS = {"batch": 1, "prompt": 512, "decode": 128}
# the workload's fields, as a study names them, are the flags of one mode
MODE_ONLY = {mode: keys + OPTIONAL_WORKLOAD_KEYS[mode] for mode, keys in WORKLOAD_KEYS.items()}


def _check_mode_flags(args) -> None:
    """A flag of the other mode is refused, not ignored."""
    for mode, names in MODE_ONLY.items():
        given = [name for name in names + (("mtp_layers",) if mode == "train" else ())
                 if getattr(args, name) is not None and name not in MODE_ONLY[args.mode]]
        if mode != args.mode and given:
            flag = "--" + given[0].replace("_", "-")
            raise SpecError("command line", flag, getattr(args, given[0]),
                            f"applies to --mode {mode}; this run is --mode {args.mode}")


def parse_config(args):
    """(model, hardware, parallelism, workload, gpus) from parsed `rapid run` arguments."""
    if not args.model:
        raise SpecError("command line", "--model", "<missing>", "give a preset name or a file")
    if not args.hardware:
        raise SpecError("command line", "--hardware", "<missing>", "give a preset name or a file")
    _check_mode_flags(args)
    mtp = args.mtp_layers
    model = load_model(args.model, None if mtp is None else {"mtp_layers": _at_least_zero("--mtp-layers", mtp)})
    hw = load_hardware(args.hardware, {"gpu.power_limit": args.power_limit} if args.power_limit else None)
    if args.dtype or args.fp8_recipe:
        hw = with_dtype(hw, args.dtype or hw.dtype, "command line", "--dtype", args.fp8_recipe, "--fp8-recipe")
    elif recipe_mismatch(hw.dtype, hw.fp8_recipe):
        raise SpecError(args.hardware, "fp8_recipe", hw.fp8_recipe, recipe_mismatch(hw.dtype, hw.fp8_recipe))
    tp, pp, cp, ep = (_positive(f"--{a}", getattr(args, a)) for a in ("tp", "pp", "cp", "ep"))
    inner = tp * pp * cp
    serving = args.mode == "serve"
    if serving:
        serve_run.check_pools(args)
    if args.dp == "auto":
        # a disaggregated run's GPUs are its pools' (its engine knobs left at 1, dp counts them)
        default = serve_run.pool_gpus(args) if serving and args.disagg else inner
        gpus = _positive("--gpus", args.gpus if args.gpus is not None else default)
        if gpus % inner:
            raise SpecError("command line", "--dp", "auto",
                            f"gpus ({gpus}) is not a multiple of tp*pp*cp ({inner})")
        dp = gpus // inner
    else:
        try:
            dp = _positive("--dp", int(args.dp))
        except ValueError:
            raise SpecError("command line", "--dp", args.dp, "expected a positive integer or auto") from None
        gpus = _positive("--gpus", args.gpus if args.gpus is not None else dp * inner)
    train = args.mode == "train"
    sp = args.sp if args.sp is not None else (train and tp > 1)
    optimizer = {name: getattr(args, name) for name in OPTIMIZER_FLAGS if getattr(args, name) is not None}
    etp = _at_least_zero("--etp", args.etp)
    if serving:
        etp = served_etp(tp, ep, etp)
    par = Parallelism(dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, sp=sp, **optimizer,
                      micro_batch=_positive("--micro-batch", args.micro_batch), recompute=args.recompute,
                      schedule=args.schedule, virtual_stages=_positive("--virtual-stages", args.virtual_stages),
                      placement=tuple(args.placement.split(",")), etp=etp,
                      first_stage_layers=_at_least_zero("--first-stage-layers", args.first_stage_layers),
                      last_stage_layers=_at_least_zero("--last-stage-layers", args.last_stage_layers),
                      overlap_tp_comm=args.overlap_tp_comm, overlap_p2p_comm=args.overlap_p2p_comm,
                      grad_dtype=args.grad_dtype, fp8_params=args.fp8_params,
                      master_weights=args.master_weights, optimizer_dtype=args.optimizer_dtype,
                      grad_accumulation_fusion=args.grad_accumulation_fusion,
                      fused_cross_entropy=args.fused_cross_entropy)
    if train:
        global_batch = args.global_batch if args.global_batch is not None else dp * par.micro_batch
        tokens_total = args.tokens_total or 0.0
        if not 0 <= tokens_total < 1e18:
            raise SpecError("command line", "--tokens-total", tokens_total, "expected a number of tokens such as 15e12")
        work = TrainWorkload(global_batch=_workload_size("--global-batch", global_batch),
                             seq=_workload_size("--seq", args.seq or DEFAULT_SEQ), tokens_total=tokens_total)
    elif serving:
        work = serve_run.workload(args)
        serve_run.check(work)
    else:
        sizes = {name: getattr(args, name) or default for name, default in INFERENCE_DEFAULTS.items()}
        work = InferWorkload(**{name: _workload_size(f"--{name}", value) for name, value in sizes.items()},
                             kv_dtype=args.kv_dtype or "")
    return model, hw, par, work, gpus


def run(args) -> int:
    if args.list_presets:
        for kind, names in list_presets().items():
            print(f"{kind}: {', '.join(names)}")
        return 0
    serve_run.check_flags(args)
    model, hw, par, work, gpus = parse_config(args)
    if args.mode == "serve":
        record = _evaluated(model, hw, par, work, gpus)
        record.update(cost_fields(record, _cost(args), work, gpus, par))
        return serve_run.show(args, {**model_fields(model), **record})
    if args.emit_traces and args.backend == "analytical":
        raise SpecError("command line", "--emit-traces", args.emit_traces,
                        "traces come from a replay: add --backend astra-hierarchical or astra-flattened")
    if args.emit_traces:
        check_folder_path("--emit-traces", args.emit_traces)
    # a layout that does not fit is not timed, as in a sweep: its time metrics are null
    record = _evaluated(model, hw, par, work, gpus, backend=args.backend, emit_traces=args.emit_traces)
    record.update(cost_fields(record, _cost(args), work, gpus, par))
    if args.json:
        print(json.dumps(_jsonable({**record, **model_fields(model)}), sort_keys=True))
    else:
        _print_table(model, hw, par, work, gpus, record, args.emit_traces)
    return 0


def model_fields(model) -> dict:
    """What a run prints of its model, so that a mis-read config shows at once."""
    return {"model": model.name, "parameters": model.total_params(), "active_parameters": model.active_params(),
            "mtp_parameters": model.mtp_params()}


def _evaluated(*config, **options) -> dict:
    """evaluate()'s record; a layout it refuses is the command line's (the flags laid it out),
    named by the flag whose knob its reason starts with where there is one."""
    try:
        return evaluate(*config, **options)
    except SpecError as err:
        if err.source:
            raise
        field, value = _refused_flag(err.allowed, *config[2:4]) or (err.field, err.value)
        raise SpecError("command line", field, value, err.allowed) from None


def _refused_flag(reason: str, *specs) -> tuple | None:
    """(flag, value) of the layout or workload knob a refusal's reason opens with, if any."""
    knob = reason.split(" ", 1)[0]
    for spec in specs:
        if knob in {f.name for f in fields(spec)}:
            value = getattr(spec, knob)
            shown = ",".join(value) if isinstance(value, tuple) else str(value).lower() if isinstance(value, bool) \
                else value  # as written on the command line (a placement as tp,dp)
            return "--" + knob.replace("_", "-"), shown
    return None


def _cost(args) -> CostSpec | None:
    """The prices given on the command line: both or neither."""
    given = {"gpu_hour_usd": args.gpu_hour_usd, "kwh_usd": args.kwh_usd}
    if all(value is None for value in given.values()):
        return None
    for key, value in given.items():
        if value is None or not 0 <= value < 1e6:
            raise SpecError("command line", "--" + key.replace("_", "-"), "<missing>" if value is None else value,
                            "expected a price in US dollars (a number >= 0); give both --gpu-hour-usd and --kwh-usd")
    return parse_cost(given, "command line")


def _jsonable(value):
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    return value


def _parameters(model) -> str:
    """The parameter count modelled, so a mis-read config shows at a glance."""
    text = f"{model.total_params() / 1e9:.2f} B parameters"
    if model.moe is not None:
        text += f", {model.active_params() / 1e9:.2f} B active"
    if model.mtp_layers:
        text += f", + {model.mtp_params() / 1e9:.2f} B in {model.mtp_layers} MTP module{'s' if model.mtp_layers > 1 else ''}"
    return text


def _seconds(value: float) -> str:
    if value != value:
        return "-"
    if value >= 1:
        return f"{value:.3f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} us"


def _print_table(model, hw, par, work, gpus, record, emit_traces=None) -> None:
    console = Console()
    layout = (f"dp={par.dp} tp={par.tp} pp={par.pp} cp={par.cp} ep={par.ep} sp={'on' if par.sp else 'off'} "
              f"zero={par.zero} recompute={par.recompute} schedule={par.schedule} dtype={hw.dtype}"
              + (f" ({hw.recipe})" if hw.recipe else ""))
    console.print(f"[bold]{model.name}[/] ({_parameters(model)}) on {gpus} x {hw.name}  ({work.mode})  {layout}")
    step = record["step_time_s"]
    label = "iteration" if work.mode == "train" else "request"
    if record["feasible"]:
        table = Table(title="time", show_edge=False)
        table.add_column("part")
        table.add_column("seconds", justify="right")
        table.add_column("share", justify="right")
        for key, value in record["breakdown"].items():
            part = key.removesuffix("_s").replace("comm_", "exposed comm: ")
            table.add_row(part, _seconds(value), f"{100 * value / step:.1f} %")
        table.add_row(f"[bold]{label}[/]", f"[bold]{_seconds(step)}[/]", "100 %")
        console.print(table)
    mem = Table(title="memory per GPU (most loaded stage)", show_edge=False)
    mem.add_column("kind")
    mem.add_column("GiB", justify="right")
    for key, value in record["memory"].items():
        if value:
            mem.add_row(key.removesuffix("_gib"), f"{value:.2f}")
    mem.add_row("[bold]peak[/]", f"[bold]{record['memory_peak_gib']:.2f}[/]")
    console.print(mem)
    console.print(f"counted: {estimate_memory(model, hw, par, work).describe()}")
    verdict = "fits" if record["feasible"] else f"[red]does not fit[/]: {record['infeasible_reason']}"
    console.print(f"memory: {verdict}")
    if not record["feasible"]:
        metrics = "MFU, tokens/s" + (", TTFT, time per output token" if work.mode == "infer" else "")
        console.print(f"not timed: a layout that does not fit in memory cannot run, so it has no {label} time "
                      f"({metrics}); a sweep writes it untimed too" + (f"; no traces written to {emit_traces}" if emit_traces else ""))
        return
    if record.get("replay_note"):
        console.print(f"[yellow]note[/]: {record['replay_note']}")
    for link in record.get("busiest_links", [])[:3]:
        console.print(f"busy link {link['src']} -> {link['dst']} ({link['dim']}): "
                      f"{100 * link['utilisation']:.1f} % of the {label}")
    line = f"MFU {100 * record['mfu']:.1f} %   tokens/s {record['tokens_per_s']:,.0f}"
    if work.mode == "infer":
        line += f"   TTFT {_seconds(record['ttft_s'])}   time per output token {_seconds(record['tpot_s'])}"
    console.print(line)
    _print_energy(console, hw, record)


def _print_energy(console, hw, record) -> None:
    """Power, energy and (with prices) cost lines of a timed point."""
    if record["power_avg_w"] is None:
        if hw.gpu.power is None:
            console.print("power: not modelled: the hardware file gives no gpu power figures (tdp, idle_power, ...)")
        return
    power = hw.gpu.power
    console.print(f"power {record['power_avg_w']:.0f} W per GPU (limit {power.limit_w:.0f} W, clock "
                  f"{100 * record['gpu_clock_share']:.0f} % of boost)   energy {record['energy_per_step_j'] / 1e3:,.2f} kJ "
                  f"per {'step' if record['energy_per_token_j'] is not None else 'request batch on every replica'}"
                  + (f" (node overhead {power.node_overhead_w:.0f} W per GPU, PUE {power.pue:g})"
                     if power.node_overhead_w or power.pue != 1 else ""))
    if record["energy_per_token_j"] is not None:
        line = f"energy {record['energy_per_token_j']:.3g} J per token"
    else:
        line = (f"energy {record['energy_per_request_j']:.4g} J per request, "
                f"{record['energy_per_output_token_j']:.3g} J per output token")
    if record["run_days"] is not None:
        line += f"   run {record['run_days']:,.1f} days, {record['run_mwh']:,.0f} MWh"
    console.print(line)
    if record["usd_per_step"] is not None:
        line = f"cost ${record['usd_per_step']:,.4g} per step, ${record['usd_per_million_tokens']:,.4g} per million tokens"
        if record["run_usd"] is not None:
            line += f", ${record['run_usd']:,.0f} for the run"
        console.print(line)
