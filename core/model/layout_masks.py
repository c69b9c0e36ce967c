"""check_layout over many layouts at once: for each row of columns of Parallelism fields, the
number of the first rule it breaks (0: legal), in check_layout's order. Planning a grid of
millions of combinations needs this; one layout at a time, check_layout is the rule book.

The two agree rule for rule (tests/test_sweep_grid.py compares them on random spaces): a rule
added to check_layout goes here too, in the same place. What a rule's reason says comes from
check_layout itself, called for one member of each group of rows that share `REASON_INPUTS`."""
import math

import numpy as np

from .layout import PLACEMENT, TRAINING_ONLY, _TRAINING_DEFAULTS, _split_layers, recipe_mismatch, untaken_knobs
from .specs import LOW_PRECISION_DTYPES, InferWorkload, TrainWorkload

# Per rule (index + 1 is its number): the columns its reason's text depends on ("model" and
# "hardware" are the spec variants' codes).
REASON_INPUTS = (
    ("hardware",),                                      # fp8_recipe does not fit the dtype
    ("placement",),                                     # placement not an order of PLACEMENT
    ("dp", "tp", "pp", "cp"),                           # dp*tp*pp*cp != gpus
    (),                                                 # inference: cp > 1
    ("hardware",),                                      # inference: nvfp4 KV cache without an nvfp4 peak
    TRAINING_ONLY,                                      # inference: training knobs set
    ("ep", "tp", "pp"),                                 # serving: ep must divide an engine's tp*pp
    ("model", "tp"),                                    # heads % tp
    ("model", "tp"),                                    # kv_heads and tp
    ("model", "tp"),                                    # recurrent (linear / Mamba) heads % tp
    ("model", "cp"),                                    # cp > 1 over recurrent layers
    ("model", "tp"),                                    # ffn_hidden % tp
    (),                                                 # first/last with pp == 1
    ("first_stage_layers", "last_stage_layers"),        # one of first/last
    ("model", "pp", "virtual_stages", "first_stage_layers", "last_stage_layers"),  # layer split
    ("ep",),                                            # ep > 1 without experts
    ("model", "ep"),                                    # experts % ep
    ("ep", "etp", "tp", "dp", "cp"),                    # ep*etp must divide dp*cp*tp
    ("placement",),                                     # experts: placement starts tp, cp
    ("placement",),                                     # experts: pp not outermost
    ("etp",),                                           # etp without experts
    ("hardware",),                                      # fp8_params needs a low-precision dtype
    (), (), (), (),                                     # overlap_param_gather, reshard_after_forward,
                                                        # overlap_p2p_comm, overlap_tp_comm
    ("model", "etp", "tp"),                             # expert_ffn_hidden % etp
    ("etp",),                                           # etp range
    (), (), (),                                         # sp with tp 1, interleaved: vs >= 2, pp >= 2
    ("virtual_stages",),                                # virtual_stages without interleaved
    ("dp", "micro_batch"),                              # global_batch % (dp*micro_batch)
    ("cp",),                                            # seq % cp
    ("cp", "tp"),                                       # seq/cp % tp with sp
    (),                                                 # interleaved: micro-batches % pp
    ("hardware",),                                      # gpus above the network's NPUs
)


def layout_failures(columns: dict, models: tuple, model_codes: np.ndarray, hardware: tuple,
                    hardware_codes: np.ndarray, work, gpus: int) -> np.ndarray:
    """The first rule each row breaks (int8, 0 = legal). `columns` maps every Parallelism field
    to (codes, values): row i has values[codes[i]]; the spec codes index `models` / `hardware`."""
    n = len(model_codes)
    col = {name: _Column(codes, values) for name, (codes, values) in columns.items()}
    v = {name: c.array() for name, c in col.items() if name not in ("placement", "schedule", "recompute",
                                                                         "grad_dtype", "master_weights",
                                                                         "optimizer_dtype", "sp",
                                                                         "overlap_param_gather")}
    expert_tp = np.where(v["etp"] != 0, v["etp"], v["tp"])
    interleaved = col["schedule"].map(lambda s: s == "interleaved")
    moe = np.array([m.moe is not None for m in models])[model_codes]
    recurrent_specs = [m.recurrent if m.recurrent is not None and any(
        spec.mixer in ("linear", "mamba") for spec, _ in m.layer_groups()) else None for m in models]
    recurrent = np.array([r is not None for r in recurrent_specs])[model_codes]
    spec = {
        "heads": np.array([m.heads for m in models])[model_codes],
        "kv_heads": np.array([m.kv_heads for m in models])[model_codes],
        "ffn_hidden": np.array([m.ffn_hidden for m in models])[model_codes],
        "experts": np.array([m.moe.experts if m.moe else 1 for m in models])[model_codes],
        "expert_ffn": np.array([m.moe.expert_ffn_hidden if m.moe else 1 for m in models])[model_codes],
        "recurrent_heads": np.array([r.heads if r else 1 for r in recurrent_specs])[model_codes],
        "recurrent_key_heads": np.array([r.key_heads if r else 1 for r in recurrent_specs])[model_codes],
    }
    par_gpus = v["dp"] * v["tp"] * v["pp"] * v["cp"]
    uses_experts = (v["ep"] > 1) | (expert_tp != v["tp"])
    first_last = (v["first_stage_layers"] != 0) | (v["last_stage_layers"] != 0)
    # The planner resolves sp and overlap_param_gather's `auto` before the rules, so here they
    # are what Parallelism.training_sp and its resolved overlap_param_gather are.
    sp = training_sp = col["sp"].map(bool)
    param_gather = col["overlap_param_gather"].map(bool)
    rules = [
        np.array([bool(recipe_mismatch(hw.dtype, hw.fp8_recipe)) for hw in hardware])[hardware_codes],
        col["placement"].map(lambda p: sorted(p) != sorted(PLACEMENT)),
        par_gpus != gpus,
    ]
    infer = not isinstance(work, TrainWorkload)
    if infer:
        unused = np.zeros(n, bool)
        for name in untaken_knobs(work):
            unused |= col[name].map(lambda value, name=name: value != _TRAINING_DEFAULTS[name])
        nvfp4_kv = work.kv_dtype == "nvfp4"
        serving = not isinstance(work, InferWorkload)
        rules += [v["cp"] > 1,
                  np.array([nvfp4_kv and "nvfp4" not in dict(hw.gpu.peak_flops) for hw in hardware])[hardware_codes],
                  unused,
                  serving & (v["ep"] > 1) & ((v["tp"] * v["pp"]) % v["ep"] != 0)]
    else:
        rules += [np.zeros(n, bool)] * 4
    rules += [
        spec["heads"] % v["tp"] != 0,
        (spec["kv_heads"] % v["tp"] != 0) & (v["tp"] % spec["kv_heads"] != 0),
        recurrent & ((spec["recurrent_heads"] % v["tp"] != 0)
                     | ((spec["recurrent_key_heads"] % v["tp"] != 0) & (v["tp"] % spec["recurrent_key_heads"] != 0))),
        recurrent & (v["cp"] > 1),
        spec["ffn_hidden"] % v["tp"] != 0,
        first_last & (v["pp"] == 1),
        (v["first_stage_layers"] != 0) != (v["last_stage_layers"] != 0),
        _bad_split(models, model_codes, col),
        (v["ep"] > 1) & ~moe,
        (v["ep"] > 1) & moe & (spec["experts"] % v["ep"] != 0),
        (v["ep"] > 1) & moe & ((v["dp"] * v["cp"] * v["tp"]) % (v["ep"] * expert_tp) != 0),
        uses_experts & col["placement"].map(lambda p: tuple(p[:2]) != ("tp", "cp")),
        uses_experts & (v["pp"] > 1) & col["placement"].map(lambda p: p[-1] != "pp")
        & (v["ep"] * expert_tp != v["tp"] * v["cp"]),
        (v["etp"] != 0) & ~moe,
        col["fp8_params"].map(bool) & ~np.array([hw.dtype in LOW_PRECISION_DTYPES for hw in hardware])[hardware_codes],
        param_gather & (v["zero"] == 0),
        ~col["reshard_after_forward"].map(bool) & (v["zero"] < 3),
        col["overlap_p2p_comm"].map(bool) & ~interleaved,
        col["overlap_tp_comm"].map(bool) & ~training_sp,
        moe & (spec["expert_ffn"] % expert_tp != 0),
        (v["etp"] < 0) | ((v["etp"] != 0) & (v["etp"] > v["tp"] * v["cp"] * v["dp"])),
        sp & (v["tp"] == 1),
        interleaved & (v["virtual_stages"] < 2),
        interleaved & (v["pp"] < 2),
        ~interleaved & (v["virtual_stages"] != 1),
    ]
    if isinstance(work, TrainWorkload):
        per_step = v["dp"] * v["micro_batch"]
        seq_per_cp = work.seq // v["cp"]
        rules += [
            work.global_batch % per_step != 0,
            work.seq % v["cp"] != 0,
            training_sp & (seq_per_cp % v["tp"] != 0),
            interleaved & ((work.global_batch // per_step) % v["pp"] != 0),
        ]
    else:
        rules += [np.zeros(n, bool)] * 4
    rules.append(np.array([_network_too_small(hw, gpus) for hw in hardware])[hardware_codes])
    failed = np.zeros(n, np.int8)
    for number, broken in reversed(list(enumerate(rules, start=1))):
        failed[np.broadcast_to(broken, (n,))] = number  # the first rule broken is written last
    return failed


def _network_too_small(hw, gpus: int) -> bool:
    sizes = [d.size for d in hw.network]
    return all(sizes) and gpus > math.prod(sizes)


def _bad_split(models: tuple, model_codes: np.ndarray, col: dict) -> np.ndarray:
    """check_layout's layer-split rule through core's own split (`_split_layers`), once per
    distinct (model, pp, virtual_stages, first, last)."""
    names = ("pp", "virtual_stages", "first_stage_layers", "last_stage_layers")
    key = model_codes.astype(np.int64)
    for name in names:
        key = key * len(col[name].values) + col[name].codes
    unique, inverse = np.unique(key, return_inverse=True)
    bad = []
    for code in unique.tolist():
        values = []
        for name in reversed(names):
            code, index = divmod(code, len(col[name].values))
            values.append(col[name].values[index])
        last, first, virtual, pp = values
        split = _split_layers(models[code].layers, pp, virtual, first, last)
        bad.append(not split or min(split) < virtual)
    return np.array(bad, bool)[inverse.reshape(-1)]


class _Column:
    """A column as codes into its distinct values: rules on strings and tuples run once per value."""

    def __init__(self, codes: np.ndarray, values: tuple):
        self.codes, self.values = codes, values

    def array(self) -> np.ndarray:
        """The values per row; a column of one value is that value (rules broadcast it)."""
        return np.asarray(self.values[0]) if len(self.values) == 1 else np.asarray(self.values)[self.codes]

    def map(self, rule) -> np.ndarray:
        verdicts = np.array([bool(rule(value)) for value in self.values], bool)
        return verdicts[0] if len(verdicts) == 1 else verdicts[self.codes]
