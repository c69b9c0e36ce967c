"""Views of an Optuna search (rows carry `trial_number` and `sampler`), drawn in the terms
of the study's own `search:` block: how each objective improved trial by trial, the
trade-off between the first two objectives with its Pareto front, and which knobs
mattered to each objective (Optuna's parameter importances, from the study's storage).

Trials the search had to set aside are drawn apart, grey, in their own legend groups:
those that did not fit in memory and those that broke one of the study's constraints.
The best-so-far line and the front count only the trials that meet every constraint, as
`rapid search` does (sweep.search.loop.best_rows)."""
import warnings
from dataclasses import dataclass

import pandas as pd
import plotly.graph_objects as go
import pyarrow as pa

from core import SpecError

from sweep.faults.summary import fault_aggregates
from sweep.metrics import AGGREGATES
from sweep.store.parts import SEARCH_KEY
from sweep.store.query import pareto_front
from sweep.study.search_block import parse_search
from .colours import EXCLUDED, FRONT, PALETTE
from .data import ReportData, knob_title
from .grid import base_layout, time_title

# metric column -> axis title (the time column's depends on the mode: grid.time_title)
METRIC_TITLES = {"mfu": "MFU", "tokens_per_s": "throughput (tokens/s)", "ttft_s": "time to first token (s)",
                 "tpot_s": "time per output token (s)", "memory_peak_gib": "peak memory per GPU (GiB)",
                 "slowdown_p50": "median slowdown under faults (x)",
                 "slowdown_p95": "95th-percentile slowdown under faults (x)",
                 "slowdown_max": "worst slowdown under faults (x)",
                 "step_time_p95_s": "95th-percentile step time under faults (s)",
                 "power_avg_w": "power per GPU (W)", "energy_per_token_j": "energy per token (J)",
                 "energy_per_output_token_j": "energy per output token (J)",
                 "usd_per_step": "cost per step (US$)", "usd_per_million_tokens": "cost per million tokens (US$)",
                 "run_usd": "cost of the run (US$)"}
MEETS, BREAKS, NO_FIT = "meets", "breaks", "no-fit"  # a trial's outcome


@dataclass(frozen=True)
class Goal:
    """What the search optimised and under which bounds, from the study's `search:` block."""
    objectives: tuple  # ((column, "minimize" | "maximize"), ...)
    constraints: tuple  # ((column, "<=" | ">=", bound), ...)
    note: str = ""  # why the study's own block could not be read, if it could not

    def text(self) -> str:
        """`minimize step_time_s, minimize slowdown_p95 with memory_peak_gib <= 60`."""
        goals = ", ".join(f"{d} {c}" for c, d in self.objectives)
        bounds = ", ".join(f"{c} {op} {b:g}" for c, op, b in self.constraints)
        return goals + (f" with {bounds}" if bounds else "")


def is_search_table(data: ReportData) -> bool:
    return "trial_number" in data.table.columns


def goal(data: ReportData) -> Goal:
    """The study's objectives and constraints, parsed as `rapid sweep` parsed them; step time
    alone when the table carries no readable search block (a hand-made or older table)."""
    block = data.study.get("search")
    if block is None:
        return Goal((("step_time_s", "minimize"),), (), "the table carries no search: block; drawn by step time")
    try:
        spec = parse_search(block, data.metadata.get("study_path", "study"), data.folder, 0,
                            has_faults=isinstance(data.study.get("faults"), dict))
    except SpecError as err:
        return Goal((("step_time_s", "minimize"),), (), f"the study's search: block could not be read ({err}); "
                                                         "drawn by step time")
    return Goal(spec.objectives, spec.constraints)


# a metric column's unit suffix -> the unit its axis names (energies, powers, dollars)
SUFFIX_UNITS = (("_j", "J"), ("_w", "W"), ("_usd", "US$"), ("_gib", "GiB"), ("_s", "s"))


def metric_title(data: ReportData, column: str) -> str:
    if column == "step_time_s":
        return time_title(data)
    if column in METRIC_TITLES:
        return METRIC_TITLES[column]
    if column.endswith("_per_s"):  # a rate: its name says it (output tokens per s)
        return column.replace("_", " ")
    suffix, unit = next(((s, u) for s, u in SUFFIX_UNITS if column.endswith(s)), ("", ""))
    return column.removesuffix(suffix).replace("_", " ") + (f" ({unit})" if unit else "")


def trials(data: ReportData, which: Goal) -> pd.DataFrame:
    """One row per evaluated search point (a fault study's baseline row with its fault
    aggregates), with `outcome` (MEETS, BREAKS or NO_FIT) and `broken` (the constraints it
    breaks, as text)."""
    rows = data.table[data.table["trial_number"].notna()]
    if "fault_sample" in rows:
        samples = pa.Table.from_pandas(rows[["point_id", "fault_sample", "slowdown", "step_time_s"]],
                                       preserve_index=False)
        aggregates = pd.DataFrame.from_dict(fault_aggregates(samples), orient="index")
        rows = rows[rows["fault_sample"] == 0].drop(columns=[c for c in AGGREGATES if c in rows])
        rows = rows.join(aggregates.reindex(columns=list(AGGREGATES)), on="point_id")
    rows = rows.sort_values("trial_number", kind="stable").reset_index(drop=True)
    broken = [[] for _ in range(len(rows))]
    for column, op, bound in which.constraints:
        values = rows[column] if column in rows else pd.Series(float("nan"), index=rows.index)
        fails = values.gt(bound) if op == "<=" else values.lt(bound)  # NaN (not computed) breaks nothing
        for i in rows.index[fails & rows["feasible"]]:
            broken[i].append(f"{column} {op} {bound:g}")
    rows["broken"] = [", ".join(b) for b in broken]
    rows["outcome"] = [NO_FIT if not f else BREAKS if b else MEETS for f, b in zip(rows["feasible"], broken)]
    return rows


def history(data: ReportData, which: Goal, column: str, direction: str) -> go.Figure | None:
    """Each trial's value of one objective in trial order, the best so far among trials that
    meet the constraints, and apart: trials that broke a constraint, trials that did not fit
    (not timed: marked along the top), rows re-evaluated with a refinement backend."""
    rows = trials(data, which)
    main = rows[rows["backend"] == data.main_backend] if data.main_backend else rows
    if column not in rows or main[column].dropna().empty:
        return None
    meets = main[(main["outcome"] == MEETS) & main[column].notna()]
    unit = metric_title(data, column)
    traces = [_trial_trace(data, meets, "trial_number", column, f"meets the constraints ({len(meets)})",
                           dict(size=7, color=PALETTE[0]))]
    if len(meets):
        best = meets[column].cummax() if direction == "maximize" else meets[column].cummin()
        traces.append(go.Scatter(x=meets["trial_number"].tolist(), y=best.tolist(), mode="lines", name="best so far",
                                 line=dict(shape="hv", color=FRONT, width=2),
                                 hovertemplate="best after trial %{x}: %{y:.4g}<extra></extra>"))
    traces += _set_apart(data, main, "trial_number", column, top=main[column].max())
    refined = rows[rows["backend"] != data.main_backend].groupby("backend") if data.main_backend else ()
    for j, (backend, again) in enumerate(refined):
        traces.append(_trial_trace(data, again, "trial_number", column, f"re-evaluated with {backend}",
                                   dict(size=9, color=PALETTE[1 + j], symbol="diamond")))
    sampler = ", ".join(sorted(rows["sampler"].dropna().astype(str).unique())) if "sampler" in rows else ""
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(f"How fast did the search converge? {direction.capitalize()} {unit}"
                                    f"{f' ({sampler} sampler)' if sampler else ''}", "trial number", unit,
                                    height=420))
    _constraint_lines(fig, which, y=column)
    return fig


def tradeoff(data: ReportData, which: Goal) -> go.Figure | None:
    """Trials by the first two objectives (one objective: against peak memory), the Pareto
    front of the trials that meet the constraints joined by a line, constraint bounds on
    these axes dashed, and the set-apart trials in grey."""
    columns = [c for c, _ in which.objectives[:2]]
    directions = [d for _, d in which.objectives[:2]]
    if len(columns) < 2:
        other = "memory_peak_gib" if columns[0] != "memory_peak_gib" else "step_time_s"
        columns, directions = columns + [other], directions + ["minimize"]
    x, y = columns
    rows = trials(data, which)
    rows = rows[rows["backend"] == data.main_backend] if data.main_backend else rows
    if x not in rows or y not in rows:
        return None
    rows = rows.dropna(subset=[x, y])
    meets = rows[rows["outcome"] == MEETS].reset_index(drop=True)
    if rows.empty:
        return None
    traces = [_trial_trace(data, meets, x, y, f"meets the constraints ({len(meets)})", dict(size=8, color=PALETTE[0]))]
    if len(meets):
        table = pa.table({x: meets[x].astype(float).tolist(), y: meets[y].astype(float).tolist(),
                          "point_id": meets["point_id"].tolist(), "row": list(range(len(meets)))})
        front = meets.iloc[pareto_front(table, [(x, directions[0] == "maximize"), (y, directions[1] == "maximize")])
                           .column("row").to_pylist()].sort_values(x)
        traces.append(_trial_trace(data, front, x, y, f"Pareto front ({len(front)})", dict(size=11, color=FRONT),
                                   mode="lines+markers", line=dict(shape="hv", color=FRONT, width=2)))
    traces += _set_apart(data, rows, x, y)
    fig = go.Figure(traces)
    x_title, y_title = metric_title(data, x), metric_title(data, y)
    question = "What does the search trade?" if len(which.objectives) > 1 else "What does the best trial cost?"
    fig.update_layout(**base_layout(f"{question} {x_title.split(' (')[0]} ({directions[0]}) against "
                                    f"{y_title.split(' (')[0]} ({directions[1]})", x_title, y_title, height=480))
    _constraint_lines(fig, which, x=x, y=y)
    return fig


def _trial_trace(data: ReportData, rows, x: str, y: str, name: str, marker: dict, **extra) -> go.Scatter:
    labels = [[f"trial {int(r['trial_number'])}: {data.label(r)}", r.get("broken") or ""] for _, r in rows.iterrows()]
    return go.Scatter(x=rows[x].tolist(), y=rows[y].tolist(), mode=extra.pop("mode", "markers"), name=name,
                      marker=marker, customdata=labels,
                      hovertemplate="%{customdata[0]}<br>" + x + " %{x:.4g}, " + y + " %{y:.4g}"
                                    "<br>%{customdata[1]}<extra></extra>", **extra)


def _set_apart(data: ReportData, rows, x: str, y: str, top=None) -> list:
    """Grey traces, each its own legend group, for trials that broke a constraint and trials
    that did not fit in memory; an untimed one is drawn at `top` (the top of the plot) when
    given, else left out (it has no value to place it by)."""
    traces = []
    breaks = rows[(rows["outcome"] == BREAKS) & rows[y].notna()]
    if len(breaks):
        traces.append(_trial_trace(data, breaks, x, y, f"breaks a constraint ({len(breaks)})",
                                   dict(size=8, color=EXCLUDED, symbol="circle-open", line=dict(width=2)),
                                   legendgroup="breaks"))
    no_fit = rows[rows["outcome"] == NO_FIT]
    if len(no_fit) and top is not None:
        no_fit = no_fit.assign(**{y: no_fit[y].fillna(top)})
    no_fit = no_fit[no_fit[y].notna() & no_fit[x].notna()]
    if len(no_fit):
        traces.append(_trial_trace(data, no_fit.assign(broken="did not fit in memory: not timed"), x, y,
                                   f"did not fit in memory ({len(no_fit)})",
                                   dict(size=8, color=EXCLUDED, symbol="x"), legendgroup="no-fit"))
    return traces


def _constraint_lines(fig: go.Figure, which: Goal, x: str | None = None, y: str | None = None) -> None:
    """A dashed line at each constraint bound on one of the figure's axes."""
    for column, op, bound in which.constraints:
        text = f"constraint {column} {op} {bound:g}"
        line = dict(color="#777777", dash="dash", width=1)
        if column == y:
            fig.add_hline(y=bound, line=line, annotation_text=text, annotation_position="top left")
        elif column == x:
            fig.add_vline(x=bound, line=line, annotation_text=text, annotation_position="top right")


def importances(data: ReportData, which: Goal) -> tuple:
    """(figure or None, note): Optuna's parameter importances for each of the study's
    objectives (its default evaluator, PED-ANOVA), read from the search's own storage."""
    storage, name = data.metadata.get(SEARCH_KEY), data.metadata.get("optuna_study")
    if not storage or not name:
        return None, "Parameter importances: the table names no Optuna storage, so they are not shown."
    import optuna

    from sweep.search.storage import reader_storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=reader_storage(storage))
        several = len(study.directions) > 1
        with warnings.catch_warnings():  # PED-ANOVA warns that a target is minimised: maximised ones are negated
            warnings.simplefilter("ignore", UserWarning)
            scores = [optuna.importance.get_param_importances(study, target=_target(study, i) if several else None)
                      for i in range(len(study.directions))]
    except Exception as err:  # a moved or deleted storage is a note on the page, not a failure
        return None, f"Parameter importances: could not read Optuna study {name!r} at {storage} ({err})."
    if not any(scores):
        return None, "Parameter importances: the Optuna study has too few finished trials."
    knobs = sorted({k for s in scores for k in s}, key=lambda k: sum(s.get(k, 0.0) for s in scores))
    names = [c for c, _ in which.objectives] if len(which.objectives) == len(scores) else \
        [f"objective {i}" for i in range(len(scores))]
    fig = go.Figure([go.Bar(x=[s.get(k, 0.0) for k in knobs], y=[knob_title(k) for k in knobs], orientation="h",
                            name=column, marker=dict(color=PALETTE[i % len(PALETTE)]),
                            hovertemplate="%{y}: %{x:.3f} of " + column + "<extra></extra>")
                     for i, (column, s) in enumerate(zip(names, scores))])
    fig.update_layout(**base_layout("Which knobs mattered to the search? Optuna parameter importances (PED-ANOVA)"
                                    + (" per objective" if several else ""),
                                    "importance (each objective's importances sum to 1)", "", barmode="group",
                                    height=max(300, (30 + 14 * len(scores)) * len(knobs) + 120)))
    return fig, ""


def _target(study, index: int):
    """Objective `index` as a value to minimise, which is what PED-ANOVA ranks knobs by."""
    import optuna

    sign = -1.0 if study.directions[index] == optuna.study.StudyDirection.MAXIMIZE else 1.0
    return lambda trial: sign * trial.values[index]
