"""Views of a serving table (mode `serve`: one row per layout, engine and load, simulated by
core.serving): the throughput-interactivity frontier a capacity planner reads, output tokens/s
per GPU (what the fleet costs) against output tokens/s per user (what each user sees), and the
layouts that serve most under the study's latency SLOs."""
import re

import plotly.graph_objects as go
import pyarrow as pa

from core.model.specs import POOL_FIELDS, SERVE_LOAD_KNOBS, SERVE_POOLS
from core.serving.point import ENGINE_KNOBS, POOL_KNOBS
from sweep.store.query import pareto_front
from .colours import FRONT, PALETTE
from .data import ReportData
from .grid import TOP_N, base_layout, mode
from .search import goal, is_search_table

MS = 1e3
PER_GPU, PER_USER = "output_tokens_per_s_per_gpu", "output_tokens_per_s_per_user"
LOAD_KNOBS = tuple(k for k in SERVE_LOAD_KNOBS if k != "engine")  # what a deployment is asked, not how it is built
DISAGG_UNUSED = ("dp", "etp", *ENGINE_KNOBS)  # what a disaggregated row leaves at 1: its pools lay it out


def is_serving_table(data: ReportData) -> bool:
    return mode(data) == "serve" and {PER_GPU, PER_USER} <= set(data.table.columns)


def served(data: ReportData):
    """Configurations the simulator served: feasible, with both throughputs, once each (a search
    may ask one several times)."""
    rows = data.table[data.table["feasible"]].drop_duplicates("point_id")
    return rows.dropna(subset=[PER_GPU, PER_USER]).reset_index(drop=True)


def deployment(data: ReportData, row, engine: bool = True) -> str:
    """A row's layout and engine without its load: `dp2 tp8 adp8 trtllm` (`agg ...` in a table
    that has disaggregated rows too), or a disaggregated row's pools, `disagg 1 x tp8 prefill +
    1 x tp8 adp8 decode`. Without `engine`, the layout alone (what the frontier colours)."""
    knobs = [k for k in data.knobs if k not in LOAD_KNOBS and k not in POOL_KNOBS and k != "disagg"
             and (engine or k != "engine")]
    if row.get("disagg"):
        rest = [k for k in knobs if k not in DISAGG_UNUSED]
        pools = " + ".join(_pool(row, pool) for pool in SERVE_POOLS)
        return f"disagg {pools}" + (f" {data.label(row, rest)}" if rest else "")
    if "disagg" not in data.knobs:
        return data.label(row, knobs)
    return "agg" + (f" {data.label(row, knobs)}" if knobs else "")


def _pool(row, pool: str) -> str:
    """`1 x tp8 ep8 adp8 decode`: a pool's engines and what each is, defaults left out."""
    get = {name: int(row[f"{pool}_{name}"]) for name in POOL_FIELDS}
    parts = [f"{get['workers']} x tp{get['tp']}"]
    parts += [f"{prefix}{get[name]}" for name, prefix in (("ep", "ep"), ("attention_dp", "adp")) if get[name] > 1]
    parts += [f"b{get['batch']}"] if get["batch"] else []
    return " ".join(parts) + f" {pool}"


def load(data: ReportData, row) -> str:
    """What a row's deployment was asked: `concurrency 64`."""
    return ", ".join(f"{k} {row[k]}" for k in LOAD_KNOBS if k in data.knobs)


def seconds(value: float) -> str:
    """A latency as people read it: `850 ms`, `26.1 s`."""
    return f"{value * MS:.0f} ms" if value < 1 else f"{value:.1f} s"


def slo_bounds(data: ReportData) -> tuple:
    """(least tokens/s per user a `tpot_s <=` constraint allows or None, that constraint as text,
    the search's constraints)."""
    if not is_search_table(data):
        return None, "", ()
    constraints = goal(data).constraints
    floors = [(1.0 / bound, f"{c} {op} {bound:g}") for c, op, bound in constraints
              if c == "tpot_s" and op == "<=" and bound > 0]
    floors += [(bound, f"{c} {op} {bound:g}") for c, op, bound in constraints if c == PER_USER and op == ">="]
    floor, text = max(floors) if floors else (None, "")
    return floor, text, constraints


def meets(rows, constraints) -> list:
    """Whether each row meets every constraint (a search's `search.constraints`)."""
    ok = [True] * len(rows)
    for column, op, bound in constraints:
        if column in rows:
            values = rows[column].tolist()
            ok = [o and (v <= bound if op == "<=" else v >= bound) for o, v in zip(ok, values)]
    return ok


ENGINE_DASHES = ("solid", "dash", "dot", "dashdot")
BREAKS = "breaks a constraint"
LOG_TICKS = tuple(m * 10 ** e for e in range(7) for m in (1, 2, 5))  # 1, 2, 5, 10, ...: whole numbers read as such
ENGINE_SYMBOLS = ("circle", "square", "diamond", "triangle-up")


def frontier(data: ReportData) -> go.Figure | None:
    """Each deployment's points across the swept load joined by a line, coloured by layout and
    dashed by engine, the frontier (no other point gives more tokens/s per GPU at as many per
    user; in a search, no other point meeting its constraints) drawn over them on a log throughput axis (the load spans orders of magnitude), the
    region a TPOT SLO leaves shaded and points breaking a search's constraints hollow."""
    rows = served(data)
    if rows.empty:
        return None
    floor, tpot_text, constraints = slo_bounds(data)
    rows = rows.assign(deployment=[deployment(data, r) for _, r in rows.iterrows()],
                       layout=[deployment(data, r, engine=False) for _, r in rows.iterrows()],
                       meets=meets(rows, constraints))
    engines = list(dict.fromkeys(rows["engine"])) if "engine" in rows else []
    order = "concurrency" if "concurrency" in rows else PER_USER
    traces = []
    # legend and colours: layout by layout (numbers in their numeric order), its engines together
    firsts = rows.drop_duplicates("deployment").set_index("deployment", drop=False)
    names = sorted(firsts.index, key=lambda n: _natural(firsts.loc[n], engines))
    layouts = list(dict.fromkeys(firsts.loc[names, "layout"]))
    for name in names:
        group = rows[rows["deployment"] == name]
        group = group.sort_values(order)
        first = group.iloc[0]
        colour = PALETTE[layouts.index(first["layout"]) % len(PALETTE)]
        style = engines.index(first["engine"]) % len(ENGINE_DASHES) if engines else 0
        hover = [f"{name}<br>{load(data, r)}<br>TTFT p90 {seconds(r['ttft_p90_s'])}, TPOT {r['tpot_s'] * MS:.1f} ms"
                 + ("" if ok else f"<br>{BREAKS}") for ok, (_, r) in zip(group["meets"], group.iterrows())]
        traces.append(go.Scatter(
            x=group[PER_USER].tolist(), y=group[PER_GPU].tolist(), mode="lines+markers", name=name, legendgroup=name,
            line=dict(color=colour, width=1.5, dash=ENGINE_DASHES[style]),
            marker=dict(size=8, symbol=ENGINE_SYMBOLS[style], color=colour),
            text=hover, hovertemplate="%{text}<br>%{x:.1f} tok/s/user, %{y:,.0f} tok/s/GPU<extra></extra>"))
        broken = group[~group["meets"]]
        if len(broken):  # hollowed over the line's markers, so the legend keeps the solid one
            traces.append(go.Scatter(
                x=broken[PER_USER].tolist(), y=broken[PER_GPU].tolist(), mode="markers", legendgroup=name,
                name=f"{name}: {BREAKS}", showlegend=False, hoverinfo="skip",
                marker=dict(size=8, symbol=ENGINE_SYMBOLS[style], color="white", line=dict(color=colour, width=1.5))))
    # a search's frontier is over the points that meet its constraints: what the SLOs allow
    within = rows[rows["meets"]].reset_index(drop=True)
    table = pa.table({PER_USER: within[PER_USER].tolist(), PER_GPU: within[PER_GPU].tolist(),
                      "point_id": within["point_id"].tolist(), "row": list(range(len(within)))})
    front = within.iloc[pareto_front(table, [(PER_USER, True), (PER_GPU, True)]).column("row").to_pylist()]
    front = front.sort_values(PER_USER)
    traces.insert(0, go.Scatter(x=front[PER_USER].tolist(), y=front[PER_GPU].tolist(), mode="lines",
                                name="frontier" + (" within the constraints" if constraints else ""),
                                line=dict(color=FRONT, width=3, dash="dot"), hoverinfo="skip"))
    fig = go.Figure(traces)
    if floor is not None:
        fig.add_vrect(x0=floor, x1=max(rows[PER_USER].max(), floor) * 1.05, fillcolor="#2ca02c", opacity=0.08,
                      line_width=0, annotation_text=f"meets {tpot_text} (TPOT SLO)", annotation_position="bottom right")
    broken = [f"{c} {op} {b:g}" for c, op, b in constraints]
    note = (f"<br><sup>hollow markers break a constraint of the search ({' or '.join(broken)})</sup>"
            if broken and not all(rows["meets"]) else "")
    fig.update_layout(**base_layout(f"How many tokens does each GPU serve at the speed each user sees? "
                                    f"{len(rows)} simulated configurations, one line per deployment across its load"
                                    f"{note}", "output tokens/s per user (interactivity, 1 / TPOT)",
                                    "output tokens/s per GPU (throughput, log scale)", height=580,
                                    legend=dict(orientation="v", x=1.02, y=1)))
    fig.update_layout(margin=dict(t=90 if note else 60))
    fig.update_yaxes(type="log", tickvals=LOG_TICKS, ticktext=[f"{v:,}" for v in LOG_TICKS])
    return fig


def _natural(row, engines: list) -> tuple:
    """Sort key of a deployment: its layout's words with numbers compared as numbers, then its engine."""
    words = re.split(r"(\d+)", str(row["layout"]))
    return (tuple((0, int(w), "") if w.isdigit() else (1, 0, w) for w in words),
            engines.index(row["engine"]) if engines else 0)


def best_under_slo(data: ReportData) -> go.Figure | None:
    """The TOP_N configurations by tokens/s per GPU among those meeting the search's
    constraints (all served ones without a search), with their latencies written beside."""
    rows = served(data)
    if is_search_table(data):
        rows = rows[meets(rows, goal(data).constraints)]
    rows = rows.nlargest(TOP_N, PER_GPU)
    if rows.empty:
        return None
    labels = [f"#{i} {deployment(data, r)}, {load(data, r)}" for i, (_, r) in enumerate(rows.iterrows(), start=1)]
    text = [f"TTFT p90 {seconds(r['ttft_p90_s'])} · TPOT {r['tpot_s'] * MS:.1f} ms · {r[PER_USER]:.0f} tok/s/user"
            for _, r in rows.iterrows()]
    fig = go.Figure(go.Bar(y=labels, x=rows[PER_GPU].tolist(), orientation="h", marker=dict(color=PALETTE[0]),
                           text=text, textposition="auto", hovertemplate="%{y}<br>%{x:,.0f} tok/s/GPU<br>%{text}<extra></extra>"))
    within = (" that meet the study's constraints" if is_search_table(data) and goal(data).constraints
              else ", latency aside (a search's constraints would bound it)")
    fig.update_layout(**base_layout(f"Which configurations{within} serve most per GPU? The {len(rows)} best",
                                    "output tokens/s per GPU", "", height=max(380, 28 * len(rows) + 140)))
    fig.update_yaxes(autorange="reversed")
    return fig
