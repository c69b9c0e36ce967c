"""Views of a fault study (one row per point and Monte Carlo sample; sample 0 is the
fault-free baseline): how slowdown spreads per layout (the paper's Figure 10) and which
links hurt most when they degrade, drawn where they sit in the network."""
import math
from collections import defaultdict

import plotly.graph_objects as go

from .report_data import ReportData
from .report_grid import PALETTE, base_layout

MAX_LAYOUTS = 40
WORST_LINKS = 10


def is_fault_table(data: ReportData) -> bool:
    return {"fault_sample", "slowdown"} <= set(data.table.columns)


def faulted_rows(data: ReportData):
    rows = data.table
    return rows[(rows["fault_sample"] > 0) & rows["slowdown"].notna()]


def slowdown_by_layout(data: ReportData) -> go.Figure | None:
    """One box per layout over its fault samples, most sensitive (highest median) first."""
    rows = faulted_rows(data)
    if rows.empty:
        return None
    groups = sorted(rows.groupby("point_id"), key=lambda g: (-g[1]["slowdown"].median(), g[0]))
    shown = groups[:MAX_LAYOUTS]
    traces = []
    for point_id, samples in shown:
        label = data.label(samples.iloc[0])
        traces.append(go.Box(y=samples["slowdown"].tolist(), name=label, boxpoints="outliers",
                             marker=dict(color=PALETTE[0], size=3), line=dict(color=PALETTE[0], width=1),
                             showlegend=False,
                             hovertemplate=label + "<br>slowdown %{y:.3f}x<extra></extra>"))
    fig = go.Figure(traces)
    fig.add_hline(y=1.0, line=dict(color="black", dash="dot"))
    more = f" (the {MAX_LAYOUTS} most sensitive of {len(groups)})" if len(groups) > len(shown) else ""
    fig.update_layout(**base_layout(f"How much do link faults slow each layout down?{more}",
                                    "layout (most sensitive first)", "step time over fault-free baseline (x)",
                                    height=480))
    fig.update_xaxes(tickangle=-40)
    return fig


def worst_links(data: ReportData) -> go.Figure | None:
    """Every faulted link as a segment between its end nodes (NPUs on a grid, switches below),
    coloured by the mean slowdown of the samples that degraded it; the worst drawn bold."""
    rows = faulted_rows(data)
    if rows.empty or "fault_links" not in rows:
        return None
    slowdowns, dims = defaultdict(list), defaultdict(set)
    for links, link_dims, slowdown in zip(rows["fault_links"], _column(rows, "fault_dims"), rows["slowdown"]):
        for i, link in enumerate(_as_list(links)):
            slowdowns[link].append(slowdown)
            if i < len(_as_list(link_dims)):
                dims[link].add(str(_as_list(link_dims)[i]))
    ends = {link: _ends(link) for link in slowdowns}
    ends = {link: e for link, e in ends.items() if e}
    if not ends:
        return None
    npus = int(data.table["gpus"].iloc[0]) if "gpus" in data.table else 1 + max(max(e) for e in ends.values())
    width = _row_width(data, npus)
    switches = sorted({n for e in ends.values() for n in e if n >= npus})
    position = {n: (n % width, -(n // width)) for n in range(npus)}
    below = -(math.ceil(npus / width)) - 1
    for i, node in enumerate(switches):
        position[node] = ((i + 0.5) * width / len(switches) - 0.5, below)
    mean = {link: sum(v) / len(v) for link, v in slowdowns.items() if link in ends}
    ranked = sorted(mean, key=lambda link: (-mean[link], link))
    traces = [go.Scatter(x=[position[n][0] for n in range(npus)], y=[position[n][1] for n in range(npus)],
                         mode="markers+text" if npus <= 64 else "markers", text=[str(n) for n in range(npus)],
                         textposition="middle center", textfont=dict(size=8),
                         marker=dict(size=16 if npus <= 64 else 6, color="#e8e8e8", line=dict(color="#999", width=1)),
                         name="GPU (NPU id)", hovertemplate="NPU %{text}<extra></extra>")]
    if switches:
        traces.append(go.Scatter(x=[position[n][0] for n in switches], y=[position[n][1] for n in switches],
                                 mode="markers", marker=dict(size=14, symbol="square", color="#bbbbbb"),
                                 text=[str(n) for n in switches], name="switch",
                                 hovertemplate="switch %{text}<extra></extra>"))
    xs, ys = [], []
    for link in ranked[WORST_LINKS:]:
        a, b = ends[link]
        xs += [position[a][0], position[b][0], None]
        ys += [position[a][1], position[b][1], None]
    if xs:
        traces.append(go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="#cccccc", width=1),
                                 name="other faulted links", hoverinfo="skip"))
    for link in ranked[:WORST_LINKS]:
        a, b = ends[link]
        traces.append(go.Scatter(x=[position[a][0], position[b][0]], y=[position[a][1], position[b][1]],
                                 mode="lines", line=dict(color=PALETTE[3], width=4), showlegend=False,
                                 hoverinfo="skip"))
    traces.append(go.Scatter(
        x=[(position[ends[k][0]][0] + position[ends[k][1]][0]) / 2 for k in ranked],
        y=[(position[ends[k][0]][1] + position[ends[k][1]][1]) / 2 for k in ranked],
        mode="markers", name="link (colour: mean slowdown)",
        marker=dict(size=9, color=[mean[k] for k in ranked], colorscale="Reds", showscale=True,
                    colorbar=dict(title=dict(text="mean<br>slowdown (x)"))),
        customdata=[[k, ", ".join(sorted(dims[k])) or "?", len(slowdowns[k])] for k in ranked],
        hovertemplate="link %{customdata[0]} (%{customdata[1]})<br>mean slowdown %{marker.color:.3f}x"
                      " over %{customdata[2]} samples<extra></extra>"))
    fig = go.Figure(traces)
    fig.update_layout(**base_layout(f"Which links hurt most when they degrade? The {min(WORST_LINKS, len(ranked))} "
                                    f"worst of {len(ranked)} faulted links in bold", "", "", height=560))
    fig.update_xaxes(visible=False)
    fig.update_yaxes(visible=False, scaleanchor="x")
    return fig


def _row_width(data: ReportData, npus: int) -> int:
    """NPUs per grid row: the innermost network dimension's size, from the study's hardware."""
    dims = data.hardware.dims_for(npus) if data.hardware else ()
    size = dims[0].size if dims else 0
    return size if 1 < size < npus else max(1, math.ceil(math.sqrt(npus)))


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
