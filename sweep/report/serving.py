"""Views of a serving table (mode `serve`: one row per layout, engine and load, simulated by
core.serving): the throughput-interactivity frontier a capacity planner reads, output tokens/s
per GPU (what the fleet costs) against output tokens/s per user (what each user sees), and the
layouts that serve most under the study's latency SLOs."""
import plotly.graph_objects as go
import pyarrow as pa

from core.model.specs import SERVE_KNOBS
from sweep.store.query import pareto_front
from .colours import FRONT, PALETTE
from .data import ReportData
from .grid import TOP_N, base_layout, mode
from .search import goal, is_search_table

MS = 1e3
PER_GPU, PER_USER = "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user"
LOAD_KNOBS = tuple(k for k in SERVE_KNOBS if k != "engine")  # what a deployment is asked, not how it is built


def is_serving_table(data: ReportData) -> bool:
    return mode(data) == "serve" and {PER_GPU, PER_USER} <= set(data.table.columns)


def served(data: ReportData):
    """Configurations the simulator served: feasible, with both throughputs, once each (a search
    may ask one several times)."""
    rows = data.table[data.table["feasible"]].drop_duplicates("point_id")
    return rows.dropna(subset=[PER_GPU, PER_USER]).reset_index(drop=True)


def deployment(data: ReportData, row) -> str:
    """A row's layout and engine without its load: `dp2 tp4 trtllm`."""
    return data.label(row, [k for k in data.knobs if k not in LOAD_KNOBS])


def slo_bounds(data: ReportData) -> tuple:
    """(least tokens/s per user a `tpot_s <=` constraint allows or None, the constraints as text)."""
    if not is_search_table(data):
        return None, ""
    constraints = goal(data).constraints
    floors = [1.0 / bound for column, op, bound in constraints if column == "tpot_s" and op == "<=" and bound > 0]
    floors += [bound for column, op, bound in constraints if column == PER_USER and op == ">="]
    text = ", ".join(f"{c} {op} {b:g}" for c, op, b in constraints)
    return (max(floors) if floors else None), text


def frontier(data: ReportData) -> go.Figure | None:
    """Each deployment's points across the swept load joined by a line, the frontier (no other
    point gives more tokens/s per GPU at as many per user) drawn over them, and the region a
    TPOT SLO leaves shaded."""
    rows = served(data)
    if rows.empty:
        return None
    rows = rows.assign(deployment=[deployment(data, r) for _, r in rows.iterrows()])
    order = "concurrency" if "concurrency" in rows else PER_USER
    traces = []
    for i, (name, group) in enumerate(rows.groupby("deployment", sort=False)):
        group = group.sort_values(order)
        hover = [f"{name}<br>{', '.join(f'{k} {r[k]}' for k in LOAD_KNOBS if k in data.knobs)}<br>"
                 f"TTFT p90 {r['ttft_p90_s'] * MS:.0f} ms, TPOT {r['tpot_s'] * MS:.1f} ms" for _, r in group.iterrows()]
        traces.append(go.Scatter(x=group[PER_USER].tolist(), y=group[PER_GPU].tolist(), mode="lines+markers", name=name,
                                 line=dict(color=PALETTE[i % len(PALETTE)], width=1.5), marker=dict(size=8),
                                 text=hover, hovertemplate="%{text}<br>%{x:.1f} tok/s/user, "
                                                                   "%{y:,.0f} tok/s/GPU<extra></extra>"))
    table = pa.table({PER_USER: rows[PER_USER].tolist(), PER_GPU: rows[PER_GPU].tolist(),
                      "point_id": rows["point_id"].tolist(), "row": list(range(len(rows)))})
    front = rows.iloc[pareto_front(table, [(PER_USER, True), (PER_GPU, True)]).column("row").to_pylist()]
    front = front.sort_values(PER_USER)
    traces.insert(0, go.Scatter(x=front[PER_USER].tolist(), y=front[PER_GPU].tolist(), mode="lines",
                                name="frontier", line=dict(color=FRONT, width=3, dash="dot"), hoverinfo="skip"))
    fig = go.Figure(traces)
    floor, text = slo_bounds(data)
    if floor is not None:
        fig.add_vrect(x0=floor, x1=max(rows[PER_USER].max(), floor) * 1.05, fillcolor="#2ca02c", opacity=0.08,
                      line_width=0, annotation_text=f"meets the TPOT SLO ({text})", annotation_position="top left")
    fig.update_layout(**base_layout(f"How many tokens does each GPU serve at the speed each user sees? "
                                    f"{len(rows)} simulated configurations, one line per deployment across its load",
                                    "output tokens/s per user (interactivity, 1 / TPOT)",
                                    "output tokens/s per GPU (throughput)", height=520,
                                    legend=dict(orientation="v", x=1.02, y=1)))
    return fig


def best_under_slo(data: ReportData) -> go.Figure | None:
    """The TOP_N configurations by tokens/s per GPU among those meeting the search's
    constraints (all served ones without a search), with their latencies written beside."""
    rows = served(data)
    if is_search_table(data):
        for column, op, bound in goal(data).constraints:
            if column in rows:
                rows = rows[rows[column] <= bound] if op == "<=" else rows[rows[column] >= bound]
    rows = rows.nlargest(TOP_N, PER_GPU)
    if rows.empty:
        return None
    labels = [f"#{i} {data.label(r)}" for i, (_, r) in enumerate(rows.iterrows(), start=1)]
    text = [f"TTFT p90 {r['ttft_p90_s'] * MS:.0f} ms · TPOT {r['tpot_s'] * MS:.1f} ms · {r[PER_USER]:.0f} tok/s/user"
            for _, r in rows.iterrows()]
    fig = go.Figure(go.Bar(y=labels, x=rows[PER_GPU].tolist(), orientation="h", marker=dict(color=PALETTE[0]),
                           text=text, textposition="auto", hovertemplate="%{y}<br>%{x:,.0f} tok/s/GPU<br>%{text}<extra></extra>"))
    within = (" that meet the study's constraints" if is_search_table(data) and goal(data).constraints
              else ", latency aside (a search's constraints would bound it)")
    fig.update_layout(**base_layout(f"Which configurations{within} serve most per GPU? The {len(rows)} best",
                                    "output tokens/s per GPU", "", height=max(380, 28 * len(rows) + 140)))
    fig.update_yaxes(autorange="reversed")
    return fig
