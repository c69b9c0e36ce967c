"""Load and validate model and hardware specs from presets, YAML files or Hugging Face
`config.json`, with dotted-path overrides. Every problem raises SpecError naming the
file, the field, the value and what is allowed."""
import copy
import dataclasses
import difflib
import json
import re
from functools import lru_cache
from pathlib import Path

from core import units
from core.errors import SpecError
from core.textfile import parse_mapping, read_text
from .hf import HF_COSTED, HF_COSTLESS, HF_MODEL_TYPES, model_from_hf  # noqa: F401 (the loader's HF surface)
from .layout import recipe_mismatch
from .specs import (ACTIVATIONS, ATTENTION_KERNELS, COMPUTE_DTYPES, DTYPES, FFNS, MIXERS, NORMS, RECIPE_CHOICES,
                    POSITION_EMBEDDINGS, POWER_CLOCKS, RECURRENT_KINDS, SFU_EXP_PER_SM_PER_CLOCK, TOPOLOGIES,
                    KERNEL_ENGINES, Calibration, EngineAllReduce, EngineAttention, GpuSpec, HardwareSpec, MlaDecode,
                    MlaPrefill, LayerKind, LinkFault, MemoryLevel, ModelSpec, MoESpec, NetworkDim, PowerSpec, RecurrentSpec,
                    model_with_kinds)

PRESET_DIR = Path(__file__).parent / "presets"


def list_presets() -> dict:
    return {kind: sorted(p.stem for p in (PRESET_DIR / kind).glob("*.yaml"))
            for kind in ("models", "gpus")}


def _resolve(ref, kind: str) -> tuple[str, str, bool]:
    """(text, source name, is JSON) of a preset name or a file path; read on every call, so
    an edited file is never served from a cache."""
    ref = str(ref)
    preset = PRESET_DIR / kind / f"{ref}.yaml"
    path = preset if preset.is_file() else Path(ref)
    if not path.exists():
        names = ", ".join(list_presets()[kind])
        looks_like_file = path.suffix in (".yaml", ".yml", ".json") or "/" in ref
        raise SpecError("", "model" if kind == "models" else "hardware", ref,
                        f"no such file (presets: {names})" if looks_like_file
                        else f"not a preset ({names}) nor an existing file")
    source = str(path if path != preset else f"{PRESET_SOURCE}{ref}")
    return read_text(path, source), source, path.suffix == ".json"


PRESET_SOURCE = "preset "  # a preset's source reads `preset llama3.1-70b`


def _default_name(source: str) -> str:
    """A spec's name when its file gives none: the preset's name, or the file name without its suffix."""
    return source[len(PRESET_SOURCE):] if source.startswith(PRESET_SOURCE) else Path(source).stem


def apply_overrides(raw: dict, overrides: dict | None, source: str) -> dict:
    """Copy of `raw` with each dotted path (`gpu.hbm.bandwidth`, `network.ib.latency`,
    `network.0.size`) set to its value; a path must name an existing field."""
    if not overrides:
        return raw
    data = copy.deepcopy(raw)
    for path, value in overrides.items():
        node, parts = data, str(path).split(".")
        for i, part in enumerate(parts):
            last = i == len(parts) - 1
            if isinstance(node, list):
                index = _list_index(node, part)
                if index is None:
                    raise SpecError(source, path, value,
                                    f"'{part}' names no entry of {'.'.join(parts[:i]) or 'list'}")
                if last:
                    node[index] = value
                else:
                    node = node[index]
            elif isinstance(node, dict) and part in node:
                if last:
                    node[part] = value
                else:
                    node = node[part]
            else:
                keys = ", ".join(node) if isinstance(node, dict) else "none"
                raise SpecError(source, path, value, f"unknown field '{part}' (known here: {keys})")
    return data


def _list_index(items: list, part: str) -> int | None:
    if part.isdigit() and int(part) < len(items):
        return int(part)
    for i, item in enumerate(items):
        if isinstance(item, dict) and item.get("name") == part:
            return i
    return None


class _Fields:
    """Reads typed fields out of one mapping and rejects keys nobody asked for."""

    def __init__(self, data: dict, source: str, prefix: str = ""):
        if not isinstance(data, dict):
            raise SpecError(source, prefix.rstrip(".") or "<file>", data, "expected a mapping")
        self.data, self.source, self.prefix, self.seen = data, source, prefix, set()

    def name(self, key: str) -> str:
        return self.prefix + key

    def raw(self, key: str, default=None, required: bool = False):
        self.seen.add(key)
        if key not in self.data or self.data[key] is None:
            if required:
                near = difflib.get_close_matches(key, [str(k) for k in self.data if k not in _known_keys()], n=1)
                raise SpecError(self.source, self.name(key), "<missing>", "this field is required"
                                + (f" (is '{self.name(near[0])}' a misspelling of it?)" if near else ""))
            return default
        return self.data[key]

    def integer(self, key: str, default=None, minimum: int = 1) -> int:
        value = self.raw(key, default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise SpecError(self.source, self.name(key), value, f"expected an integer >= {minimum}")
        return value

    def number(self, key: str, default=None, low: float = 0.0, high: float = float("inf")) -> float:
        value = self.raw(key, default, required=default is None)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= high:
            raise SpecError(self.source, self.name(key), value, f"expected a number in ({low}, {high}]")
        return float(value)

    def choice(self, key: str, allowed: tuple, default=None) -> str:
        value = self.raw(key, default, required=default is None)
        if value not in allowed:
            raise SpecError(self.source, self.name(key), value, f"expected one of {', '.join(allowed)}")
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise SpecError(self.source, self.name(key), value, "expected true or false")
        return value

    def unit(self, key: str, parse, default=None) -> float:
        return _quantity(self.raw(key, default, required=default is None), parse, self.source, self.name(key))

    def done(self, ignored: tuple = ()) -> None:
        unknown = [k for k in self.data if k not in self.seen and k not in ignored]
        if unknown:
            raise SpecError(self.source, self.name(unknown[0]), self.data[unknown[0]],
                            f"unknown field (allowed: {', '.join(sorted(self.seen))})")


@lru_cache(maxsize=1)
def _known_keys() -> frozenset:
    """Every key some block of a spec file may hold: the names this module reads, written as
    string literals in it. A missing field's near miss is offered only among keys not one of
    these (ll_bandwidth beside a missing link_bandwidth is a field of its own)."""
    return frozenset(re.findall(r'"([a-z][a-z0-9_]*)"', Path(__file__).read_text(encoding="utf-8")))


_MODEL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(ModelSpec)}  # one source of truth for a YAML's defaults


class BaseUnits(float):
    """A number already in its base unit, as the loader itself fills a default in (an inherited
    calibration's kernel overhead), never one a user wrote."""


# the unit a plain number would silently be read in, and how to write it instead
_UNIT_HINTS = {units.parse_bandwidth: "bytes/s; write e.g. 3350 GB/s or 400 Gb/s",
               units.parse_bytes: "bytes; write e.g. 80 GiB or 228 KiB",
               units.parse_time: "seconds; write e.g. 4 us or 1.2 ms",
               units.parse_flops: "FLOP/s; write e.g. 989.5 TFLOP/s",
               units.parse_frequency: "Hz; write e.g. 1830 MHz",
               units.parse_power: "watts; write e.g. 700 W",
               units.parse_energy: "joules; write e.g. 0.6 pJ"}


def _quantity(value, parse, source: str, field: str) -> float:
    """A quantity in its base unit; a number written without a unit is refused (but 0, and a
    default the loader filled in)."""
    parsed = parse(value, source, field)
    if parsed and not isinstance(value, BaseUnits) and _PLAIN_NUMBER.fullmatch(str(value)):
        raise SpecError(source, field, value, f"a unit is needed: a plain number would be read as {_UNIT_HINTS[parse]}")
    return parsed


_PLAIN_NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")


# Model fields a file may leave out that an override (a study knob, rapid run's --mtp-layers)
# may still set, in every format: the MTP modules trained beside the model.
MODEL_OVERRIDABLE_OPTIONAL = ("mtp_layers",)


def model_from_mapping(data: dict, source: str) -> ModelSpec:
    if "model_type" in data or "num_hidden_layers" in data:
        data = dict(data)
        mtp = data.pop("mtp_layers", None)
        spec = model_from_hf(data, source, _default_name(source) if source.startswith(PRESET_SOURCE) else "")
        if mtp is None:
            return spec
        return dataclasses.replace(spec, mtp_layers=_Fields({"mtp_layers": mtp}, source).integer("mtp_layers", minimum=0))
    f = _Fields(data, source)
    hidden = f.integer("hidden")
    heads = f.integer("heads")
    if hidden % heads:
        raise SpecError(source, "hidden", hidden, f"must be divisible by heads ({heads})")
    kv_heads = f.integer("kv_heads", heads)
    if kv_heads > heads or heads % kv_heads:
        raise SpecError(source, "kv_heads", kv_heads, f"must divide heads ({heads})")
    moe_raw = f.raw("moe")
    moe = None
    if moe_raw is not None:
        m = _Fields(moe_raw, source, "moe.")
        moe = MoESpec(experts=m.integer("experts"), top_k=m.integer("top_k"),
                      expert_ffn_hidden=m.integer("expert_ffn_hidden"),
                      shared_expert_ffn_hidden=m.integer("shared_expert_ffn_hidden", 0, minimum=0),
                      capacity_factor=m.number("capacity_factor", 0.0, low=-1e-9))
        m.done()
        if moe.top_k > moe.experts:
            raise SpecError(source, "moe.top_k", moe.top_k, f"must be <= experts ({moe.experts})")
    layers = f.integer("layers")
    recurrent_raw = f.raw("recurrent")
    recurrent = None if recurrent_raw is None else _recurrent(_Fields(recurrent_raw, source, "recurrent."))
    kinds = _layer_kinds(f, layers, moe is not None, recurrent is not None)
    if recurrent is not None and not any(kind.mixer in ("linear", "mamba") for kind in kinds):
        raise SpecError(source, "recurrent", recurrent_raw, "no layer_kinds entry has mixer linear or mamba to use it")
    ffn_hidden = f.integer("ffn_hidden", 4 * hidden)
    base = dict(
        name=str(f.raw("name", _default_name(source))),
        layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
        ffn_hidden=0 if kinds and {k.ffn for k in kinds} == {"none"} else ffn_hidden, vocab=f.integer("vocab"),
        activation=f.choice("activation", ACTIVATIONS, _MODEL_DEFAULTS["activation"]),
        norm=f.choice("norm", NORMS, _MODEL_DEFAULTS["norm"]),
        tied_embeddings=f.boolean("tied_embeddings", _MODEL_DEFAULTS["tied_embeddings"]),
        position_embedding=f.choice("position_embedding", POSITION_EMBEDDINGS, _MODEL_DEFAULTS["position_embedding"]),
        attention_kernel=f.choice("attention_kernel", ATTENTION_KERNELS, _MODEL_DEFAULTS["attention_kernel"]),
        dropout=f.boolean("dropout", _MODEL_DEFAULTS["dropout"]),
        max_position=f.integer("max_position", _MODEL_DEFAULTS["max_position"], minimum=0),
    )
    extra = dict(moe=moe, recurrent=recurrent, mtp_layers=f.integer("mtp_layers", _MODEL_DEFAULTS["mtp_layers"], minimum=0))
    f.done()
    return model_with_kinds(base, kinds, **extra) if kinds else ModelSpec(**base, **extra)


# A layer_kinds entry's fields, beside `count`.
LAYER_KIND_FIELDS = ("count", "mixer", "window", "chunk", "ffn")


def _layer_kinds(f: _Fields, layers: int, has_moe: bool, has_recurrent: bool) -> list:
    """The YAML's `layer_kinds`: runs of layers alike ({count, mixer, window, chunk, ffn}), the
    list repeated to fill `layers` (its counts add up to `layers` or to a divisor of it); []
    when absent (every layer the model's own kind: attention, an MoE FFN when `moe` is set)."""
    entries = f.raw("layer_kinds")
    if entries is None:
        return []
    if not isinstance(entries, list) or not entries:
        raise SpecError(f.source, "layer_kinds", entries, "expected a list of runs of layers, e.g. "
                        "[{count: 3, ffn: dense}, {count: 58, ffn: moe}]")
    pattern = []
    for i, entry in enumerate(entries):
        e = _Fields(entry, f.source, f"layer_kinds.{i}.")
        count = e.integer("count", 1)
        mixer = e.choice("mixer", MIXERS, "attention")
        if mixer in ("linear", "mamba") and not has_recurrent:
            raise SpecError(f.source, e.name("mixer"), mixer, "needs the model's `recurrent` block (its state's shape)")
        ffn = e.choice("ffn", FFNS, "moe" if has_moe else "dense")
        if ffn == "moe" and not has_moe:
            raise SpecError(f.source, e.name("ffn"), ffn, "needs the model's `moe` block")
        if mixer == "none" and ffn == "none":
            raise SpecError(f.source, e.name("ffn"), ffn, "a layer with mixer none needs an FFN")
        window, chunk = e.integer("window", 0, minimum=0), e.integer("chunk", 0, minimum=0)
        if (window or chunk) and mixer != "attention":
            raise SpecError(f.source, e.name("window" if window else "chunk"), window or chunk,
                            "a window or chunk bounds attention only (mixer: attention)")
        if window and chunk:
            raise SpecError(f.source, e.name("chunk"), chunk, "give a window or a chunk, not both")
        e.done()
        pattern += [LayerKind(mixer, window=window, chunk=chunk, ffn=ffn)] * count
    if layers % len(pattern):
        raise SpecError(f.source, "layer_kinds", f"{len(pattern)} layers",
                        f"the runs' counts must add up to layers ({layers}) or to a divisor of it (a repeated pattern)")
    return pattern * (layers // len(pattern))


def _recurrent(r: _Fields) -> RecurrentSpec:
    """The YAML's `recurrent` block: the state of its linear-attention or Mamba-2 layers."""
    spec = RecurrentSpec(kind=r.choice("kind", RECURRENT_KINDS), heads=r.integer("heads"),
                         key_heads=r.integer("key_heads"), key_dim=r.integer("key_dim"),
                         value_dim=r.integer("value_dim"), conv_kernel=r.integer("conv_kernel", 4))
    r.done()
    return spec


def _memory_level(data, source: str, prefix: str, capacity_key: str) -> MemoryLevel:
    f = _Fields(data, source, prefix)
    level = MemoryLevel(capacity_bytes=f.unit(capacity_key, units.parse_bytes),
                        bandwidth_bps=f.unit("bandwidth", units.parse_bandwidth))
    f.done()
    if level.capacity_bytes <= 0:
        raise SpecError(source, f.name(capacity_key), f.data[capacity_key], "expected a positive size such as 80 GB")
    return level


def _gpu_from_mapping(data, source: str) -> GpuSpec:
    f = _Fields(data, source, "gpu.")
    flops_raw = f.raw("peak_flops", required=True)
    if not isinstance(flops_raw, dict) or not flops_raw:
        raise SpecError(source, "gpu.peak_flops", flops_raw, "expected a mapping dtype -> FLOP/s")
    peak = []
    for dtype, value in flops_raw.items():
        if dtype not in DTYPES:
            raise SpecError(source, f"gpu.peak_flops.{dtype}", value, f"dtype must be one of {', '.join(DTYPES)}")
        peak.append((dtype, _quantity(value, units.parse_flops, source, f"gpu.peak_flops.{dtype}")))
    gpu = GpuSpec(
        name=str(f.raw("name", "gpu")), peak_flops=tuple(peak), sm_count=f.integer("sm_count"),
        clock_hz=f.unit("clock", units.parse_frequency),
        register_bytes_per_sm=f.unit("registers_per_sm", units.parse_bytes, "256 KiB"),
        sram=_memory_level(f.raw("sram", required=True), source, "gpu.sram.", "capacity_per_sm"),
        l2=_memory_level(f.raw("l2", required=True), source, "gpu.l2.", "capacity"),
        hbm=_memory_level(f.raw("hbm", required=True), source, "gpu.hbm.", "capacity"),
        launch_overhead_s=f.unit("launch_overhead", units.parse_time, "4 us"),
        graph_launch_overhead_s=f.unit("graph_launch_overhead", units.parse_time, "1 us"),
        mma_sync_share=f.number("mma_sync_share", 1.0, high=1.0),
        operand_multicast=f.integer("operand_multicast", 1),
        stream_k=f.boolean("stream_k", False),
        token_tile_step=f.integer("token_tile_step", 0, minimum=0),
        wide_tile_step=_wide_tile_step(f),
        block_scale_step_s=f.unit("block_scale_step", units.parse_time, "0 s"),
        exp_per_sm_per_clock=f.number("exp_per_sm_per_clock", SFU_EXP_PER_SM_PER_CLOCK),
        tensor_memory_columns=_tensor_memory_columns(f),
        power=_power(f, dict(peak)),
    )
    f.done()
    return gpu


MAX_TENSOR_MEMORY_COLUMNS = 4096  # 8 x Blackwell's 512: a larger count is bytes or lanes mistaken for columns


def _wide_tile_step(f) -> int:
    """gpu.wide_tile_step: 0, or a step of columns that divides 128 and offers a width between
    128 and 256 (core.model.ops.gemm.wide_tiles): 1, 2, 4, ... 64."""
    step = f.integer("wide_tile_step", 0, minimum=0)
    if step and (step >= 128 or 128 % step):
        raise SpecError(f.source, f.name("wide_tile_step"), step, "expected 0 or a divisor of 128 below it "
                        "(1, 2, 4, 8, 16, 32 or 64)")
    return step


def _tensor_memory_columns(f) -> int:
    columns = f.integer("tensor_memory_columns", 0, minimum=0)
    if columns > MAX_TENSOR_MEMORY_COLUMNS:
        raise SpecError(f.source, f.name("tensor_memory_columns"), columns,
                        f"expected 32-bit columns per SM, 0 to {MAX_TENSOR_MEMORY_COLUMNS} (Blackwell: 512)")
    return columns


POWER_FIELDS = ("tdp", "power_limit", "idle_power", "active_power", "flop_energy", "hbm_energy", "link_energy",
                "power_clock", "voltage_floor", "node_overhead", "pue")


def _power(f, peak: dict) -> PowerSpec | None:
    """The gpu block's power figures: all of them or none (then nothing is said about power,
    and energy columns stay empty rather than read as zero)."""
    given = [key for key in POWER_FIELDS if f.data.get(key) is not None]
    if not given:
        f.seen.update(POWER_FIELDS)
        return None
    for key in ("tdp", "idle_power", "active_power", "flop_energy", "hbm_energy", "link_energy"):
        if f.data.get(key) is None:
            raise SpecError(f.source, f.name(key), "<missing>",
                            f"required once any power field is given ({', '.join(given)}); see docs/hardware.md")
    tdp = f.unit("tdp", units.parse_power)
    limit = f.unit("power_limit", units.parse_power, BaseUnits(tdp))
    idle = f.unit("idle_power", units.parse_power)
    if tdp <= 0:
        raise SpecError(f.source, f.name("tdp"), f.data["tdp"], "expected a positive power such as 700 W")
    if not idle < limit:
        raise SpecError(f.source, f.name("power_limit"), f.data.get("power_limit", f.data["tdp"]),
                        f"expected a limit above the idle power ({idle:g} W): the GPU could run nothing")
    if limit > tdp:
        raise SpecError(f.source, f.name("power_limit"), f.data["power_limit"],
                        f"expected at most the TDP ({tdp:g} W), the highest limit the board takes (nvidia-smi -pl); "
                        "for a larger power budget, raise tdp too")
    energies = f.raw("flop_energy")
    if not isinstance(energies, dict):
        raise SpecError(f.source, f.name("flop_energy"), energies,
                        "expected a mapping dtype -> energy per FLOP (0.6 pJ)")
    missing = [dtype for dtype in peak if dtype not in energies]
    unknown = [dtype for dtype in energies if dtype not in peak]
    if missing or unknown:
        raise SpecError(f.source, f.name("flop_energy"), energies,
                        f"expected one energy per dtype of gpu.peak_flops ({', '.join(peak)})")
    flop_energy = tuple((dtype, _quantity(value, units.parse_energy, f.source, f.name(f"flop_energy.{dtype}")))
                        for dtype, value in energies.items())
    return PowerSpec(tdp_w=tdp, limit_w=limit, idle_w=idle, active_w=f.unit("active_power", units.parse_power),
                     flop_energy_j=flop_energy, hbm_energy_j_per_byte=f.unit("hbm_energy", units.parse_energy),
                     link_energy_j_per_byte=f.unit("link_energy", units.parse_energy),
                     clock=f.choice("power_clock", POWER_CLOCKS, "relative"),
                     voltage_floor=_voltage_floor(f),
                     node_overhead_w=f.unit("node_overhead", units.parse_power, 0),
                     pue=_pue(f))


def _voltage_floor(f) -> float:
    value = f.raw("voltage_floor", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise SpecError(f.source, f.name("voltage_floor"), value,
                        "expected a voltage share in [0, 1): where the voltage-frequency line meets zero clock")
    return float(value)


def _pue(f) -> float:
    value = f.raw("pue", 1.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1.0 <= value <= 10.0:
        raise SpecError(f.source, f.name("pue"), value,
                        "expected a power usage effectiveness in [1, 10] (1: no facility overhead)")
    return float(value)


def _network_from_list(items, source: str) -> tuple:
    if not isinstance(items, list) or not items:
        raise SpecError(source, "network", items, "expected a non-empty list of dimensions, innermost first")
    dims = []
    for i, item in enumerate(items):
        f = _Fields(item, source, f"network.{i}.")
        size = f.raw("size", required=True)
        if size != "auto" and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise SpecError(source, f.name("size"), size, "expected a positive integer or auto")
        dims.append(NetworkDim(
            name=str(f.raw("name", f"dim{i}")), topology=f.choice("topology", TOPOLOGIES),
            size=0 if size == "auto" else size,
            link_bandwidth_bps=f.unit("link_bandwidth", units.parse_bandwidth),
            latency_s=f.unit("latency", units.parse_time),
            efficiency=f.number("efficiency", 1.0, high=1.0),
            oversubscription=f.number("oversubscription", 1.0, high=1e6),
            switch_reduction=_fraction(f, "switch_reduction"),
            ll_bandwidth_bps=_optional_bandwidth(f, "ll_bandwidth"),
            ring_fill_chunks=f.number("ring_fill_chunks", 0.0, low=-1e-12, high=8.0),
            all_to_all_fill_chunks=f.number("all_to_all_fill_chunks", 0.0, low=-1e-12, high=8.0),
            byte_reduce_fill_chunks=f.number("byte_reduce_fill_chunks", 0.0, low=-1e-12, high=8.0),
        ))
        f.done()
        if dims[-1].name in [d.name for d in dims[:-1]]:
            raise SpecError(source, f.name("name"), dims[-1].name, "a name another dimension has (each names its "
                            "breakdown column and its hardware.network.<name> overrides: give each its own)")
    if any(d.size == 0 for d in dims[:-1]):
        raise SpecError(source, "network", "auto", "only the outermost dimension may have size auto")
    return tuple(dims)


def _fraction(f, key: str) -> float:
    """An optional share in [0, 1], 0 when absent."""
    value = f.raw(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise SpecError(f.source, f.name(key), value, "expected a share in [0, 1] (0 = none)")
    return float(value)


def _optional_bandwidth(f, key: str) -> float:
    """An optional bandwidth in bytes per second, 0 when absent."""
    value = f.raw(key)
    return 0.0 if value is None else _quantity(value, units.parse_bandwidth, f.source, f.name(key))


def _faults_from_list(items, source: str) -> tuple:
    if not isinstance(items, list):
        raise SpecError(source, "faults", items, "expected a list of {link: [a, b], factor: f}")
    faults = []
    for i, item in enumerate(items):
        f = _Fields(item, source, f"faults.{i}.")
        link = f.raw("link", required=True)
        if (not isinstance(link, list) or len(link) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in link)):
            raise SpecError(source, f.name("link"), link, "expected two node ids [a, b]")
        factor = f.raw("factor", required=True)
        if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 <= factor <= 1:
            raise SpecError(source, f.name("factor"), factor, "expected a bandwidth factor in [0, 1] (0 = link down)")
        earlier = next((j for j, fault in enumerate(faults) if {fault.src, fault.dst} == set(link)), None)
        if earlier is not None:
            raise SpecError(source, f.name("link"), link, f"the link of faults.{earlier} again (a fault degrades both "
                            "directions of a link; give each link once)")
        faults.append(LinkFault(link[0], link[1], float(factor),
                                f.unit("extra_latency", units.parse_time, 0)))
        f.done()
    return tuple(faults)


def _per_engine(raw, source: str, base: tuple, block: str, build) -> tuple:
    """`calibration.<block>`: {engine: {fields}} for engines of KERNEL_ENGINES, as ((engine,
    build(its fields, engine)), ...) sorted by engine; `base` where the file has no block."""
    if raw is None:
        return base
    if not isinstance(raw, dict):
        raise SpecError(source, f"calibration.{block}", raw, "expected a mapping {engine: {fields}}")
    out = []
    for engine in sorted(raw):
        if engine not in KERNEL_ENGINES:
            raise SpecError(source, f"calibration.{block}", engine, f"expected one of {', '.join(KERNEL_ENGINES)}")
        k = _Fields(raw[engine], source, f"calibration.{block}.{engine}.")
        out.append((engine, build(k, engine)))
        k.done()
    return tuple(out)


def _engine_attention(raw, source: str, base: tuple) -> tuple:
    """`calibration.engine_attention`: each engine's EngineAttention (times with a unit, shares
    in (0, 1], counts >= 1)."""
    def build(k, engine):
        pair_s = k.unit("decode_pair", units.parse_time)
        floor_s = k.unit("decode_floor", units.parse_time)
        tile_s = k.unit("prefill_tile", units.parse_time)
        return EngineAttention(
            prefill_tensor_share=k.number("prefill_tensor_share", high=1.0),
            prefill_fp8_tensor_share=k.number("prefill_fp8_tensor_share", high=1.0),
            prefill_cache_share=k.number("prefill_cache_share", high=1.0),
            prefill_tile_s=tile_s,
            prefill_floor_s=k.unit("prefill_floor", units.parse_time),
            decode_floor_s=floor_s,
            decode_pair_s=pair_s,
            decode_bandwidth_share=k.number("decode_bandwidth_share", high=1.0),
            decode_fp8_bandwidth_share=k.number("decode_fp8_bandwidth_share", high=1.0),
            decode_split_tokens=float(k.integer("decode_split_tokens")),
            decode_max_splits=float(k.integer("decode_max_splits")),
            decode_saturation=k.number("decode_saturation"),
            decode_score_s=k.unit("decode_score", units.parse_time),
            decode_max_group=k.integer("decode_max_group", 0, minimum=0),
            decode_group_pair_s=k.unit("decode_group_pair", units.parse_time, BaseUnits(pair_s)),
            decode_fp8_group_floor_s=k.unit("decode_fp8_group_floor", units.parse_time, BaseUnits(floor_s)),
            decode_fp8_widen_s=k.unit("decode_fp8_widen", units.parse_time, BaseUnits(0.0)),
            decode_fp8_group_native=k.boolean("decode_fp8_group_native", False),
            prefill_fp8_query_cast=k.boolean("prefill_fp8_query_cast", False),
            prefill_softmax_exposed=k.number("prefill_softmax_exposed", 0.0, low=-1e-12, high=1.0),
            mla_decode=_mla_decode(k.raw("mla_decode"), source, f"calibration.engine_attention.{engine}.mla_decode."),
            mla_prefill=_mla_prefill(k.raw("mla_prefill"), source,
                                     f"calibration.engine_attention.{engine}.mla_prefill.", tile_s))
    return _per_engine(raw, source, base, "engine_attention", build)


def _engine_allreduce(raw, source: str, base: tuple) -> tuple:
    """`calibration.engine_allreduce`: each engine's EngineAllReduce (times and a bandwidth above
    0, with their units; max_gpus at least 2, 8 unless given)."""
    def build(k, engine):
        bandwidth_bps = k.unit("bandwidth", units.parse_bandwidth)
        if bandwidth_bps <= 0:
            raise SpecError(source, k.name("bandwidth"), k.raw("bandwidth"), "expected a bandwidth above 0")
        return EngineAllReduce(floor_s=k.unit("floor", units.parse_time),
                               per_peer_s=k.unit("per_peer", units.parse_time), bandwidth_bps=bandwidth_bps,
                               max_gpus=k.integer("max_gpus", 8, minimum=2))
    return _per_engine(raw, source, base, "engine_allreduce", build)


def _optional_block(raw, source: str, prefix: str, what: str, build):
    """An optional nested block (None when absent): a mapping whose fields `build` reads."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise SpecError(source, prefix.rstrip("."), raw, f"expected a mapping of {what}")
    k = _Fields(raw, source, prefix)
    block = build(k)
    k.done()
    return block


def _mla_decode(raw, source: str, prefix: str) -> MlaDecode | None:
    """An engine's optional `mla_decode` block (times with a unit, shares in (0, 1]; an FP8
    cache's sweep share defaults to the BF16 one's)."""
    def block(k) -> MlaDecode:
        bandwidth = k.number("bandwidth_share", high=1.0)
        return MlaDecode(floor_s=k.unit("floor", units.parse_time), sequence_s=k.unit("sequence", units.parse_time),
                         bandwidth_share=bandwidth, tensor_share=k.number("tensor_share", high=1.0),
                         fp8_tensor_share=k.number("fp8_tensor_share", high=1.0),
                         fp8_bandwidth_share=k.number("fp8_bandwidth_share", bandwidth, high=1.0))
    return _optional_block(raw, source, prefix, "the MLA decode kernel's figures", block)


def _mla_prefill(raw, source: str, prefix: str, gqa_tile_s: float) -> MlaPrefill | None:
    """An engine's optional `mla_prefill` block (its MLA context kernel's shares, in (0, 1], and
    its tile cost with a unit, the GQA kernel's `gqa_tile_s` unless given)."""
    return _optional_block(raw, source, prefix, "the MLA context kernel's shares", lambda k: MlaPrefill(
        tensor_share=k.number("tensor_share", high=1.0),
        fp8_tensor_share=k.number("fp8_tensor_share", high=1.0),
        tile_s=k.unit("tile", units.parse_time, BaseUnits(gqa_tile_s))))


def _calibration(raw, source: str) -> Calibration:
    """The `calibration` block: the factors it writes, the rest from the GPU preset it
    `inherits` (or neutral when it names none). A file without the block is refused, as
    neutral factors (every efficiency 1) would flatter it beside a calibrated preset."""
    if raw is None:
        raise SpecError(source, "calibration", "<missing>",
                        "required: the fitted factors, {inherits: <GPU preset>} to take a GPU family's "
                        f"({', '.join(list_presets()['gpus'])}), or {{}} for the datasheet alone (every efficiency 1)")
    c = _Fields(raw, source, "calibration.")
    parent = c.raw("inherits")
    if parent is not None and (parent not in list_presets()["gpus"] or parent == _default_name(source)):
        raise SpecError(source, "calibration.inherits", parent, f"expected a GPU preset: {', '.join(list_presets()['gpus'])}")
    base = load_hardware(parent).calibration if parent is not None else Calibration()
    calibration = Calibration(
        sustained_clock=c.number("sustained_clock", base.sustained_clock, high=1.0),
        compute_efficiency=c.number("compute_efficiency", base.compute_efficiency, high=1.0),
        fp8_efficiency=c.number("fp8_efficiency", base.fp8_efficiency, high=1.0),
        nvfp4_efficiency=c.number("nvfp4_efficiency", base.nvfp4_efficiency, high=1.0),
        fp8_block_efficiency=c.number("fp8_block_efficiency", base.fp8_block_efficiency, high=1.0),
        step_efficiency=c.number("step_efficiency", base.step_efficiency, high=1.0),
        fp8_step_efficiency=c.number("fp8_step_efficiency", base.fp8_step_efficiency, high=1.0),
        attention_efficiency=c.number("attention_efficiency", base.attention_efficiency, high=1.0),
        memory_efficiency=c.number("memory_efficiency", base.memory_efficiency, high=1.0),
        stream_efficiency=c.number("stream_efficiency", base.stream_efficiency, high=1.0),
        store_efficiency=c.number("store_efficiency", base.store_efficiency, high=1.0),
        network_efficiency=c.number("network_efficiency", base.network_efficiency, high=1.0),
        kernel_overhead_s=c.unit("kernel_overhead", units.parse_time, BaseUnits(base.kernel_overhead_s)),
        collective_step_s=c.unit("collective_step", units.parse_time, BaseUnits(base.collective_step_s)),
        sync_skew_s=c.unit("sync_skew", units.parse_time, BaseUnits(base.sync_skew_s)),
        decode_attention_rate=c.number("decode_attention_rate", base.decode_attention_rate, low=-1e-12, high=1e3),
        attention_softmax_overlap=c.boolean("attention_softmax_overlap", base.attention_softmax_overlap),
        attention_backward_passes=c.boolean("attention_backward_passes", base.attention_backward_passes),
        attention_floor_s=c.unit("attention_floor", units.parse_time, BaseUnits(base.attention_floor_s)),
        attention_tile_s=c.unit("attention_tile", units.parse_time, BaseUnits(base.attention_tile_s)),
        attention_backward_share=c.number("attention_backward_share", base.attention_backward_share, high=4.0),
        attention_backward_tile_s=c.unit("attention_backward_tile", units.parse_time,
                                         BaseUnits(base.attention_backward_tile_s)),
        moe_gemm_efficiency=c.number("moe_gemm_efficiency", base.moe_gemm_efficiency, low=-1e-12, high=1.0),
        moe_half_ffn=c.number("moe_half_ffn", base.moe_half_ffn, low=-1e-12, high=1e6),
        moe_bf16_gemm_efficiency=c.number("moe_bf16_gemm_efficiency", base.moe_bf16_gemm_efficiency, low=-1e-12,
                                          high=1.0),
        moe_bf16_half_ffn=c.number("moe_bf16_half_ffn", base.moe_bf16_half_ffn, low=-1e-12, high=1e6),
        engine_attention=_engine_attention(c.raw("engine_attention"), source, base.engine_attention),
        engine_allreduce=_engine_allreduce(c.raw("engine_allreduce"), source, base.engine_allreduce),
    )
    c.done(ignored=("fitted_on", "notes"))
    return calibration


def hardware_from_mapping(data: dict, source: str) -> HardwareSpec:
    f = _Fields(data, source)
    calibration = _calibration(f.raw("calibration"), source)
    spec = HardwareSpec(
        name=str(f.raw("name", _default_name(source))),
        gpu=_gpu_from_mapping(f.raw("gpu", required=True), source),
        network=_network_from_list(f.raw("network", required=True), source),
        calibration=calibration, dtype=f.choice("dtype", DTYPES, "bf16"),
        source=str(f.raw("source", "")),
        faults=_faults_from_list(f.raw("faults", []), source),
        fp8_recipe=f.choice("fp8_recipe", RECIPE_CHOICES) if f.raw("fp8_recipe", "") != "" else "",
    )
    f.done()
    _check_rated(spec, spec.dtype, DTYPES, source, "dtype")
    return spec


def _check_rated(hw: HardwareSpec, dtype: str, allowed: tuple, source: str, field: str) -> None:
    """Refuse a compute dtype the GPU has no peak for, naming those it has."""
    rated = [d for d in allowed if d in dict(hw.gpu.peak_flops)]
    if dtype not in rated:
        raise SpecError(source, field, dtype, f"{hw.gpu.name} has no {dtype} peak in gpu.peak_flops; "
                        f"expected one it has: {', '.join(rated) or 'none'}")


def _freeze(overrides: dict | None) -> tuple:
    return tuple(sorted((str(k), json.dumps(v, sort_keys=True)) for k, v in (overrides or {}).items()))


@lru_cache(maxsize=64)
def _parsed(text: str, source: str, as_json: bool) -> dict:
    """A file's mapping, parsed once per content: a search meets a new override set on
    nearly every point, and parsing YAML costs far more than building the spec."""
    return parse_mapping(text, source, Path(source).name, as_json)


# Top-level hardware fields a file may leave out that an override (a study knob) may still set.
HARDWARE_OVERRIDABLE_OPTIONAL = ("fp8_recipe",)


def _with_overrides(text: str, source: str, as_json: bool, frozen: tuple, optional: tuple = ()) -> dict:
    """A private copy of the parsed file with the overrides applied (the cached parse stays
    untouched); `optional` top-level fields absent from the file may be overridden too."""
    raw, overrides = _parsed(text, source, as_json), {k: json.loads(v) for k, v in frozen}
    if not overrides:
        return copy.deepcopy(raw)
    if isinstance(raw, dict):
        raw = {**{key: None for key in optional}, **raw}
    return apply_overrides(raw, overrides, source)


@lru_cache(maxsize=512)
def _load_model_cached(text: str, source: str, as_json: bool, frozen: tuple) -> ModelSpec:
    return model_from_mapping(_with_overrides(text, source, as_json, frozen, MODEL_OVERRIDABLE_OPTIONAL), source)


@lru_cache(maxsize=512)
def _load_hardware_cached(text: str, source: str, as_json: bool, frozen: tuple) -> HardwareSpec:
    return hardware_from_mapping(_with_overrides(text, source, as_json, frozen, HARDWARE_OVERRIDABLE_OPTIONAL),
                                 source)


def load_model(ref, overrides: dict | None = None) -> ModelSpec:
    """A preset name, a model YAML or a Hugging Face config.json, with dotted overrides."""
    return _load_model_cached(*_resolve(ref, "models"), _freeze(overrides))


def load_hardware(ref, overrides: dict | None = None) -> HardwareSpec:
    """A GPU preset name or a hardware YAML, with dotted overrides (`gpu.hbm.bandwidth`)."""
    return _load_hardware_cached(*_resolve(ref, "gpus"), _freeze(overrides))


def with_dtype(hw: HardwareSpec, dtype: str, source: str, field: str, recipe: str = "",
               recipe_field: str = "fp8_recipe") -> HardwareSpec:
    """The hardware computing in `dtype`, which its GPU must have a peak for, its low-precision
    GEMMs scaled by `recipe` ("" = the dtype's default), which must fit the dtype."""
    if dtype not in COMPUTE_DTYPES:
        raise SpecError(source, field, dtype, f"expected one of {', '.join(COMPUTE_DTYPES)}")
    _check_rated(hw, dtype, COMPUTE_DTYPES, source, field)
    if recipe and recipe not in RECIPE_CHOICES:
        raise SpecError(source, recipe_field, recipe, f"expected one of {', '.join(RECIPE_CHOICES)}")
    unfit = recipe_mismatch(dtype, recipe)
    if unfit:
        raise SpecError(source, recipe_field, recipe, unfit)
    return dataclasses.replace(hw, dtype=dtype, fp8_recipe=recipe)
