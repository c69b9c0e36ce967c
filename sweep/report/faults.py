"""Views of a fault study (one row per point and Monte Carlo sample; sample 0 is the
fault-free baseline): how slowdown spreads per layout (the paper's Figure 10) and which
links hurt most when they degrade, drawn where they sit in the network."""
from collections import defaultdict

import plotly.graph_objects as go

from .data import ReportData, knob_title
from .colours import PALETTE
from .grid import base_layout
from .topology import drawing

MAX_LAYOUTS = 40
WORST_LINKS = 10
# the network drawing is sized so one grid step is as wide as the page allows: a 1400 px page
# leaves about PLOT_WIDTH_PX for the plot beside the colour bar; x and y share one scale
PLOT_WIDTH_PX = 1200
MAX_UNIT_PX = 90
MIN_HEIGHT_PX = 300


def is_fault_table(data: ReportData) -> bool:
    return {"fault_sample", "slowdown"} <= set(data.table.columns)


def faulted_rows(data: ReportData):
    rows = data.table
    return rows[(rows["fault_sample"] > 0) & rows["slowdown"].notna()]


def slowdown_by_layout(data: ReportData) -> go.Figure | None:
    """One box per layout over its fault samples, most fragile (highest p95 slowdown) first,
    coloured by the knob whose values separate fragile from robust layouts most."""
    rows = faulted_rows(data)
    if rows.empty:
        return None
    p95 = rows.groupby("point_id")["slowdown"].quantile(0.95)
    groups = sorted(rows.groupby("point_id"), key=lambda g: (-p95[g[0]], -g[1]["slowdown"].median(), g[0]))
    shown = groups[:MAX_LAYOUTS]
    first = {point_id: samples.iloc[0] for point_id, samples in shown}
    knob = _colour_knob(data, p95, first)
    values = data.value_order(knob, [row[knob] for row in first.values()]) if knob else []
    traces, legend = [], set()
    for point_id, samples in shown:
        label = data.label(first[point_id])
        value = first[point_id][knob] if knob else None
        colour = PALETTE[values.index(value) % len(PALETTE)] if knob else PALETTE[0]
        traces.append(go.Box(x=[label] * len(samples), y=samples["slowdown"].tolist(), boxpoints="outliers",
                             name=f"{knob_title(knob)} = {value}" if knob else label,
                             marker=dict(color=colour, size=3), line=dict(color=colour, width=1),
                             legendgroup=str(value), showlegend=bool(knob) and value not in legend,
                             hovertemplate=f"{label}<br>p95 slowdown {p95[point_id]:.3f}x"
                                           "<br>this sample: %{y:.3f}x<extra></extra>"))
        legend.add(value)
    fig = go.Figure(traces)
    fig.add_hline(y=1.0, line=dict(color="black", dash="dot"))
    more = f" (the {MAX_LAYOUTS} most fragile of {len(groups)})" if len(groups) > len(shown) else ""
    fig.update_layout(**base_layout(f"How much do link faults slow each layout down?{more}",
                                    "layout (most fragile first: highest 95th-percentile slowdown)",
                                    "step time over fault-free baseline (x)", height=500,
                                    boxmode="overlay", legend=dict(title=dict(text="colour"))))
    fig.update_xaxes(tickangle=-40, type="category")
    return fig


def _colour_knob(data: ReportData, p95, first: dict):
    """The knob whose per-value median p95 slowdowns differ most, None when none varies."""
    best, spread = None, 0.0
    for knob in data.knobs:
        by_value = {}
        for point_id, row in first.items():
            by_value.setdefault(str(row[knob]), []).append(p95[point_id])
        if len(by_value) < 2 or len(by_value) > len(PALETTE):
            continue
        medians = [sorted(v)[len(v) // 2] for v in by_value.values()]
        if max(medians) - min(medians) > spread:
            best, spread = knob, max(medians) - min(medians)
    return best


def worst_links(data: ReportData) -> go.Figure | None:
    """Every faulted link as a segment between its end nodes (NPUs on a grid, switches below),
    coloured by the mean slowdown of the samples that degraded it; the worst drawn bold."""
    rows = faulted_rows(data)
    if rows.empty or "fault_links" not in rows:
        return None
    slowdowns, dims_of = defaultdict(list), defaultdict(set)
    for links, link_dims, slowdown in zip(rows["fault_links"], _column(rows, "fault_dims"), rows["slowdown"]):
        for i, link in enumerate(_as_list(links)):
            slowdowns[link].append(slowdown)
            if i < len(_as_list(link_dims)):
                dims_of[link].add(str(_as_list(link_dims)[i]))
    ends = {link: _ends(link) for link in slowdowns}
    ends = {link: e for link, e in ends.items() if e}
    if not ends:
        return None
    npus = int(data.table["gpus"].iloc[0]) if "gpus" in data.table else 1 + max(max(e) for e in ends.values())
    dims = data.hardware.dims_for(npus) if data.hardware else ()
    layout = drawing(dims, npus)
    nodes = [layout.position(n) for n in range(npus)]
    switch_ids = sorted({n for e in ends.values() for n in e if n >= npus})
    left, right = min(x for x, _ in nodes), max(x for x, _ in nodes)
    below = min(y for _, y in nodes) - 2
    switches = {n: (left + (i + 0.5) * (right - left) / len(switch_ids), below) for i, n in enumerate(switch_ids)}
    mean = {link: sum(v) / len(v) for link, v in slowdowns.items() if link in ends}
    ranked = sorted(mean, key=lambda link: (-mean[link], link))
    paths = {link: layout.link_path(*ends[link], switches) for link in ranked}
    points = nodes + list(switches.values()) + [(x, y) for xs, ys, _ in paths.values()
                                                 for x, y in zip(xs, ys) if x is not None]
    x_range = [min(x for x, _ in points) - 0.8, max(x for x, _ in points) + 0.8]
    y_range = [min(y for _, y in points) - 0.8, max(y for _, y in points) + 1.6]  # room for the block titles
    x_span, y_span = x_range[1] - x_range[0], y_range[1] - y_range[0]
    unit_px = min(PLOT_WIDTH_PX / x_span, MAX_UNIT_PX)  # one grid step on screen
    npu_px = 0.7 * unit_px
    traces = []
    xs, ys = [], []
    for link in ranked[WORST_LINKS:]:
        xs += paths[link][0] + [None]
        ys += paths[link][1] + [None]
    if xs:
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="#c8c8c8", width=1),
                                 name="other faulted links", hoverinfo="skip"))
    for number, link in enumerate(ranked[:WORST_LINKS]):
        traces.append(go.Scatter(x=paths[link][0], y=paths[link][1], mode="lines",
                                 line=dict(color="black", width=2.5),
                                 name=f"the {min(WORST_LINKS, len(ranked))} worst links (black)", legendgroup="worst",
                                 showlegend=number == 0, hoverinfo="skip"))
    traces.append(go.Scatter(x=[x for x, _ in nodes], y=[y for _, y in nodes], mode="markers+text",
                             text=[str(n) for n in range(npus)], textposition="middle center",
                             textfont=dict(size=max(7, min(12, round(0.4 * npu_px))), color="#333"),
                             marker=dict(size=npu_px, color="#f4f4f4", line=dict(color="#888", width=1)),
                             name="GPU (NPU id)", hovertemplate="NPU %{text}<extra></extra>"))
    if switches:
        traces.append(go.Scatter(x=[switches[n][0] for n in switch_ids], y=[switches[n][1] for n in switch_ids],
                                 mode="markers", marker=dict(size=npu_px, symbol="square", color="#bbbbbb"),
                                 text=[str(n) for n in switch_ids], name="switch",
                                 hovertemplate="switch %{text}<extra></extra>"))
    traces.append(go.Scatter(
        x=[paths[k][2][0] for k in ranked], y=[paths[k][2][1] for k in ranked],
        mode="markers", name="faulted link (colour: mean slowdown)",
        marker=dict(size=[(1.5 if i < WORST_LINKS else 1.0) * max(6.0, min(14.0, 0.26 * unit_px))
                          for i in range(len(ranked))],
                    color=[mean[k] for k in ranked], colorscale="Reds", showscale=True,
                    line=dict(color=["black" if i < WORST_LINKS else "#666" for i in range(len(ranked))],
                              width=[2 if i < WORST_LINKS else 0.5 for i in range(len(ranked))]),
                    colorbar=dict(title=dict(text="mean<br>slowdown (x)"), thickness=14)),
        customdata=[[k, ", ".join(sorted(dims_of[k])) or "?", len(slowdowns[k])] for k in ranked],
        hovertemplate="link %{customdata[0]} (%{customdata[1]})<br>mean slowdown %{marker.color:.3f}x"
                      " over %{customdata[2]} samples<extra></extra>"))
    fig = go.Figure(traces)
    for text, x, y in _block_titles(layout, dims, nodes):
        fig.add_annotation(x=x, y=y, text=text, showarrow=False, font=dict(size=12, color="#555"), yanchor="bottom")
    inner = f"{dims[0].name} ({dims[0].topology} of {dims[0].size})" if dims else "network"
    outer = f"; links of {', '.join(f'{d.name} ({d.topology} of {d.size})' for d in dims[1:])} between blocks" \
        if len(dims) > 1 else ""
    fig.update_layout(**base_layout(f"Which links hurt most when they degrade? The {min(WORST_LINKS, len(ranked))} "
                                    f"worst of {len(ranked)} faulted links outlined in black", f"one block per {inner}{outer}",
                                    "", height=round(max(MIN_HEIGHT_PX, unit_px * y_span + 100 + 60)),
                                    legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0)))
    fig.update_layout(margin=dict(l=20, r=20, t=100, b=60))
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, range=x_range, constrain="domain")
    fig.update_yaxes(showticklabels=False, showgrid=False, zeroline=False, range=y_range, scaleanchor="x",
                     scaleratio=1, constrain="domain")
    return fig


def _block_titles(layout, dims, nodes) -> list:
    """(text, x, y) above each block of the innermost dimension: which NPUs it holds."""
    if len(dims) < 2:
        return []
    titles = []
    for start in range(0, layout.npus, layout.block):
        xs = [nodes[n][0] for n in range(start, start + layout.block)]
        top = max(nodes[n][1] for n in range(start, start + layout.block))
        titles.append((f"NPUs {start}-{start + layout.block - 1}", (min(xs) + max(xs)) / 2, top + 0.75))
    return titles


def _column(rows, name):
    return rows[name] if name in rows else [None] * len(rows)


def _as_list(value) -> list:
    return [] if value is None else list(value)


def _ends(link: str):
    try:
        a, b = (int(x) for x in str(link).split("-"))
    except ValueError:
        return None
    return a, b
