"""Study files: one YAML naming a model, a cluster, a workload and the knobs to sweep.

`load_study` validates the whole file up front (every model and hardware variant is
loaded once) so that a bad study fails with one line naming the file, the field, the
value and what is allowed, before anything is written."""
import re
from dataclasses import dataclass
from pathlib import Path

from core import BACKENDS, InferWorkload, SpecError, TrainWorkload, load_hardware, load_model
from core.textfile import parse_mapping, read_text

from .space import Space, Variant, parse_space

STUDY_KEYS = ("name", "description", "model", "hardware", "overrides", "gpus", "workload", "space",
              "backend", "output", "seed", "variants", "baseline")
REQUIRED_KEYS = ("name", "model", "hardware", "gpus", "workload", "space")
WORKLOAD_KEYS = {"train": ("global_batch", "seq"), "infer": ("batch", "prompt", "decode")}
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
SPEC_PREFIXES = ("model.", "hardware.")


@dataclass(frozen=True)
class Study:
    """A validated study: what to model, on what, and the space of knobs to explore."""
    name: str
    path: str
    text: str
    model: str
    hardware: str
    model_overrides: tuple  # ((dotted path, value), ...) applied to every point
    hardware_overrides: tuple
    gpus: int
    workload: TrainWorkload | InferWorkload
    space: Space
    backend: str
    output: Path
    seed: int
    baseline: str = ""  # the variant speedups are measured against ("" without variants)

    @property
    def mode(self) -> str:
        return self.workload.mode

    def model_spec(self, knobs: tuple = ()):
        """The model with the study's overrides plus a point's `model.*` knobs."""
        return load_model(_spec_ref(self.model, self.path), dict(self.model_overrides + knobs))

    def hardware_spec(self, knobs: tuple = ()):
        """The hardware with the study's overrides plus a point's `hardware.*` knobs."""
        return load_hardware(_spec_ref(self.hardware, self.path), dict(self.hardware_overrides + knobs))


def load_study(path) -> Study:
    """Parse and validate a study file; raises SpecError naming file, field, value, allowed."""
    source = str(path)
    text = read_text(path, kind="study file")
    data = parse_mapping(text, source, Path(path).name)
    for key in data:
        if key not in STUDY_KEYS:
            raise SpecError(source, str(key), data[key], f"unknown field (allowed: {', '.join(STUDY_KEYS)})")
    for key in REQUIRED_KEYS:
        if data.get(key) is None:
            raise SpecError(source, key, "<missing>", "this field is required")
    name = data["name"]
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SpecError(source, "name", name, "expected letters, digits, '.', '_' or '-' (a folder name)")
    gpus = data["gpus"]
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise SpecError(source, "gpus", gpus, "expected a positive integer")
    backend = data.get("backend", "analytical")
    if backend not in BACKENDS:
        raise SpecError(source, "backend", backend, f"expected one of {', '.join(BACKENDS)}")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(source, "seed", seed, "expected a non-negative integer")
    output = data.get("output", f"results/{name}")
    if not isinstance(output, str) or not output.strip():
        raise SpecError(source, "output", output, "expected a folder path")
    if Path(output).exists() and not Path(output).is_dir():
        raise SpecError(source, "output", output, "exists and is not a folder")
    for key in ("model", "hardware"):
        if not isinstance(data[key], str):
            raise SpecError(source, key, data[key], "expected a preset name or a file path")
    model_overrides, hardware_overrides = _split_overrides(data.get("overrides") or {}, source)
    workload = _workload(data["workload"], source)
    variants, baseline = _variants(data, source)
    space = parse_space(data["space"], source, workload.mode, gpus, variants)
    study = Study(name=name, path=source, text=text, model=data["model"], hardware=data["hardware"],
                  model_overrides=model_overrides, hardware_overrides=hardware_overrides, gpus=gpus,
                  workload=workload, space=space, backend=backend, output=Path(output), seed=seed,
                  baseline=baseline)
    _check_specs(study)
    return study


def _spec_ref(ref: str, study_path: str) -> str:
    """A file reference relative to the study file when it exists there, else as written."""
    beside = Path(study_path).parent / ref
    return str(beside) if ("/" in ref or ref.endswith((".yaml", ".yml", ".json"))) and beside.is_file() else ref


def _split_overrides(overrides, source: str, field: str = "overrides") -> tuple[tuple, tuple]:
    if not isinstance(overrides, dict):
        raise SpecError(source, field, overrides, "expected a mapping of dotted paths to values")
    model, hardware = [], []
    for path, value in overrides.items():
        path = str(path)
        if not path.startswith(SPEC_PREFIXES) or path in SPEC_PREFIXES:
            raise SpecError(source, f"{field}.{path}", value,
                            "expected a dotted path starting with model. or hardware. (e.g. hardware.gpu.hbm.bandwidth)")
        target = model if path.startswith("model.") else hardware
        target.append((path.split(".", 1)[1], value))
    return tuple(sorted(model)), tuple(sorted(hardware))


def _variants(data: dict, source: str) -> tuple[tuple, str]:
    """The `variants:` block (name -> dotted overrides) and the `baseline` it is compared with."""
    block = data.get("variants")
    if block is None:
        if "baseline" in data:
            raise SpecError(source, "baseline", data["baseline"], "needs a variants: block to name one of")
        return (), ""
    if not isinstance(block, dict) or not block:
        raise SpecError(source, "variants", block, "expected a mapping of variant name -> {model.<path>|hardware.<path>: value}")
    variants, seen = [], {}
    for name, overrides in block.items():
        if not isinstance(name, str) or not NAME_PATTERN.match(name):
            raise SpecError(source, f"variants.{name}", overrides, "expected a name of letters, digits, '.', '_' or '-'")
        model, hardware = _split_overrides({} if overrides is None else overrides, source, f"variants.{name}")
        if (model, hardware) in seen:
            raise SpecError(source, f"variants.{name}", overrides, f"the same overrides as variant {seen[(model, hardware)]}")
        seen[(model, hardware)] = name
        variants.append(Variant(name, model, hardware))
    baseline = data.get("baseline", variants[0].name)
    if baseline not in block:
        raise SpecError(source, "baseline", baseline, f"expected one of the variants: {', '.join(block)}")
    return tuple(variants), baseline


def _workload(data, source: str):
    if not isinstance(data, dict):
        raise SpecError(source, "workload", data, "expected a mapping with mode and its sizes")
    mode = data.get("mode")
    if mode not in WORKLOAD_KEYS:
        raise SpecError(source, "workload.mode", mode if mode is not None else "<missing>",
                        f"expected one of {', '.join(WORKLOAD_KEYS)}")
    allowed = ("mode",) + WORKLOAD_KEYS[mode]
    for key in data:
        if key not in allowed:
            raise SpecError(source, f"workload.{key}", data[key], f"unknown field for mode {mode} (allowed: {', '.join(allowed)})")
    sizes = {}
    for key in WORKLOAD_KEYS[mode]:
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SpecError(source, f"workload.{key}", value if key in data else "<missing>", "expected a positive integer")
        sizes[key] = value
    return TrainWorkload(**sizes) if mode == "train" else InferWorkload(**sizes)


def _check_specs(study: Study) -> None:
    """Load the model and every hardware/model variant the space asks for, naming the study field on error."""
    try:
        study.model_spec()
    except SpecError as err:
        raise _rehome(err, study, "model", study.model) from None
    try:
        study.hardware_spec()
    except SpecError as err:
        raise _rehome(err, study, "hardware", study.hardware) from None
    for kind, variants in (("model", study.space.model_variants()), ("hardware", study.space.hardware_variants())):
        for knobs in variants:
            try:
                study.model_spec(knobs) if kind == "model" else study.hardware_spec(knobs)
            except SpecError as err:
                raise _rehome(err, study, kind, None) from None
    for variant in study.space.variants:
        for kind, overrides, load in (("model", variant.model_overrides, study.model_spec),
                                      ("hardware", variant.hardware_overrides, study.hardware_spec)):
            try:
                load(overrides)
            except SpecError as err:
                field = f"variants.{variant.name}.{kind}.{err.field}" if err.field in dict(overrides) else \
                    f"variants.{variant.name} ({kind} {err.source}): {err.field}"
                raise SpecError(study.path, field, err.value, err.allowed) from None


def _rehome(err: SpecError, study: Study, kind: str, ref) -> SpecError:
    """Core's error about a spec field, restated as the study field that set it."""
    if err.field in (kind, "<file>") and ref is not None:
        return SpecError(study.path, kind, ref, f"{err.allowed} ({err.source})" if err.source else err.allowed)
    overrides = study.model_overrides if kind == "model" else study.hardware_overrides
    if err.field in dict(overrides):
        return SpecError(study.path, f"overrides.{kind}.{err.field}", err.value, err.allowed)
    space_field = f"{kind}.{err.field}"
    if space_field in study.space.names:
        return SpecError(study.path, f"space.{space_field}", err.value, err.allowed)
    return SpecError(study.path, f"{kind} ({err.source}): {err.field}", err.value, err.allowed)
