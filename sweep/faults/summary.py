"""Per-point summaries of a fault table: slowdown percentiles (what fault searches optimise)
and the links whose faults hurt most."""
import numpy as np
import pyarrow as pa

from core import SpecError
from sweep.metrics import AGGREGATES


def fault_aggregates(rows) -> dict:
    """Per point_id over its fault samples (fault_sample >= 1 that could be simulated):
    {"slowdown_p50", "slowdown_p95", "slowdown_max", "step_time_p95_s"}; search objectives use
    these. `rows`: a fault table (pyarrow) or row dicts with those columns."""
    table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))
    frame = table.select(["point_id", "fault_sample", "slowdown", "step_time_s"]).to_pandas()
    frame = frame[(frame.fault_sample >= 1) & frame.slowdown.notna()]
    out = {}
    for point_id, group in frame.groupby("point_id", sort=True):
        slow, step = group.slowdown.to_numpy(), group.step_time_s.to_numpy()
        out[point_id] = {"slowdown_p50": float(np.percentile(slow, 50)), "slowdown_p95": float(np.percentile(slow, 95)),
                         "slowdown_max": float(slow.max()), "step_time_p95_s": float(np.percentile(step, 95))}
    return out


def faults_summary(table: pa.Table, knobs: list, worst_links: int = 3) -> pa.Table:
    """One row per point with fault samples: its varying knobs, baseline step, slowdown
    p50/p95/max, samples, the share replayed, unroutable samples, and the links whose faults
    slowed it most on average; most fragile (highest p95) first."""
    if "fault_sample" not in table.column_names:
        raise SpecError("command line", "--faults-summary", "", "this table has no fault samples (no faults: block)")
    frame = table.to_pandas()
    aggregates = fault_aggregates(table)
    base = frame[frame.fault_sample == 0].set_index("point_id")
    varying = [k for k in knobs if k in frame.columns and frame[k].nunique() > 1]
    samples = frame[frame.fault_sample >= 1]
    rows = []
    for point_id, stats in aggregates.items():
        mine = samples[samples.point_id == point_id]
        hurt = {}
        for links, slow in zip(mine.fault_links, mine.slowdown):
            for link in links if slow == slow else ():
                hurt.setdefault(link, []).append(slow)
        worst = sorted(hurt, key=lambda k: (-float(np.mean(hurt[k])), k))[:worst_links]
        row = {k: base.at[point_id, k] for k in varying}
        row.update({"point_id": point_id, "baseline_step_s": base.at[point_id, "step_time_s"], **stats,
                    "samples": len(mine), "replayed_share": float(mine.fault_replayed.mean()),
                    "unroutable": int(mine.fault_reason.notna().sum()),
                    "worst_links": ", ".join(f"{k} ({np.mean(hurt[k]):.3f})" for k in worst)})
        rows.append(row)
    rows.sort(key=lambda r: (-r["slowdown_p95"], r["point_id"]))
    columns = varying + ["point_id", "baseline_step_s"] + list(AGGREGATES) + ["samples", "replayed_share",
                                                                               "unroutable", "worst_links"]
    return pa.Table.from_pylist([{c: r[c] for c in columns} for r in rows])
