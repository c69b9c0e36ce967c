"""Every field the loaders accept, every option of every command and every table column is
named, in backticks, on its docs page. The lists come from the code, so a new field or
option without docs fails here."""
import re
from pathlib import Path

import pytest

from core import BACKENDS
from core.evaluation import DETAIL_KEYS
from core.model import loader
from core.model.specs import DTYPES, TOPOLOGIES
from core.textfile import parse_mapping
from sweep.cli import COMMANDS, build_parser
from sweep.evaluation.points import evaluate_points
from sweep.execution.engine import work_context
from sweep.faults.evaluate import FAULT_FIELDS
from sweep.metrics import AGGREGATES, METRICS
from sweep.search.loop import SAMPLER_COLUMN, TRIAL_COLUMN
from sweep.study.faults_block import FAULT_KEYS, STRAGGLER_KEYS
from sweep.study.loader import OPTIONAL_WORKLOAD_KEYS, STUDY_KEYS, WORKLOAD_KEYS, load_study
from sweep.study.grid import plan_study
from sweep.study.search_block import REFINE_KEYS, SAMPLERS, SEARCH_KEYS
from sweep.study.space import PARALLEL_KNOBS, RANGE_KEYS, SPEC_KNOB_ALIASES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def missing(page: str, names) -> list:
    """The names that `page` does not show in backticks."""
    text = (DOCS / page).read_text()
    return sorted(name for name in set(names) if f"`{name}`" not in text)


def fields_read(monkeypatch, parse, preset: str, kind: str, extra: dict) -> set:
    """The dotted fields `parse` asks for while reading a preset (plus `extra`); list entries
    are written `network[].size`."""
    asked = set()
    raw = loader._Fields.raw

    def recording(self, key, *args, **kwargs):
        asked.add(re.sub(r"\.\d+\.", "[].", self.name(key)))
        return raw(self, key, *args, **kwargs)

    monkeypatch.setattr(loader._Fields, "raw", recording)
    path = loader.PRESET_DIR / kind / f"{preset}.yaml"
    parse({**parse_mapping(path.read_text(), str(path), path.name), **extra}, str(path))
    return asked


def test_model_page_names_every_model_field(monkeypatch):
    moe = {"moe": {"experts": 8, "top_k": 2, "expert_ffn_hidden": 14336, "capacity_factor": 1.0}}
    fields = fields_read(monkeypatch, loader.model_from_mapping, "mixtral-8x7b", "models", moe)
    assert "moe.capacity_factor" in fields and "hidden" in fields
    assert missing("model.md", fields | set(loader.HF_MODEL_TYPES)) == []


def test_hardware_page_names_every_hardware_field(monkeypatch):
    faults = {"faults": [{"link": [0, 1], "factor": 0.5}]}
    fields = fields_read(monkeypatch, loader.hardware_from_mapping, "h100-sxm5-80gb", "gpus", faults)
    assert "network[].link_bandwidth" in fields and "calibration.kernel_overhead" in fields
    assert missing("hardware.md", fields | set(DTYPES) | set(TOPOLOGIES)) == []


def test_study_page_names_every_top_level_field_workload_size_and_knob():
    workload = {key for keys in (*WORKLOAD_KEYS.values(), *OPTIONAL_WORKLOAD_KEYS.values()) for key in keys}
    names = set(STUDY_KEYS) | workload | set(PARALLEL_KNOBS) | set(SPEC_KNOB_ALIASES) | set(RANGE_KEYS)
    assert missing("study.md", names | set(BACKENDS)) == []


def test_block_pages_name_every_field():
    assert missing("faults.md", FAULT_KEYS + tuple(f"stragglers.{key}" for key in STRAGGLER_KEYS)) == []
    assert missing("search.md", SEARCH_KEYS + tuple(f"refine.{key}" for key in REFINE_KEYS) + tuple(SAMPLERS)) == []
    assert missing("variants.md", ("variants", "baseline", "variant")) == []
    assert missing("backends.md", BACKENDS) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_page_names_every_option(command):
    parser = build_parser(command)
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    options = {o for action in sub._actions for o in action.option_strings if o.startswith("--")} - {"--help"}
    assert options or command == "validate"
    assert missing(f"commands/{command}.md", options) == []


def test_table_page_names_every_column(write_study):
    """Columns of a real row (simulator backend, a variant, a knob with units), then the fault and search ones."""
    study = load_study(write_study(
        backend="astra-hierarchical", variants={"base": {}, "fast-l2": {"hardware.gpu.l2.bandwidth": "7 TB/s"}},
        space={"tp": [8], "pp": [2], "cp": [1], "zero": [0], "micro_batch": [1], "recompute": ["none"],
               "hardware.gpu.hbm.bandwidth": ["2039 GB/s"]}))
    plan = plan_study(study)
    row = evaluate_points(work_context(study, plan.models, plan.hardware), plan.points[:1])
    knobs = set(study.space.columns)
    dims = [dim.name for dim in study.hardware_spec().network]
    columns = set()
    for name in row.column_names:
        if name in knobs or any(name.startswith(f"{k}_") and name[len(k) + 1:] in ("bps", "bytes", "s") for k in knobs):
            continue  # knob columns are on the study page; their numeric twins below as <knob>_<unit>
        for dim in dims:
            name = name.replace(f"_comm_{dim}_", "_comm_<dim>_")
        columns.add(name)
    assert {"busiest_link", "replay_note", "breakdown_comm_<dim>_s"} <= columns
    names = columns | {f"detail_{key}" for key in DETAIL_KEYS} | {f.name for f in FAULT_FIELDS}
    names |= {TRIAL_COLUMN, SAMPLER_COLUMN, *METRICS, *AGGREGATES}
    assert missing("table.md", names) == []


def test_readme_links_every_docs_page():
    readme = (ROOT / "README.md").read_text()
    pages = sorted(str(p.relative_to(ROOT)) for p in DOCS.rglob("*.md"))
    assert [p for p in pages if f"]({p})" not in readme] == []
    assert len(readme.splitlines()) <= 80 and "make run" in readme and "make test" in readme
