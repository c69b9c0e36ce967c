"""Views of a table's power and energy columns (core/model/power.py): the power-time
trade-off (step time against joules per token, each layout at each power limit) and the
layouts that spend the fewest joules per token."""
import plotly.graph_objects as go
import pyarrow as pa

from sweep.store.query import pareto_front
from .colours import FRONT, PALETTE
from .data import ReportData
from .grid import TOP_N, base_layout
from .search import METRIC_TITLES

LIMIT_COLUMN = "hardware_gpu_power_limit_w"  # the numeric twin of a hardware.gpu.power_limit knob


def per_token_column(data: ReportData) -> str | None:
    """energy_per_token_j (training) or energy_per_output_token_j (inference), where timed rows have it."""
    for column in ("energy_per_token_j", "energy_per_output_token_j"):
        if column in data.table.columns and data.timed[column].notna().any():
            return column
    return None


def power_time(data: ReportData) -> go.Figure | None:
    """Every timed layout by step time (x) and J per token (y), coloured by its power limit
    (or its average power); the layouts no other beats on both joined by a line."""
    column = per_token_column(data)
    if column is None:
        return None
    rows = data.timed.dropna(subset=["step_time_s", column]).reset_index(drop=True)
    limits = LIMIT_COLUMN in rows.columns and rows[LIMIT_COLUMN].nunique() > 1
    colour = LIMIT_COLUMN if limits else "power_avg_w"
    table = pa.table({"step_time_s": rows["step_time_s"].tolist(), "energy": rows[column].tolist(),
                      "row": list(range(len(rows)))})
    front = rows.iloc[pareto_front(table, [("step_time_s", False), ("energy", False)]).column("row").to_pylist()]
    front = front.sort_values("step_time_s")
    custom = [[data.label(r), r["power_avg_w"], r["gpu_clock_share"] * 100] for _, r in rows.iterrows()]
    hover = ("%{customdata[0]}<br>%{x:.3f} s, %{y:.4g} J per token<br>%{customdata[1]:.0f} W per GPU, clock "
             "%{customdata[2]:.0f} % of boost<extra></extra>")
    fig = go.Figure([
        go.Scatter(x=front["step_time_s"].tolist(), y=front[column].tolist(), mode="lines",
                   name="fewest joules at this time or less", line=dict(shape="hv", color=FRONT, width=2),
                   hoverinfo="skip"),
        go.Scatter(x=rows["step_time_s"].tolist(), y=rows[column].tolist(), mode="markers", name="layout",
                   marker=dict(size=9, color=rows[colour].tolist(), colorscale="Viridis", showscale=True,
                               line=dict(color="white", width=0.5),
                               colorbar=dict(title=dict(text="power limit (W)" if limits else "power per GPU (W)"))),
                   customdata=custom, hovertemplate=hover),
    ])
    time_title = "step time (s)" if column == "energy_per_token_j" else "request time (s)"
    fig.update_layout(**base_layout(f"What does a joule per token cost in time? Energy per token against "
                                    f"{time_title.split(' (')[0]} for all {len(rows)} timed points",
                                    time_title, METRIC_TITLES[column], height=460,
                                    legend=dict(orientation="h", y=-0.2, x=0)))
    return fig


def fewest_joules(data: ReportData) -> go.Figure | None:
    """The TOP_N points by J per token as bars, each with its power and step time beside it."""
    column = per_token_column(data)
    if column is None:
        return None
    rows = data.timed.dropna(subset=[column]).nsmallest(TOP_N, column)
    labels = [f"#{i} {data.label(r)}" for i, (_, r) in enumerate(rows.iterrows(), start=1)]
    text = [f"{r['power_avg_w']:.0f} W per GPU · {r['step_time_s']:.3f} s" for _, r in rows.iterrows()]
    fig = go.Figure(go.Bar(y=labels, x=rows[column].tolist(), orientation="h", name="energy per token",
                           marker=dict(color=PALETTE[2]), text=text, textposition="auto",
                           hovertemplate="%{y}<br>%{x:.4g} J per token<br>%{text}<extra></extra>"))
    fig.update_layout(**base_layout(f"Which points spend the fewest joules per token? The {len(rows)} lowest, with "
                                    "their power per GPU and time", METRIC_TITLES[column], "",
                                    height=max(380, 28 * len(rows) + 140)))
    fig.update_yaxes(autorange="reversed")
    return fig
