"""`rapid report`: one self-contained HTML page (plotly.js inlined, opens offline) with the
views a results table supports, and optionally the same figures as PNGs.

A view whose data the table lacks is left out, not drawn empty: a grid gets the ranking,
breakdown, memory and knob views; a fault study adds slowdown spreads and the worst
links; a search adds, in its own objectives, its history, trade-off front and parameter
importances; an inference study adds throughput against TTFT and TPOT; a serving study its
throughput-interactivity frontier and the configurations that serve most under its SLOs; a study with
hardware variants adds their speedup over the baseline; a table with energy columns adds the
power-time trade-off and the points with the fewest joules per token."""
import html
import json
from dataclasses import dataclass, field
from pathlib import Path

import plotly.io
from plotly.offline import get_plotlyjs

from core import SpecError

from . import energy as report_energy, faults as report_faults, grid as report_grid, inference as report_inference
from . import search as report_search, serving as report_serving
from .data import ReportData, load_report_data


@dataclass(frozen=True)
class Section:
    title: str
    figures: tuple  # of plotly Figure
    notes: tuple = ()
    columns: int = 1  # figures side by side


@dataclass(frozen=True)
class Report:
    data: ReportData
    sections: tuple = field(default_factory=tuple)

    @property
    def figures(self) -> list:
        return [fig for section in self.sections for fig in section.figures]


def build_report(folder) -> Report:
    data = load_report_data(folder)
    if data.table.empty:
        raise SpecError("command line", "RESULTS", str(folder), "no results table there (a folder of part-*.parquet)")
    sections = []
    if report_faults.is_fault_table(data):
        _add(sections, "Fault sensitivity", [report_faults.slowdown_by_layout(data), report_faults.worst_links(data)])
    if report_search.is_search_table(data):
        goal = report_search.goal(data)
        importance, note = report_search.importances(data, goal)
        histories = [report_search.history(data, goal, column, direction) for column, direction in goal.objectives]
        _add(sections, "Search", histories + [report_search.tradeoff(data, goal), importance],
             notes=[n for n in (goal.note, note, refined_note(data)) if n])
    if report_inference.is_inference_table(data):
        _add(sections, "Serving: throughput and latency",
             [report_inference.throughput_latency(data), report_inference.top_throughput(data)])
    if report_serving.is_serving_table(data):
        _add(sections, "Serving: throughput per GPU against interactivity",
             [report_serving.frontier(data), report_serving.best_under_slo(data)])
    _add(sections, "Power and energy", [report_energy.power_time(data), report_energy.fewest_joules(data)])
    _add(sections, "Hardware variants", [report_grid.variant_speedup(data)])
    ranked = report_grid.ranked(data)
    _add(sections, "Layouts ranked", [ranked], notes=[n for n in (broken_note(data),) if n and ranked is not None])
    _add(sections, "The fastest layouts up close", [report_grid.breakdown(data), report_grid.memory(data)])
    _add(sections, "Knob effects", report_grid.knob_effects(data), columns=2)
    return Report(data, tuple(sections))


def _add(sections: list, title: str, figures: list, notes=(), columns: int = 1) -> None:
    figures = tuple(f for f in figures if f is not None)
    if figures or notes:
        sections.append(Section(title, figures, tuple(notes), columns))


def broken_note(data: ReportData) -> str:
    """What the grid views of a search include that its own views set apart."""
    if not report_search.is_search_table(data):
        return ""
    goal = report_search.goal(data)
    trials = report_search.trials(data, goal)
    broken = int((trials["outcome"] == report_search.BREAKS).sum())
    if not broken:
        return ""
    bounds = ", ".join(f"{c} {op} {b:g}" for c, op, b in goal.constraints)
    return (f"The views below rank every timed layout, the {broken} that break the study's constraints "
            f"({bounds}) included; the Search views above draw those apart, in grey.")


def refined_note(data: ReportData) -> str:
    """Which backend the views rank by when some rows were re-evaluated with another."""
    if not data.main_backend:
        return ""
    others = data.table[data.table["backend"] != data.main_backend]
    names = ", ".join(sorted(others["backend"].astype(str).unique()))
    return (f"{len(others)} rows were re-evaluated with {names}: they appear in the history; the Pareto front, "
            f"rankings, breakdowns and knob effects use the {data.main_backend} rows, one per layout.")


def header_facts(data: ReportData) -> list:
    """(label, value) pairs for the page header: what was studied, the workload in its own
    mode's words (an inference page names no training setting), a search's goal, and how
    many rows."""
    table, study = data.table, data.study
    facts = [("model", study.get("model") or _first(table, "model")),
             ("hardware", study.get("hardware") or _first(table, "hardware")),
             ("GPUs", _first(table, "gpus")), ("backend", ", ".join(map(str, table["backend"].unique())) if "backend" in table else None)]
    workload = study.get("workload")
    if isinstance(workload, dict):
        facts.append(workload_fact(workload))
    if report_search.is_search_table(data):
        facts.append(("search goal", report_search.goal(data).text()))
    figure = "output_tokens_per_s" if "output_tokens_per_s" in table else "step_time_s"  # a serving row has no step
    timed = table["feasible"] & table[figure].notna() if "feasible" in table else table.index == table.index
    facts.append(("rows", f"{len(table):,}"))
    if "fault_sample" in table:
        facts.append(("layouts", f"{table['point_id'].nunique():,}"))
        facts.append(("fault samples", f"{int((table['fault_sample'] > 0).sum()):,}"))
    else:
        facts.append(("feasible", f"{int(timed.sum()):,}"))
        facts.append(("memory-infeasible", f"{int((~table['feasible']).sum()):,}" if "feasible" in table else "?"))
    if "trial_number" in table:
        facts.append(("trials", f"{table['trial_number'].nunique():,}"))
    if "variant" in table:
        facts.append(("variants", ", ".join(map(str, data.value_order("variant", table["variant"])))))
    return [(k, str(v)) for k, v in facts if v is not None]


# workload field -> how the header says it, per mode
WORKLOAD_WORDS = {"train": {"global_batch": "global batch {} sequences", "seq": "of {} tokens"},
                  "infer": {"batch": "batch of {} requests", "prompt": "prompt {} tokens", "decode": "decode {} tokens",
                            "kv_dtype": "KV cache in {}"},
                  "serve": {"isl": "prompt {} tokens", "osl": "output {} tokens", "concurrency": "{} requests in flight",
                            "request_rate": "{} requests/s", "engine": "engine {}", "kv_dtype": "KV cache in {}"}}


def workload_fact(workload: dict) -> tuple:
    """("training", "global batch 64 sequences of 4096 tokens") or ("inference", "batch of 8
    requests, prompt 1024 tokens, decode 256 tokens"): only the fields of the workload's mode."""
    mode = workload.get("mode")
    words = WORKLOAD_WORDS.get(mode, {})
    parts = [words[k].format(v) for k, v in workload.items() if k in words]
    return ({"infer": "inference", "train": "training", "serve": "serving"}.get(mode, "workload"),
            " ".join(parts) if mode == "train" else ", ".join(parts))


def _first(table, column):
    return table[column].iloc[0] if column in table and len(table) else None


def write_html(report: Report, path) -> Path:
    """The page, written to a temporary name and renamed so a reader never sees half of it."""
    path = Path(path)
    data = report.data
    body = [f"<h1>{html.escape(data.name)}</h1>"]
    description = data.study.get("description")
    if isinstance(description, str):
        body.append(f"<p class='description'>{html.escape(description)}</p>")
    body.append("<dl class='facts'>" + "".join(f"<div><dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd></div>"
                                              for k, v in header_facts(data)) + "</dl>")
    body.append("<nav>" + " · ".join(f"<a href='#s{i}'>{html.escape(s.title)}</a>"
                                     for i, s in enumerate(report.sections)) + "</nav>")
    number = 0
    for i, section in enumerate(report.sections):
        body.append(f"<section id='s{i}'><h2>{html.escape(section.title)}</h2>")
        body += [f"<p class='note'>{html.escape(note)}</p>" for note in section.notes]
        body.append(f"<div class='grid' style='grid-template-columns: repeat({section.columns}, minmax(0, 1fr))'>")
        for fig in section.figures:
            spec = plotly.io.to_json(fig, validate=False, pretty=False).replace("</", "<\\/")
            body.append(f"<div class='figure' id='figure-{number}'></div>"
                        f"<script type='application/json' class='rapid-figure' data-target='figure-{number}'>{spec}</script>")
            number += 1
        body.append("</div></section>")
    if not report.sections:
        body.append(f"<p class='note'>{html.escape(_nothing_timed(data))}</p>")
    footer = f"rapid-sweep {data.metadata.get('version', '?')}, commit {data.metadata.get('git_commit', '?')[:12]}, " \
             f"table {data.folder}"
    body.append(f"<footer>{html.escape(footer)}</footer>")
    page = PAGE.format(title=html.escape(f"{data.name}: rapid report"), plotly=get_plotlyjs(), body="\n".join(body))
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(page, encoding="utf-8")
    temp.replace(path)
    return path


def _nothing_timed(data) -> str:
    """Why a page has no figures: no rows, or no layout that fits (and how far the nearest is)."""
    table = data.table
    if "memory_peak_gib" not in table or not table["memory_peak_gib"].notna().any():
        return "The table has no timed rows, so there is nothing to draw."
    nearest = table["memory_peak_gib"].min()
    capacity = f" against {data.hbm_capacity_gib:.1f} GiB of HBM" if data.hbm_capacity_gib else ""
    return (f"No layout fits in memory, so none was timed: the {len(table)} rows need at least "
            f"{nearest:.1f} GiB per GPU{capacity} (rapid query {data.folder} --by memory_peak_gib).")


def figure_specs(page: str) -> list:
    """The plotly figures (data and layout) embedded in a report page, in page order."""
    marker = "class='rapid-figure'"
    specs = []
    for chunk in page.split(marker)[1:]:
        text = chunk.split(">", 1)[1].split("</script>", 1)[0]
        specs.append(json.loads(text))  # JSON reads the escaped "<\/" as "</"
    return specs


PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px 32px; color: #222; }}
h1 {{ margin: 0 0 4px; font-size: 26px; }}
h2 {{ margin: 28px 0 8px; font-size: 19px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }}
.description {{ color: #555; max-width: 70em; margin: 4px 0 8px; }}
.facts {{ display: flex; flex-wrap: wrap; gap: 6px 22px; margin: 8px 0; }}
.facts div {{ display: flex; gap: 6px; }} .facts dt {{ color: #777; }} .facts dd {{ margin: 0; font-weight: 600; }}
nav {{ margin: 10px 0; }} nav a {{ color: #1f77b4; text-decoration: none; }}
.grid {{ display: grid; gap: 12px; }} .figure {{ min-height: 300px; }}
.note {{ color: #8a5a00; background: #fff7e6; padding: 6px 10px; border-radius: 4px; }}
footer {{ margin-top: 30px; color: #999; font-size: 12px; }}
</style>
<script type="text/javascript">{plotly}</script></head>
<body>
{body}
<script>
document.querySelectorAll("script.rapid-figure").forEach(function (node) {{
  var spec = JSON.parse(node.textContent);
  Plotly.newPlot(node.dataset.target, spec.data, spec.layout, {{responsive: true, displaylogo: false}});
}});
</script>
</body></html>
"""
