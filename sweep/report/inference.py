"""Views of an inference table (mode `infer`: one row per layout serving one batch of
requests): what a serving user chooses between, throughput (tokens/s) against the
latency each request sees, time to first token (TTFT) and time per output token (TPOT)."""
import plotly.graph_objects as go
import pyarrow as pa

from sweep.store.query import pareto_front
from .colours import FRONT, PALETTE
from .data import ReportData
from .grid import TOP_N, base_layout, mode

MS = 1e3  # seconds -> milliseconds: TTFT and TPOT read in ms


def is_inference_table(data: ReportData) -> bool:
    return mode(data) == "infer" and {"ttft_s", "tpot_s", "tokens_per_s"} <= set(data.table.columns)


def throughput_latency(data: ReportData) -> go.Figure | None:
    """Every layout by TPOT (x) and tokens/s (y), coloured by TTFT; the layouts no other
    beats on both (the front: more tokens/s at no higher TPOT) joined by a line."""
    rows = data.timed.dropna(subset=["tpot_s", "tokens_per_s"]).reset_index(drop=True)
    if rows.empty:
        return None
    labels = [[data.label(r), r["ttft_s"] * MS] for _, r in rows.iterrows()]
    table = pa.table({"tpot_s": rows["tpot_s"].tolist(), "tokens_per_s": rows["tokens_per_s"].tolist(),
                      "point_id": rows["point_id"].tolist(), "row": list(range(len(rows)))})
    front = rows.iloc[pareto_front(table, [("tpot_s", False), ("tokens_per_s", True)]).column("row").to_pylist()]
    front = front.sort_values("tpot_s")
    hover = "%{customdata[0]}<br>TPOT %{x:.2f} ms, %{y:,.0f} tokens/s<br>TTFT %{customdata[1]:.0f} ms<extra></extra>"
    fig = go.Figure([
        go.Scatter(x=(front["tpot_s"] * MS).tolist(), y=front["tokens_per_s"].tolist(), mode="lines",
                   name="best throughput at this TPOT or less", line=dict(shape="hv", color=FRONT, width=2),
                   hoverinfo="skip"),
        go.Scatter(x=(rows["tpot_s"] * MS).tolist(), y=rows["tokens_per_s"].tolist(), mode="markers", name="layout",
                   marker=dict(size=10, color=(rows["ttft_s"] * MS).tolist(), colorscale="Viridis", showscale=True,
                               line=dict(color="white", width=0.5),
                               colorbar=dict(title=dict(text="TTFT (ms)"))),
                   customdata=labels, hovertemplate=hover),
    ])
    fig.update_layout(**base_layout(f"Which layouts serve most tokens at what latency? Throughput against time per "
                                    f"output token for all {len(rows)} feasible layouts",
                                    "time per output token, TPOT (ms)", "throughput (output tokens/s)", height=460,
                                    legend=dict(orientation="h", y=-0.2, x=0)))
    return fig


def top_throughput(data: ReportData) -> go.Figure | None:
    """The TOP_N layouts by tokens/s as bars, each with its TTFT and TPOT written beside it."""
    rows = data.timed.dropna(subset=["tokens_per_s"]).nlargest(TOP_N, "tokens_per_s")
    if rows.empty:
        return None
    labels = [f"#{i} {data.label(r)}" for i, (_, r) in enumerate(rows.iterrows(), start=1)]
    text = [f"TTFT {r['ttft_s'] * MS:.0f} ms · TPOT {r['tpot_s'] * MS:.2f} ms" for _, r in rows.iterrows()]
    fig = go.Figure(go.Bar(y=labels, x=rows["tokens_per_s"].tolist(), orientation="h", name="throughput",
                           marker=dict(color=PALETTE[0]), text=text, textposition="auto",
                           hovertemplate="%{y}<br>%{x:,.0f} tokens/s<br>%{text}<extra></extra>"))
    fig.update_layout(**base_layout(f"Which layouts serve most tokens? The {len(rows)} highest throughputs with "
                                    "their time to first token and time per output token",
                                    "throughput (output tokens/s)", "", height=max(380, 28 * len(rows) + 140)))
    fig.update_yaxes(autorange="reversed")
    return fig
