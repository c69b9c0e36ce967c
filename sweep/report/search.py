"""Views of an Optuna search (rows carry `trial_number` and `sampler`): how the best step
time improved trial by trial, the step-time / memory Pareto front, and which knobs
mattered (Optuna's parameter importances, from the study's own storage)."""
import plotly.graph_objects as go
import pyarrow as pa

from sweep.store.query import pareto_front
from .data import ReportData, knob_title
from .grid import PALETTE, base_layout, time_title


def is_search_table(data: ReportData) -> bool:
    return "trial_number" in data.table.columns


def history(data: ReportData) -> go.Figure | None:
    """Each trial's step time in trial order, and the best so far, per backend when refined."""
    rows = data.timed_all_backends.sort_values("trial_number", kind="stable")
    if rows.empty:
        return None
    traces = []
    groups = rows.groupby("backend", sort=True) if "backend" in rows and rows["backend"].nunique() > 1 else [(None, rows)]
    for j, (backend, trials) in enumerate(groups):
        suffix = f" ({backend})" if backend else ""
        labels = [[data.label(r)] for _, r in trials.iterrows()]
        traces.append(go.Scatter(x=trials["trial_number"].tolist(), y=trials["step_time_s"].tolist(), mode="markers",
                                 name=f"trial{suffix}", marker=dict(size=6, color=PALETTE[2 * j], opacity=0.6),
                                 customdata=labels,
                                 hovertemplate="trial %{x}<br>%{customdata[0]}<br>%{y:.3f} s<extra></extra>"))
        traces.append(go.Scatter(x=trials["trial_number"].tolist(), y=trials["step_time_s"].cummin().tolist(),
                                 mode="lines", line=dict(shape="hv", color=PALETTE[2 * j + 1], width=2),
                                 name=f"best so far{suffix}", hovertemplate="best after trial %{x}: %{y:.3f} s<extra></extra>"))
    sampler = ", ".join(sorted(rows["sampler"].dropna().astype(str).unique())) if "sampler" in rows else ""
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(f"How fast did the search converge?{f' ({sampler} sampler)' if sampler else ''}",
                                    "trial number", time_title(data), height=420))
    return fig


def pareto(data: ReportData) -> go.Figure | None:
    """Feasible layouts by step time and per-GPU peak memory; the front (no layout both
    faster and smaller) joined by a line."""
    rows = data.timed.dropna(subset=["memory_peak_gib"]) if "memory_peak_gib" in data.table else data.timed.iloc[0:0]
    if rows.empty:
        return None
    table = pa.table({"point_id": rows["point_id"].tolist(), "step_time_s": rows["step_time_s"].tolist(),
                      "memory_peak_gib": rows["memory_peak_gib"].tolist(), "row": list(range(len(rows)))})
    front = pareto_front(table, [("step_time_s", False), ("memory_peak_gib", False)]).column("row").to_pylist()
    front_rows = rows.iloc[front]
    labels = [[data.label(r)] for _, r in rows.iterrows()]
    fig = go.Figure([
        go.Scatter(x=rows["step_time_s"].tolist(), y=rows["memory_peak_gib"].tolist(), mode="markers",
                   name="feasible layout", marker=dict(size=6, color=PALETTE[7], opacity=0.5), customdata=labels,
                   hovertemplate="%{customdata[0]}<br>%{x:.3f} s, %{y:.1f} GiB<extra></extra>"),
        go.Scatter(x=front_rows["step_time_s"].tolist(), y=front_rows["memory_peak_gib"].tolist(), mode="lines+markers",
                   name="Pareto front", line=dict(shape="hv", color=PALETTE[3]), marker=dict(size=9),
                   customdata=[labels[i] for i in front],
                   hovertemplate="%{customdata[0]}<br>%{x:.3f} s, %{y:.1f} GiB<extra></extra>"),
    ])
    fig.update_layout(**base_layout("Which layouts trade speed for memory? Step time against peak memory",
                                    time_title(data), "peak memory per GPU (GiB)", height=440))
    return fig


def importances(data: ReportData) -> tuple:
    """(figure or None, note): Optuna's parameter importances for the search's study."""
    storage, name = data.metadata.get("optuna_storage"), data.metadata.get("optuna_study")
    if not storage or not name:
        return None, "Parameter importances: the table names no Optuna storage, so they are not shown."
    import optuna
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        scores = optuna.importance.get_param_importances(study)
    except Exception as err:  # a moved or deleted storage is a note on the page, not a failure
        return None, f"Parameter importances: could not read Optuna study {name!r} at {storage} ({err})."
    if not scores:
        return None, "Parameter importances: the Optuna study has too few finished trials."
    knobs = sorted(scores, key=scores.get)
    fig = go.Figure(go.Bar(x=[scores[k] for k in knobs], y=[knob_title(k) for k in knobs], orientation="h",
                           marker=dict(color=PALETTE[0]), hovertemplate="%{y}: %{x:.3f}<extra></extra>"))
    fig.update_layout(**base_layout("Which knobs mattered to the search? Optuna parameter importances (fANOVA)",
                                    "importance (share of objective variance)", "", height=max(300, 40 * len(knobs) + 120)))
    return fig, ""
