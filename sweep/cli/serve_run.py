"""`rapid run --mode serve`: one serving configuration simulated by core.serving."""
import json
import math

from core import Parallelism, SpecError
from core.evaluation import serve_energy_fields
from core.model.specs import POOL_FIELDS, ServeWorkload
from core.model.loader import load_hardware, load_model, with_dtype
from core.serving.engines import ENGINES, engine_spec
from core.serving.service import SERVE_COLUMNS, Pool, serve, serve_disagg
from core.serving.point import load_of

# flags only --mode serve takes (their defaults are None so another mode can refuse them)
SERVE_FLAGS = ("engine", "isl", "osl", "concurrency", "request_rate", "requests", "length_spread", "attention_dp",
               "max_num_tokens",
               "max_batch", "disagg", *(f"{pool}_{field}" for pool in ("prefill", "decode") for field in POOL_FIELDS))


def add_arguments(parser) -> None:
    parser.add_argument("--engine", default=None, choices=tuple(ENGINES), help="serving engine (--mode serve)")
    parser.add_argument("--isl", type=int, default=None, help="prompt tokens per request (--mode serve; default 1024)")
    parser.add_argument("--osl", type=int, default=None, help="output tokens per request (--mode serve; default 1024)")
    parser.add_argument("--concurrency", type=int, default=None, help="requests kept in flight (closed loop)")
    parser.add_argument("--request-rate", type=float, default=None, help="requests per second (open loop, Poisson)")
    parser.add_argument("--requests", type=int, default=None, help="requests simulated (default 1000)")
    parser.add_argument("--length-spread", type=float, default=None,
                        help="prompt and output lengths vary within +- this share (default 0.1)")
    parser.add_argument("--attention-dp", type=int, default=None, help="attention data-parallel ranks per engine")
    parser.add_argument("--max-num-tokens", type=int, default=None, help="token budget per iteration (engine default)")
    parser.add_argument("--max-batch", type=int, default=None, help="requests per engine (engine default)")
    parser.add_argument("--disagg", action="store_const", const=True, default=None,
                        help="separate prefill and decode pools (--prefill-* and --decode-*)")
    for pool in ("prefill", "decode"):
        for field in POOL_FIELDS:
            parser.add_argument(f"--{pool}-{field.replace('_', '-')}", type=int, default=None,
                                help=f"{pool} pool: {field.replace('_', ' ')} (with --disagg)")


def check_flags(args) -> None:
    """Serving flags outside --mode serve are refused, not ignored."""
    if args.mode == "serve":
        return
    for name in SERVE_FLAGS:
        if getattr(args, name) is not None:
            raise SpecError("command line", "--" + name.replace("_", "-"), getattr(args, name),
                            f"applies to --mode serve; this run is --mode {args.mode}")


def _pool(args, prefix: str) -> Pool:
    values = {field: getattr(args, f"{prefix}_{field}") for field in POOL_FIELDS}
    return Pool(**{k: v for k, v in values.items() if v is not None})


def run(args) -> int:
    if not args.model:
        raise SpecError("command line", "--model", "<missing>", "give a preset name or a file")
    if not args.hardware:
        raise SpecError("command line", "--hardware", "<missing>", "give a preset name or a file")
    model, hw = load_model(args.model), load_hardware(args.hardware)
    if args.dtype:
        hw = with_dtype(hw, args.dtype, "command line", "--dtype")
    engine = engine_spec(args.engine or "trtllm", args.max_num_tokens or 0, args.max_batch or 0, "command line")
    concurrency = args.concurrency if args.concurrency is not None else (0 if args.request_rate else 1)
    spread = {"length_spread": args.length_spread} if args.length_spread is not None else {}
    work = ServeWorkload(args.isl or 1024, args.osl or 1024, concurrency, args.request_rate or 0.0,
                         args.requests or 1000, args.engine or "trtllm", kv_dtype=args.kv_dtype or "", **spread)
    load = load_of(work)
    given = [f"{p}_{f}" for p in ("prefill", "decode") for f in POOL_FIELDS if getattr(args, f"{p}_{f}") is not None]
    if args.disagg:
        for prefix in ("prefill", "decode"):
            if not any(name.startswith(prefix) for name in given):
                raise SpecError("command line", f"--{prefix}-workers", "<missing>",
                                "--disagg needs both a prefill pool and a decode pool (--prefill-* and --decode-*)")
        record = serve_disagg(model, hw, engine, load, _pool(args, "prefill"), _pool(args, "decode"),
                              args.kv_dtype or "", "command line")
    else:
        if given:
            flag = "--" + given[0].replace("_", "-")
            raise SpecError("command line", flag, getattr(args, given[0]),
                            "a prefill or decode pool needs --disagg (and both pools)")
        pool = Pool(workers=1, tp=args.tp, pp=args.pp, ep=args.ep, attention_dp=args.attention_dp or 1)
        record = serve(model, hw, engine, load, pool, args.kv_dtype or "", "command line")
        if record["feasible"] and hw.gpu.power is not None:
            record.update(serve_energy_fields(model, hw, Parallelism(tp=args.tp, pp=args.pp), work, record))
    shown = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}
    if args.json:
        print(json.dumps(shown, sort_keys=True))
        return 0
    for name in ("feasible", *SERVE_COLUMNS, "kv_transfer_s", "power_avg_w", "energy_per_request_j",
                 "energy_per_output_token_j"):
        if name in shown:
            value = shown[name]
            print(f"{name:32} {value:.6g}" if isinstance(value, float) else f"{name:32} {value}")
    return 0
