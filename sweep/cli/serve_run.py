"""`rapid run --mode serve`: one serving configuration simulated by core.serving."""
import json
import math

from core import SpecError
from core.evaluation import ENERGY
from core.model.specs import POOL_FIELDS, SERVE_POOLS, ServeWorkload
from core.serving.engines import ENGINES
from core.serving.point import check_serve_workload, pool_of
from core.serving.service import SERVE_COLUMNS

DEFAULT_LENGTH = 1024  # prompt and output tokens per request unless --isl / --osl say

# flags only --mode serve takes (their defaults are None so another mode can refuse them)
SERVE_FLAGS = ("engine", "isl", "osl", "concurrency", "request_rate", "requests", "length_spread", "attention_dp",
               "max_num_tokens",
               "max_batch", "disagg", *(f"{pool}_{field}" for pool in ("prefill", "decode") for field in POOL_FIELDS))


def add_arguments(parser) -> None:
    parser.add_argument("--engine", default=None, choices=tuple(ENGINES), help="serving engine (--mode serve)")
    parser.add_argument("--isl", type=int, default=None,
                        help=f"prompt tokens per request (--mode serve; default {DEFAULT_LENGTH})")
    parser.add_argument("--osl", type=int, default=None,
                        help=f"output tokens per request (--mode serve; default {DEFAULT_LENGTH})")
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


def pool_gpus(args) -> int:
    """GPUs a disaggregated run's prefill and decode pools take."""
    work = workload(args)
    return sum(pool_of(work, pool).gpus for pool in SERVE_POOLS)


def workload(args) -> ServeWorkload:
    """The serving workload the flags describe, a flag left out taking ServeWorkload's default
    (concurrency 1 unless --request-rate is given); a value given is kept, to be checked."""
    given = {name: getattr(args, name) for name in (*SERVE_FLAGS, "kv_dtype") if getattr(args, name) is not None}
    if "concurrency" not in given and "request_rate" not in given:
        given["concurrency"] = 1
    given.setdefault("isl", DEFAULT_LENGTH)
    given.setdefault("osl", DEFAULT_LENGTH)
    return ServeWorkload(**given)


def check_pools(args) -> None:
    """A pool flag needs --disagg, and --disagg both pools."""
    given = [f"{p}_{f}" for p in SERVE_POOLS for f in POOL_FIELDS if getattr(args, f"{p}_{f}") is not None]
    if args.disagg:
        for prefix in SERVE_POOLS:
            if not any(name.startswith(prefix) for name in given):
                raise SpecError("command line", f"--{prefix}-workers", "<missing>",
                                "--disagg needs both a prefill pool and a decode pool (--prefill-* and --decode-*)")
    elif given:
        raise SpecError("command line", "--" + given[0].replace("_", "-"), getattr(args, given[0]),
                        "a prefill or decode pool needs --disagg (and both pools)")


def check(work: ServeWorkload) -> None:
    """check_serve_workload's refusals, naming the flag."""
    try:
        check_serve_workload(work, "command line", "")
    except SpecError as err:
        raise SpecError("command line", "--" + err.field.replace("_", "-"), err.value, err.allowed) from None


def show(args, record: dict) -> int:
    """Print a serving run's figures (JSON with --json): the serving columns, the energy ones
    the point fills, and why it does not fit where it does not."""
    shown = {}
    for name in ("model", "parameters", "active_parameters", "feasible", "infeasible_reason", *SERVE_COLUMNS,
                 "kv_transfer_s", *ENERGY, "usd_per_million_tokens"):
        value = record.get(name)
        value = None if isinstance(value, float) and math.isnan(value) else value
        if value or name not in ENERGY + ("infeasible_reason", "usd_per_million_tokens"):
            shown[name] = value
    if args.json:
        print(json.dumps(shown, sort_keys=True))
        return 0
    for name, value in shown.items():
        print(f"{name:32} {value:.6g}" if isinstance(value, float) else f"{name:32} {value}")
    return 0
