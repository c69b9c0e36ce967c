"""What every report view reads: the results table as a DataFrame, the study it came from,
the knobs that vary, and a short label per layout. Loaded once per `rapid report`."""
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from core import SpecError, load_hardware

from .store import read_metadata, read_results

GIB = 2 ** 30
# knob column -> short prefix for layout labels ("tp4 pp2 z1 mb2 selective")
LABEL_PREFIXES = {"dp": "dp", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep", "sp": "sp", "zero": "z",
                  "micro_batch": "mb", "virtual_stages": "v", "schedule": "", "recompute": "", "placement": ""}
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
        """Feasible rows with a step time (fault samples: the fault-free baseline only)."""
        rows = self.table
        if "fault_sample" in rows:
            rows = rows[rows["fault_sample"] == 0]
        return rows[rows["feasible"] & rows["step_time_s"].notna()]

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

    def label(self, row) -> str:
        """A layout's short name from the knobs that vary, e.g. `tp4 pp2 z1 mb2 selective`."""
        parts = []
        for knob in self.knobs:
            value = row[knob]
            prefix = LABEL_PREFIXES.get(knob)
            if prefix is None:  # a spec knob or the variant: its value says enough
                parts.append(str(value))
            elif knob == "sp":
                parts.append("sp" if value else "no-sp")
            else:
                parts.append(f"{prefix}{value}")
        return " ".join(parts) or "the only layout"


def knob_title(column: str) -> str:
    return KNOB_TITLES.get(column, column.replace("_", " "))


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
