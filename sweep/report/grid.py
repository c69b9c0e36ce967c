"""Views every timed table supports: layouts ranked by step time (the paper's Figure 11),
where the time of the best layouts goes, their memory against capacity, each knob's
effect, and the speedup of hardware variants over their baseline (Figure 12)."""
import pandas as pd
import plotly.graph_objects as go

from .data import ReportData, knob_title, knob_value

TOP_N = 15
MAX_CATEGORIES = 12  # a numeric knob with more values is drawn as a scatter, not bars
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
# breakdown parts that add up to the step time, in stacking order; the rest are totals or overlaps
STACK_ORDER = ("compute_s", "bubble_s", "optimizer_s")
NOT_STACKED = ("dp_comm_total_s", "prefill_s", "decode_s")
PART_TITLES = {"compute_s": "compute", "bubble_s": "pipeline bubble", "optimizer_s": "optimizer step"}
MEMORY_TITLES = {"weights_gib": "weights", "gradients_gib": "gradients", "optimizer_gib": "optimizer state",
                 "activations_gib": "activations", "kv_cache_gib": "KV cache", "transient_gib": "transient"}
TIME_METRIC = {"train": ("step_time_s", "step time (s)"), "infer": ("step_time_s", "request time (s)")}


def base_layout(title: str, x_title: str, y_title: str, **extra) -> dict:
    """Shared look: a title that states the question, labelled axes, a quiet template."""
    return dict(title=dict(text=title, x=0.01, xanchor="left"), template="plotly_white",
                xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)),
                hoverlabel=dict(align="left"), margin=dict(l=70, r=20, t=60, b=60), **extra)


def time_title(data: ReportData) -> str:
    return TIME_METRIC.get(data.table["mode"].iloc[0] if "mode" in data.table else "train", TIME_METRIC["train"])[1]


def ranked(data: ReportData) -> go.Figure | None:
    """Every feasible layout from fastest to slowest; one legend group per value of the knob
    chosen in the menu (default: the knob that moves step time most)."""
    rows = data.timed.sort_values("step_time_s", kind="stable").reset_index(drop=True)
    if rows.empty:
        return None
    rank = list(range(1, len(rows) + 1))
    labels = [data.label(r) for _, r in rows.iterrows()]
    knobs = sorted((k for k in data.knobs if rows[k].nunique() <= MAX_CATEGORIES), key=lambda k: -_effect(rows, k))
    knobs = knobs or [None]
    traces, visibility = [], []
    for i, knob in enumerate(knobs):
        values = data.value_order(knob, rows[knob].dropna()) if knob else [None]
        start = len(traces)
        for j, value in enumerate(values):
            mask = (rows[knob] == value) if knob else rows["step_time_s"].notna()
            idx = [k for k, m in enumerate(mask) if m]
            name = f"{knob_title(knob)} = {knob_value(knob, value)}" if knob else "layouts"
            traces.append(go.Scatter(
                x=[rank[k] for k in idx], y=rows["step_time_s"].iloc[idx].tolist(), mode="markers", name=name,
                legendgroup=knob or "all", visible=i == 0, marker=dict(size=6, color=PALETTE[j % len(PALETTE)]),
                customdata=[[labels[k]] for k in idx],
                hovertemplate="rank %{x}<br>%{customdata[0]}<br>step time %{y:.3f} s<extra></extra>"))
        visibility.append((knob, start, len(traces)))
    fig = go.Figure(traces)
    if len(knobs) > 1:
        buttons = [dict(label=f"colour by {knob_title(k)}", method="update",
                        args=[{"visible": [start <= t < end for t in range(len(traces))]}])
                   for k, start, end in visibility]
        fig.update_layout(updatemenus=[dict(buttons=buttons, x=1.02, xanchor="left", y=0.0, yanchor="bottom")])
    fig.update_layout(**base_layout(
        f"Which layouts are fastest? All {len(rows)} feasible layouts ranked by {time_title(data)}",
        "rank (1 = fastest)", time_title(data), legend=dict(title=dict(text="colour"))))
    return fig


def breakdown(data: ReportData) -> go.Figure | None:
    """Stacked parts of the step time of the TOP_N fastest layouts."""
    rows = data.timed.nsmallest(TOP_N, "step_time_s")
    parts = [p for p in _stacked_parts(data) if rows[f"breakdown_{p}"].fillna(0).abs().sum() > 0]
    if rows.empty or not parts:
        return None
    labels = _unique_labels(data, rows)
    traces = []
    for j, part in enumerate(parts):
        values = rows[f"breakdown_{part}"].fillna(0.0).tolist()
        traces.append(go.Bar(y=labels, x=values, orientation="h", name=_part_title(part),
                             marker=dict(color=PALETTE[j % len(PALETTE)]),
                             hovertemplate="%{y}<br>" + _part_title(part) + ": %{x:.3f} s<extra></extra>"))
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(f"Where does the time go? Parts of the {time_title(data)} of the "
                                    f"{len(rows)} fastest layouts", "seconds per step", "",
                                    barmode="stack", height=max(380, 28 * len(rows) + 140),
                                    legend=dict(traceorder="normal")))
    fig.update_yaxes(autorange="reversed")
    return fig


def memory(data: ReportData) -> go.Figure | None:
    """Per-GPU memory by kind of the TOP_N fastest layouts, with the HBM capacity marked."""
    rows = data.timed.nsmallest(TOP_N, "step_time_s")
    kinds = [c for c in data.table.columns if c.startswith("memory_") and c != "memory_peak_gib"
             and rows[c].fillna(0).abs().sum() > 0]
    if rows.empty or not kinds:
        return None
    labels = _unique_labels(data, rows)
    traces = []
    for j, column in enumerate(kinds):
        kind = column.removeprefix("memory_")
        title = MEMORY_TITLES.get(kind, kind.removesuffix("_gib").replace("_", " "))
        traces.append(go.Bar(y=labels, x=rows[column].fillna(0.0).tolist(), orientation="h", name=title,
                             marker=dict(color=PALETTE[j % len(PALETTE)]),
                             hovertemplate="%{y}<br>" + title + ": %{x:.1f} GiB<extra></extra>"))
    fig = go.Figure(traces)
    x_title = "GiB per GPU"
    if data.hbm_capacity_gib:
        fig.add_vline(x=data.hbm_capacity_gib, line=dict(color="black", dash="dash"))
        x_title += f" (dashed line: HBM capacity of {data.hardware.name}, {data.hbm_capacity_gib:.1f} GiB)"
    fig.update_layout(**base_layout(f"Does it fit? Per-GPU memory of the {len(rows)} fastest layouts by kind",
                                    x_title, "", barmode="stack", height=max(380, 28 * len(rows) + 140),
                                    legend=dict(traceorder="normal")))
    fig.update_yaxes(autorange="reversed")
    return fig


def knob_effects(data: ReportData) -> list:
    """For each varying knob, the best and the median step time at each of its values; a
    numeric knob with many values (a search's range) as every layout against its value."""
    rows = data.timed
    figures = []
    for knob in data.knobs if not rows.empty else ():
        values = data.value_order(knob, rows[knob].dropna())
        if len(values) > MAX_CATEGORIES and pd.api.types.is_numeric_dtype(rows[knob]):
            figures.append(_knob_scatter(data, rows, knob))
            continue
        groups = [rows[rows[knob] == v]["step_time_s"] for v in values]
        names = [str(knob_value(knob, v)) for v in values]
        counts = [len(g) for g in groups]
        fig = go.Figure([
            go.Bar(x=names, y=[g.min() if len(g) else None for g in groups], name="best", marker=dict(color=PALETTE[0]),
                   customdata=counts, hovertemplate="%{x}: best %{y:.3f} s of %{customdata} layouts<extra></extra>"),
            go.Bar(x=names, y=[g.median() if len(g) else None for g in groups], name="median",
                   marker=dict(color=PALETTE[7]), customdata=counts,
                   hovertemplate="%{x}: median %{y:.3f} s of %{customdata} layouts<extra></extra>"),
        ])
        fig.update_layout(**base_layout(f"Effect of {knob_title(knob)}", knob_title(knob), time_title(data),
                                        barmode="group", height=340))
        fig.update_xaxes(type="category")
        figures.append(fig)
    return figures


def _knob_scatter(data: ReportData, rows, knob: str) -> go.Figure:
    """Every timed layout at its value of the knob, and the fastest at or below each value."""
    ordered = rows.sort_values(knob, kind="stable")
    x = [knob_value(knob, v) for v in ordered[knob]]
    fig = go.Figure([
        go.Scatter(x=x, y=ordered["step_time_s"].tolist(), mode="markers", name="layout",
                   marker=dict(size=5, color=PALETTE[7], opacity=0.5),
                   customdata=[[data.label(r)] for _, r in ordered.iterrows()],
                   hovertemplate="%{customdata[0]}<br>%{y:.3f} s<extra></extra>"),
        go.Scatter(x=x, y=ordered["step_time_s"].cummin().tolist(), mode="lines", name="best at or below this value",
                   line=dict(shape="hv", color=PALETTE[0], width=2),
                   hovertemplate="best at or below %{x}: %{y:.3f} s<extra></extra>"),
    ])
    fig.update_layout(**base_layout(f"Effect of {knob_title(knob)}", knob_title(knob), time_title(data), height=340))
    return fig


def variant_speedup(data: ReportData) -> go.Figure | None:
    """Speedup of each hardware variant over the baseline: best layout against best layout,
    and per layout the variants share (same knob values), as the spread of those speedups."""
    if "variant" not in data.table:
        return None
    rows = data.timed
    order = data.value_order("variant", data.table["variant"])
    baseline = data.study.get("baseline") or order[0]
    base = rows[rows["variant"] == baseline]
    if base.empty:
        return None
    knobs = [k for k in data.knobs if k != "variant"]
    base_by_layout = base.set_index(knobs)["step_time_s"] if knobs else None
    best, per_layout = [], []
    for name in order:
        mine = rows[rows["variant"] == name]
        best.append(base["step_time_s"].min() / mine["step_time_s"].min() if len(mine) else None)
        if knobs and len(mine):
            shared = mine.set_index(knobs)["step_time_s"]
            ratio = (base_by_layout.reindex(shared.index) / shared).dropna()
            per_layout.append(ratio.tolist())
        else:
            per_layout.append([])
    fig = go.Figure(go.Bar(x=order, y=best, name="best layout vs best layout", marker=dict(color=PALETTE[0]),
                           text=[f"{b:.3f}x" if b else "none feasible" for b in best], textposition="outside",
                           hovertemplate="%{x}: %{y:.3f}x faster than " + baseline + "<extra></extra>"))
    if any(len(p) > 1 for p in per_layout):
        for name, ratios in zip(order, per_layout):
            fig.add_trace(go.Box(x=[name] * len(ratios), y=ratios, name=f"{name}: same layout", boxpoints="all",
                                 jitter=0.4, marker=dict(color=PALETTE[1], size=4), line=dict(color=PALETTE[1]),
                                 showlegend=name == order[0], legendgroup="layouts",
                                 hovertemplate="same layout: %{y:.3f}x<extra></extra>"))
        fig.data[-len(order)].name = "same layout, each feasible in both"
    fig.add_hline(y=1.0, line=dict(color="black", dash="dot"))
    fig.update_layout(**base_layout(f"Where does a hardware change pay? Training speedup over {baseline}",
                                    "hardware variant", f"speedup over {baseline} (x)", height=440,
                                    boxmode="overlay"))
    speedups = [v for v in best if v] + [v for p in per_layout for v in p]
    if speedups and 0.8 < min(speedups) and max(speedups) < 1.25:  # small effects: zoom, the bars read 1.0x
        fig.update_yaxes(range=[min(speedups + [1.0]) - 0.02, max(speedups + [1.0]) + 0.02])
    return fig


def _effect(rows, knob) -> float:
    medians = rows.groupby(rows[knob].astype(str))["step_time_s"].median()
    return float(medians.max() - medians.min()) if len(medians) > 1 else 0.0


def _stacked_parts(data: ReportData) -> list:
    parts = [c.removeprefix("breakdown_") for c in data.table.columns if c.startswith("breakdown_")]
    parts = [p for p in parts if p not in NOT_STACKED]
    return sorted(parts, key=lambda p: (STACK_ORDER.index(p) if p in STACK_ORDER else 1.5, p))


def _part_title(part: str) -> str:
    if part.startswith("comm_"):
        return f"exposed comm. on {part.removeprefix('comm_').removesuffix('_s')}"
    return PART_TITLES.get(part, part.removesuffix("_s").replace("_", " "))


def _unique_labels(data: ReportData, rows) -> list:
    """Layout labels, numbered by rank so equal labels (knobs that do not show) stay apart."""
    return [f"#{i} {data.label(r)}" for i, (_, r) in enumerate(rows.iterrows(), start=1)]
