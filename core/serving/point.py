"""One serving configuration as a study point: the layout's dp engines of tp x pp GPUs each,
sharing a ServeWorkload's requests; the same path `rapid run --mode serve` takes."""
from core.errors import SpecError
from core.model.specs import Parallelism, ServeWorkload

from .engines import engine_spec
from .service import Pool, check_load, serve
from .simulate import Load


def load_of(work: ServeWorkload) -> Load:
    """The request stream a workload describes: a closed loop's first requests all at once, as
    the benchmark clients every engine was fitted with sent them (core/validation/serving.py)."""
    return Load(work.isl, work.osl, concurrency=work.concurrency, request_rate=work.request_rate,
                requests=work.requests, length_spread=work.length_spread, ramp_share=0.0)


def check_serve_workload(work: ServeWorkload, source: str, prefix: str = "workload.") -> None:
    """One-line refusals of a workload that cannot be simulated, naming `prefix` + its field."""
    try:
        engine_spec(work.engine, work.max_num_tokens, work.max_batch, source)
        check_load(load_of(work), source)
    except SpecError as err:
        raise SpecError(source, prefix + err.field, err.value, err.allowed) from None


def serve_point(model, hw, par: Parallelism, work: ServeWorkload, source: str = "") -> dict:
    """The serving figures (core.serving.service.SERVE_COLUMNS) of `par.dp` aggregated engines."""
    engine = engine_spec(work.engine, work.max_num_tokens, work.max_batch, source)
    pool = Pool(workers=par.dp, tp=par.tp, pp=par.pp, ep=par.ep)
    return serve(model, hw, engine, load_of(work), pool, work.kv_dtype, source)
