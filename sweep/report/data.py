"""What every report view reads: the results table as a DataFrame, the study it came from,
the knobs that vary, and a short label per layout. Loaded once per `rapid report`."""
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from core import SpecError, load_hardware

from sweep.store.parts import read_metadata, read_results

GIB = 2 ** 30
# knob column -> short prefix for layout labels ("tp4 pp2 z1 mb2 selective")
LABEL_PREFIXES = {"dp": "dp", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "etp": "etp", "sp": "sp", "zero": "z",
                  "micro_batch": "mb", "virtual_stages": "v", "schedule": "", "recompute": "", "placement": "",
                  "attention_dp": "adp", "kv_dtype": "kv-"}
# names readers know the knobs by, for axis titles and legends
KNOB_TITLES = {"dp": "data parallel (dp)", "tp": "tensor parallel (tp)", "pp": "pipeline parallel (pp)",
               "cp": "context parallel (cp)", "ep": "expert parallel (ep)", "sp": "sequence parallel (sp)",
               "zero": "ZeRO stage", "micro_batch": "micro-batch size", "recompute": "recompute policy",
               "schedule": "pipeline schedule", "virtual_stages": "virtual stages", "placement": "axis placement",
               "variant": "hardware variant"}


@dataclass(frozen=True)
class ReportData:
    folder: Path
    table: pd.DataFrame
    metadata: dict
    study: dict  # the study file as parsed YAML ({} if the table carries none)
    knobs: tuple  # knob columns whose values differ between rows, in study order
    hardware: object  # the study's HardwareSpec with its overrides, None if it cannot be loaded

    @property
    def name(self) -> str:
        return self.metadata.get("study_name") or self.folder.name

    @property
    def hbm_capacity_gib(self) -> float | None:
        return self.hardware.gpu.hbm.capacity_bytes / GIB if self.hardware else None

    @property
    def timed(self) -> pd.DataFrame:
        """Feasible rows with a step time (fault samples: the fault-free baseline only), under
        the table's main backend: a refined search's re-evaluated rows would rank a layout twice."""
        rows = self.timed_all_backends
        return rows[rows["backend"] == self.main_backend] if self.main_backend else rows

    @property
    def timed_all_backends(self) -> pd.DataFrame:
        """Feasible timed rows, one per point and backend (a search asks some points again and
        copies their row under each later trial)."""
        rows = self.table
        if "fault_sample" in rows:
            rows = rows[rows["fault_sample"] == 0]
        rows = rows[rows["feasible"] & rows["step_time_s"].notna()]
        return rows.drop_duplicates([c for c in ("point_id", "backend") if c in rows])

    @property
    def main_backend(self):
        """The backend most rows were evaluated with, when the table has several; else None."""
        if "backend" not in self.table or self.table["backend"].nunique() < 2:
            return None
        return self.table["backend"].value_counts().index[0]

    def value_order(self, knob: str, values) -> list:
        """A knob's values in the order the study lists them (variants as declared), else sorted."""
        listed = (self.study.get("variants") or {}) if knob == "variant" else (self.study.get("space") or {}).get(
            knob.replace("_", ".") if knob.startswith(("model_", "hardware_")) else knob)
        values = list(dict.fromkeys(values))
        if isinstance(listed, (list, dict)):
            rank = {str(v): i for i, v in enumerate(listed)}
            return sorted(values, key=lambda v: (rank.get(str(v), len(rank)), str(v)))
        try:
            return sorted(values)
        except TypeError:
            return sorted(values, key=str)

    def label(self, row, knobs=None) -> str:
        """A layout's short name from the knobs that vary (or those of them in `knobs`), e.g.
        `tp4 pp2 z1 mb2 selective`."""
        parts = []
        for knob in self.knobs if knobs is None else [k for k in self.knobs if k in knobs]:
            value = row[knob]
            prefix = LABEL_PREFIXES.get(knob)
            if prefix is None and spec_unit(knob) and knob_value(knob, value) is not value:
                parts.append(f"{knob_title(knob).split(' (')[0]} {knob_value(knob, value):g} {spec_unit(knob)[1]}")
            elif prefix is None:  # a spec knob or the variant: its value says enough
                parts.append(str(value))
            elif knob == "sp":
                parts.append("sp" if value else "no-sp")
            else:
                parts.append(f"{prefix}{value}")
        return " ".join(parts) or "the only layout"


# spec knobs (`hardware.gpu.hbm.bandwidth` -> column hardware_gpu_hbm_bandwidth), stored in base
# units: (name ending, multiplier to the unit readers use, that unit), first match wins
SPEC_UNITS = (("link_bandwidth", 8e-9, "Gb/s"), ("bandwidth", 1e-12, "TB/s"), ("l2_capacity", 1e-6, "MB"),
              ("capacity", 1e-9, "GB"), ("latency", 1e6, "us"), ("power_limit", 1.0, "W"))
ACRONYMS = {"hbm": "HBM", "l2": "L2", "ib": "IB", "nvlink": "NVLink", "sm": "SM", "gpu": "GPU"}


def knob_title(column: str) -> str:
    """A knob's name for axes and legends; a spec knob's says its unit: `HBM bandwidth (TB/s)`."""
    column = column.replace(".", "_")
    if column in KNOB_TITLES:
        return KNOB_TITLES[column]
    if not column.startswith(("hardware_", "model_")):
        return column.replace("_", " ")
    words = [ACRONYMS.get(w, w) for w in column.split("_")[1:] if w not in ("gpu", "network")]
    unit = spec_unit(column)
    return " ".join(words) + (f" ({unit[1]})" if unit else "")


def spec_unit(column: str):
    """(multiplier, unit) a spec knob's base-unit values are shown in, or None."""
    if column.startswith("hardware_"):
        for ending, scale, unit in SPEC_UNITS:
            if column.endswith(ending):
                return scale, unit
    return None


def knob_value(column: str, value):
    """A knob's value in the unit readers use (`3.9e12` HBM bytes/s -> 3.9)."""
    unit = spec_unit(column)
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    return round(float(value) * unit[0], 6) if unit and numeric else value  # a grid's "2039 GB/s" stays text


def load_report_data(folder) -> ReportData:
    folder = Path(folder)
    table = read_results(folder).to_pandas()
    metadata = read_metadata(folder)
    try:
        study = yaml.safe_load(metadata.get("study", "")) or {}
    except yaml.YAMLError:
        study = {}
    study = study if isinstance(study, dict) else {}
    declared = [k for k in metadata.get("knobs", "").split(",") if k]
    if "variant" in table:
        declared = ["variant"] + [k for k in declared if k != "variant"]
    knobs = tuple(k for k in declared if k in table and table[k].astype(str).nunique() > 1)
    return ReportData(folder, table, metadata, study, knobs, _hardware(study, metadata))


def _hardware(study: dict, metadata: dict):
    """The study's hardware with its overrides (HBM capacity, network sizes), or None."""
    ref = study.get("hardware")
    if not isinstance(ref, str):
        return None
    beside = Path(metadata.get("study_path", ".")).parent / ref
    overrides = {str(k).split(".", 1)[1]: v for k, v in (study.get("overrides") or {}).items()
                 if str(k).startswith("hardware.")}
    try:
        return load_hardware(str(beside) if beside.is_file() else ref, overrides)
    except SpecError:
        return None
