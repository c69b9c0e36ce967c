"""Views every timed table supports: layouts ranked by step time (the paper's Figure 11),
where the time of the best layouts goes, their memory against capacity, each knob's
effect, and the speedup of hardware variants over their baseline (Figure 12)."""
import math

import pandas as pd
import plotly.graph_objects as go

from .colours import PALETTE, memory_colour, part_colour
from .data import ReportData, knob_title, knob_value

TOP_N = 15
LOG_TICKS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)  # ranks on a log axis
MAX_CATEGORIES = 12  # a numeric knob with more values is drawn as a scatter, not bars
# breakdown parts that add up to the step time, in stacking order; the rest are totals or overlaps
STACK_ORDER = ("compute_s", "bubble_s", "optimizer_s")
NOT_STACKED = ("dp_comm_total_s", "prefill_s", "decode_s")
PART_TITLES = {"compute_s": "compute", "bubble_s": "pipeline bubble", "optimizer_s": "optimizer step"}
MEMORY_TITLES = {"weights_gib": "weights", "gradients_gib": "gradients", "optimizer_gib": "optimizer state",
                 "activations_gib": "activations", "kv_cache_gib": "KV cache", "transient_gib": "transient"}
# mode -> (what one timed row is, its time's axis title, the breakdown's axis title)
TIME_TITLES = {"train": ("training step", "step time (s)", "seconds per training step"),
               "infer": ("request", "request time (s)", "seconds per request (prefill + decode)"),
               "serve": ("request", "request time (s)", "seconds per request")}


def base_layout(title: str, x_title: str, y_title: str, **extra) -> dict:
    """Shared look: a title that states the question, labelled axes, a quiet template."""
    return dict(title=dict(text=title, x=0.01, xanchor="left"), template="plotly_white",
                xaxis=dict(title=dict(text=x_title)), yaxis=dict(title=dict(text=y_title)),
                hoverlabel=dict(align="left"), margin=dict(l=70, r=20, t=60, b=60), **extra)


def mode(data: ReportData) -> str:
    """`train`, `infer` or `serve`: what the table's rows time."""
    if "mode" in data.table and len(data.table):
        return str(data.table["mode"].iloc[0])
    return "train"


def time_title(data: ReportData) -> str:
    """The time column's axis title: a training step, or an inference request."""
    return TIME_TITLES[mode(data)][1]


def ranked(data: ReportData) -> go.Figure | None:
    """Every feasible layout from fastest to slowest, on log axes so the fastest few, which
    matter most, get room; one legend group per value of the knob chosen in the menu
    (default: the knob that moves the time most), the smaller groups drawn on top."""
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
        masks = [(rows[knob] == value) if knob else rows["step_time_s"].notna() for value in values]
        start = len(traces)
        for j in sorted(range(len(values)), key=lambda j: -int(masks[j].sum())):  # biggest group underneath
            idx = [k for k, m in enumerate(masks[j]) if m]
            name = f"{knob_title(knob)} = {knob_value(knob, values[j])} ({len(idx)})" if knob else "layouts"
            traces.append(go.Scatter(
                x=[rank[k] for k in idx], y=rows["step_time_s"].iloc[idx].tolist(), mode="markers", name=name,
                legendgroup=knob or "all", legendrank=j, visible=i == 0,
                marker=dict(size=_marker_px(len(rows)), color=PALETTE[j % len(PALETTE)], opacity=0.75,
                            line=dict(color="white", width=0.5)),
                customdata=[[labels[k]] for k in idx],
                hovertemplate="rank %{x}<br>%{customdata[0]}<br>" + time_title(data).split(" (")[0]
                              + " %{y:.3f} s<extra></extra>"))
        visibility.append((knob, start, len(traces)))
    fig = go.Figure(traces)
    if len(knobs) > 1:
        buttons = [dict(label=f"colour by {knob_title(k)}", method="update",
                        args=[{"visible": [start <= t < end for t in range(len(traces))]}])
                   for k, start, end in visibility]
        fig.update_layout(updatemenus=[dict(buttons=buttons, x=1.02, xanchor="left", y=0.0, yanchor="bottom")])
    fig.update_layout(**base_layout(
        f"Which layouts are fastest? All {len(rows)} feasible layouts ranked by {time_title(data)}",
        "rank (1 = fastest; log scale)", f"{time_title(data)}, log scale", height=440,
        legend=dict(title=dict(text="colour (click one to hide it)"))))
    ticks = [t for t in LOG_TICKS if t <= len(rows)]
    fig.update_xaxes(type="log", range=[math.log10(0.8), math.log10(len(rows) * 1.25)], tickvals=ticks,
                     ticktext=[str(t) for t in ticks])
    fig.update_yaxes(type="log")
    return fig


def _marker_px(points: int) -> int:
    """Marker size for a scatter of `points`: smaller as they crowd, so neighbours stay apart."""
    return 8 if points <= 50 else 6 if points <= 500 else 4


def breakdown(data: ReportData) -> go.Figure | None:
    """Stacked parts of the step time of the TOP_N fastest layouts, each part in its own
    fixed colour (colours.PART_COLOURS)."""
    rows = data.timed.nsmallest(TOP_N, "step_time_s")
    parts = [p for p in _stacked_parts(data) if rows[f"breakdown_{p}"].fillna(0).abs().sum() > 0]
    if rows.empty or not parts:
        return None
    labels = _unique_labels(data, rows)
    traces = []
    for part in parts:
        values = rows[f"breakdown_{part}"].fillna(0.0).tolist()
        traces.append(go.Bar(y=labels, x=values, orientation="h", name=_part_title(part),
                             marker=dict(color=part_colour(part)),
                             hovertemplate="%{y}<br>" + _part_title(part) + ": %{x:.3f} s<extra></extra>"))
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(f"Where does the time go? Parts of the {time_title(data)} of the "
                                    f"{len(rows)} fastest layouts", TIME_TITLES[mode(data)][2], "",
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
    for column in kinds:
        kind = column.removeprefix("memory_")
        title = MEMORY_TITLES.get(kind, kind.removesuffix("_gib").replace("_", " "))
        traces.append(go.Bar(y=labels, x=rows[column].fillna(0.0).tolist(), orientation="h", name=title,
                             marker=dict(color=memory_colour(kind.removesuffix("_gib"))),
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
    """For each varying knob, the best and the median time at each of its values as dots on
    an axis that starts near the data, not at 0 (a 30 s against 33 s difference stays
    visible), each best labelled with how much slower it is than the knob's fastest value;
    a numeric knob with many values (a search's range) as every layout against its value."""
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
        best = [g.min() if len(g) else None for g in groups]
        median = [g.median() if len(g) else None for g in groups]
        fastest = min(b for b in best if b is not None)
        spans_x, spans_y = [], []
        for name, low, mid in zip(names, best, median):
            spans_x += [name, name, None]
            spans_y += [low, mid, None]
        fig = go.Figure([
            go.Scatter(x=spans_x, y=spans_y, mode="lines", line=dict(color="#cccccc", width=2), showlegend=False,
                       hoverinfo="skip"),
            go.Scatter(x=names, y=median, name="median", mode="markers", legendrank=2,
                       marker=dict(color=PALETTE[7], size=10, symbol="diamond"), customdata=counts,
                       hovertemplate="%{x}: median %{y:.3f} s of %{customdata} layouts<extra></extra>"),
            go.Scatter(x=names, y=best, name="best", mode="markers+text", legendrank=1,
                       marker=dict(color=PALETTE[0], size=12),
                       text=[_slower(b, fastest) for b in best], textposition="middle right",
                       textfont=dict(size=10), cliponaxis=False, customdata=counts,
                       hovertemplate="%{x}: best %{y:.3f} s of %{customdata} layouts<extra></extra>"),
        ])
        fig.update_layout(**base_layout(f"Effect of {knob_title(knob)}", knob_title(knob),
                                        f"{time_title(data)} (axis not from 0)", height=340))
        fig.update_xaxes(type="category", range=[-0.5, len(names) - 0.5])
        figures.append(fig)
    return figures


def _slower(seconds, fastest: float) -> str:
    """`+8.2 %` slower than the fastest, `fastest` for the fastest, '' when none is timed."""
    if seconds is None:
        return ""
    return "fastest" if seconds <= fastest else f"+{(seconds / fastest - 1) * 100:.1f} %"


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
    what = "Training" if mode(data) == "train" else "Inference"
    fig.update_layout(**base_layout(f"Where does a hardware change pay? {what} speedup over {baseline}",
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
