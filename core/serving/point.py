"""One serving configuration as a study point: the layout's dp engines of tp x pp GPUs each
sharing a ServeWorkload's requests, or the workload's prefill and decode pools; the same path
`rapid run --mode serve` takes."""
from core.errors import SpecError
from core.model.layout import check_layout, serving_etp
from core.model.memory import kv_cache_bytes_per_token
from core.model.specs import KV_DTYPES, POOL_FIELDS, POOL_KNOBS, SERVE_POOLS, Parallelism, ServeWorkload

from .engines import engine_spec
from .service import Pool, check_load, check_pool, serve, serve_disagg
from .simulate import Load

# what lays out an aggregated engine, which a disaggregated point leaves at 1 (its pools lay it out)
ENGINE_KNOBS = ("tp", "pp", "ep", "attention_dp")


def load_of(work: ServeWorkload) -> Load:
    """The request stream a workload describes: a closed loop's first requests all at once, as
    the benchmark clients every engine was fitted with sent them (core/validation/serving.py)."""
    return Load(work.isl, work.osl, concurrency=work.concurrency, request_rate=work.request_rate,
                requests=work.requests, length_spread=work.length_spread, ramp_share=0.0)


def pool_of(work: ServeWorkload, pool: str) -> Pool:
    """The workload's `pool` ("prefill" or "decode") of a disaggregated deployment."""
    return Pool(**{name: getattr(work, f"{pool}_{name}") for name in POOL_FIELDS})


def check_serve_workload(work: ServeWorkload, source: str, prefix: str = "workload.") -> None:
    """One-line refusals of a workload that cannot be simulated, naming `prefix` + its field:
    the load, the engine, and each count of the layout a positive integer (how they combine
    with each other and the Parallelism is serve_layout_reason's)."""
    try:
        engine_spec(work.engine, work.max_num_tokens, work.max_batch, source)
        check_load(load_of(work), source)
        if work.kv_dtype and work.kv_dtype not in KV_DTYPES:
            raise SpecError(source, "kv_dtype", work.kv_dtype, f"expected one of {', '.join(KV_DTYPES)}")
        if not isinstance(work.disagg, bool):
            raise SpecError(source, "disagg", work.disagg, "expected true or false")
        for name in ("attention_dp", *POOL_KNOBS):
            value, least = getattr(work, name), 0 if name.endswith("batch") else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise SpecError(source, name, value, f"expected an integer >= {least}"
                                + (" (0: the engine's request cap)" if least == 0 else ""))
    except SpecError as err:
        raise SpecError(source, prefix + err.field, err.value, err.allowed) from None


def serve_layout_reason(model, hw, par: Parallelism, work: ServeWorkload, gpus: int) -> str:
    """Why a serving point's layout cannot run ("" when it can), beyond check_layout's rules: its
    etp the tp GPUs ep leaves (the one split the simulator times); an aggregated point's
    attention-DP ranks divide its engine's tp GPUs and it sets no pool; a disaggregated point is
    laid out by its pools alone, which fill the GPUs, each pool a layout check_layout accepts
    whose attention-DP and ep divide its tp. A model with no attention layer is not served (the
    simulator counts its cache in tokens, of which such a model keeps none)."""
    if not kv_cache_bytes_per_token(model, 1.0):
        return "a model without attention layers: serving is simulated over a KV cache of tokens, which it has none of"
    expert_tp = serving_etp(par.tp, par.ep)
    if par.etp and par.etp != expert_tp:
        return (f"etp ({par.etp}) must be tp / ep ({par.tp} / {par.ep} = {expert_tp}): a serving engine splits "
                "each expert over the GPUs of its tp that ep leaves (TensorRT-LLM's moe_tp_size)")
    if not work.disagg:
        settled = work.settled()
        pooled = [f"{name} = {getattr(work, name)}" for name in POOL_KNOBS
                  if getattr(work, name) != getattr(settled, name)]
        if pooled:
            return (f"{', '.join(pooled)}: disaggregated pool knobs, which an aggregated point (disagg false) "
                    "does not take")
        if par.tp % work.attention_dp:
            return (f"attention_dp ({work.attention_dp}) must divide an engine's tp ({par.tp}): each attention-DP "
                    "rank runs attention over tp / attention_dp of its GPUs")
        return ""
    engine = {"tp": par.tp, "pp": par.pp, "ep": par.ep, "attention_dp": work.attention_dp}
    set_ = [f"{name} = {value}" for name, value in engine.items() if value != 1]
    if set_:
        return (f"{', '.join(set_)}: an aggregated engine's knobs; a disaggregated point (disagg true) is laid out "
                "by its pools (prefill_*, decode_*), these left at 1")
    pools = {name: pool_of(work, name) for name in SERVE_POOLS}
    used = sum(pool.gpus for pool in pools.values())
    if used != gpus:
        sizes = " + ".join(f"{name} {p.workers} x {p.tp} GPUs" for name, p in pools.items())
        return f"{sizes} = {used}, not gpus = {gpus}"
    for name, pool in pools.items():
        try:
            check_pool(pool, "", f"{name}_")
        except SpecError as err:
            return f"{err.field} = {err.value}: {err.allowed}"
        etp = serving_etp(pool.tp, pool.ep) if pool.ep > 1 else 0
        reason = check_layout(model, hw, Parallelism(dp=pool.workers, tp=pool.tp, ep=pool.ep, etp=etp), work,
                              pool.gpus)
        if reason:
            return f"{name} pool: {reason}"
    return ""


def serve_point(model, hw, par: Parallelism, work: ServeWorkload, source: str = "") -> dict:
    """The serving figures (core.serving.service.SERVE_COLUMNS) of `par.dp` aggregated engines,
    or of the workload's prefill and decode pools when it is disaggregated."""
    engine = engine_spec(work.engine, work.max_num_tokens, work.max_batch, source)
    if work.disagg:
        return serve_disagg(model, hw, engine, load_of(work), pool_of(work, "prefill"), pool_of(work, "decode"),
                            work.kv_dtype, source)
    pool = Pool(workers=par.dp, tp=par.tp, pp=par.pp, ep=par.ep, attention_dp=work.attention_dp)
    return serve(model, hw, engine, load_of(work), pool, work.kv_dtype, source)
