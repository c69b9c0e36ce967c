"""`rapid report --png`: the report's plotly figures drawn again with matplotlib.

plotly's own static export (kaleido 1.x) drives a Chrome it downloads at run time, which a
machine without that download cannot do; matplotlib installs from PyPI and draws the
handful of trace kinds the report uses (scatter, bar, box) with their titles, axis labels,
log scales, reference lines and the traces visible by default."""
import re
import textwrap
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (the backend is chosen first)
from matplotlib.colors import LinearSegmentedColormap  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, NullFormatter  # noqa: E402

DPI = 110
PT_PER_PX = 0.75  # plotly sizes markers in CSS pixels (1/96 in), matplotlib in points (1/72 in)


def write_pngs(figures: list, directory) -> list:
    """One PNG per figure, named by its order and title; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, figure in enumerate(figures, start=1):
        spec = figure.to_plotly_json()
        title = _text(spec["layout"].get("title"))
        path = directory / f"{number:02d}-{_slug(title)}.png"
        draw(spec).savefig(path, dpi=DPI)
        plt.close("all")
        paths.append(path)
    return paths


def draw(spec: dict):
    layout = spec["layout"]
    height = layout.get("height") or 440
    fig, ax = plt.subplots(figsize=(11, max(3.2, height / 100)), layout="constrained")
    traces = [t for t in spec["data"] if t.get("visible", True) is True]
    bars = [t for t in traces if t.get("type") == "bar"]
    categories = _categories(bars + [t for t in traces if t.get("type") == "box"])
    stacked = layout.get("barmode") == "stack"
    offsets = {}
    for index, trace in enumerate(traces):
        kind = trace.get("type", "scatter")
        if kind == "bar":
            _bar(ax, trace, bars.index(trace), len(bars), categories, stacked, offsets)
        elif kind == "box":
            _box(ax, trace, categories)
        else:
            _scatter(ax, fig, trace)
    for shape in layout.get("shapes", ()):
        line = dict(color=shape.get("line", {}).get("color", "black"), linestyle="--", linewidth=1)
        if shape.get("x0") == shape.get("x1") and shape.get("type") == "line" and "x domain" not in str(shape.get("xref")):
            ax.axvline(shape["x0"], **line)
        else:
            ax.axhline(shape.get("y0", 1.0), **line)
    _axes(ax, layout, categories, horizontal=any(t.get("orientation") == "h" for t in bars))
    ax.set_title("\n".join(textwrap.wrap(_text(layout.get("title")), 110)), loc="left", fontsize=11)
    if len(traces) > 1 and ax.get_legend_handles_labels()[0]:  # traces drew labelled artists
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


def _categories(traces: list) -> list:
    names = []
    for trace in traces:
        axis = "y" if trace.get("orientation") == "h" else "x"
        values = trace.get(axis)
        names += [str(v) for v in values] if values is not None else [str(trace.get("name"))]
    return list(dict.fromkeys(names))


def _bar(ax, trace, index, count, categories, stacked, offsets):
    horizontal = trace.get("orientation") == "h"
    keys = [str(v) for v in (trace["y"] if horizontal else trace["x"])]
    values = [v or 0.0 for v in (trace["x"] if horizontal else trace["y"])]
    positions = [categories.index(k) for k in keys]
    width = 0.8 if stacked else 0.8 / count
    shift = 0.0 if stacked else (index - (count - 1) / 2) * width
    base = [offsets.get(p, 0.0) if stacked else 0.0 for p in positions]
    color = trace.get("marker", {}).get("color")
    draw = ax.barh if horizontal else ax.bar
    container = draw([p + shift for p in positions], values, width, base, label=trace.get("name"), color=color)
    if trace.get("text"):
        ax.bar_label(container, labels=trace["text"], fontsize=8)
    if stacked:
        for p, v in zip(positions, values):
            offsets[p] = offsets.get(p, 0.0) + v


def _box(ax, trace, categories):
    name = str(trace["x"][0]) if trace.get("x") else str(trace.get("name"))
    values = [v for v in trace.get("y", []) if v is not None]
    if values:
        ax.boxplot([values], positions=[categories.index(name)], widths=0.6, showfliers=True,
                   flierprops=dict(markersize=2))


def _scatter(ax, fig, trace):
    mode = trace.get("mode", "markers")
    x, y = trace.get("x", []), trace.get("y", [])
    marker, line = trace.get("marker", {}), trace.get("line", {})
    if "lines" in mode:
        step = "post" if line.get("shape") == "hv" else None
        plot = ax.step if step else ax.plot
        kwargs = dict(where=step) if step else {}
        label = trace.get("name") if trace.get("showlegend", True) is not False else None
        for xs, ys in _runs(x, y):
            plot(xs, ys, color=_colour(line.get("color")), linewidth=line.get("width", 1.5), label=label, **kwargs)
            label = None
    if "markers" in mode:
        color = marker.get("color")
        area = (PT_PER_PX * np.asarray(marker.get("size", 6), dtype=float)) ** 2
        symbol = SYMBOLS.get(marker.get("symbol"), "o")
        if isinstance(color, (list, tuple)):
            points = ax.scatter(x, y, c=color, cmap=_colour_map(marker.get("colorscale")), s=area,
                                label=trace.get("name"), marker=symbol, zorder=3)
            if marker.get("showscale"):
                fig.colorbar(points, ax=ax, label=_text(marker.get("colorbar", {}).get("title")).replace("<br>", " "))
        elif str(marker.get("symbol", "")).endswith("-open"):
            ax.scatter(x, y, facecolors="none", edgecolors=color, s=area, label=trace.get("name"), marker=symbol,
                       zorder=2)
        else:
            ax.scatter(x, y, color=color, s=area, alpha=marker.get("opacity", 1.0), label=trace.get("name"),
                       marker=symbol, zorder=2)
    if "text" in mode and len(x) <= 64:
        right = "right" in str(trace.get("textposition", ""))
        for xi, yi, label in zip(x, y, trace.get("text", [])):
            ax.annotate(str(label), (xi, yi), xytext=(7 if right else 0, 0), textcoords="offset points",
                        ha="left" if right else "center", va="center", fontsize=6 if not right else 8, zorder=4)


# plotly marker symbol -> matplotlib marker
SYMBOLS = {"square": "s", "diamond": "D", "x": "x", "circle-open": "o"}


def _runs(x, y) -> list:
    """The pieces of a line that plotly breaks with None, as (xs, ys) each: matplotlib would
    read a None in a line of categories as one more category."""
    runs, xs, ys = [], [], []
    for xi, yi in zip(x, y):
        if xi is None or yi is None:
            runs.append((xs, ys))
            xs, ys = [], []
        else:
            xs.append(xi)
            ys.append(yi)
    return [run for run in runs + [(xs, ys)] if run[0]]


def _colour_map(scale):
    """plotly's colour scale ([[0, colour], ..., [1, colour]] or a name) as a matplotlib one."""
    if isinstance(scale, (list, tuple)):
        return LinearSegmentedColormap.from_list("plotly", [(float(at), _colour(c)) for at, c in scale])
    name = scale if isinstance(scale, str) else "viridis"
    return next((n for n in (name, name.lower()) if n in matplotlib.colormaps), "viridis")


def _colour(value):
    """A plotly colour matplotlib reads: `rgba(214, 39, 40, 0.45)` -> an RGBA tuple."""
    match = re.fullmatch(r"rgba?\(([^)]*)\)", str(value or "").replace(" ", ""))
    if not match:
        return value
    parts = [float(v) for v in match.group(1).split(",")]
    return tuple(v / 255 for v in parts[:3]) + tuple(parts[3:])


def _axes(ax, layout, categories, horizontal):
    xaxis, yaxis = layout.get("xaxis", {}), layout.get("yaxis", {})
    ax.set_xlabel(_text(xaxis.get("title")))
    ax.set_ylabel(_text(yaxis.get("title")))
    if categories:
        ticks = range(len(categories))
        if horizontal:
            ax.set_yticks(ticks, categories, fontsize=7)
        else:
            ax.set_xticks(ticks, categories, rotation=-xaxis.get("tickangle", 0) or (30 if len(categories) > 6 else 0),
                          ha="right" if len(categories) > 6 else "center", fontsize=7)
    if yaxis.get("autorange") == "reversed":
        ax.invert_yaxis()
    for axis, mpl_axis, set_scale in ((xaxis, ax.xaxis, ax.set_xscale), (yaxis, ax.yaxis, ax.set_yscale)):
        if axis.get("type") == "log":  # plain numbers on the ticks (4, 5, 6), not 4 x 10^0
            set_scale("log")
            mpl_axis.set_major_formatter(FormatStrFormatter("%g"))
            low, high = mpl_axis.get_data_interval()
            mpl_axis.set_minor_formatter(FormatStrFormatter("%g") if high < 10 * low else NullFormatter())
    if yaxis.get("scaleanchor") == "x":
        ax.set_aspect("equal", adjustable="datalim")
    if xaxis.get("visible") is False:
        ax.set_axis_off()
    ax.grid(alpha=0.3)


def _text(title) -> str:
    text = title.get("text", "") if isinstance(title, dict) else (title or "")
    return re.sub(r"<[^>]+>", " ", str(text)).strip()


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "figure"
