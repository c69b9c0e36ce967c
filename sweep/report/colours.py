"""Every colour the report uses, in one place, so a breakdown part or a memory kind has the
same colour in every report (and in its PNGs) whatever other parts the table holds."""
import zlib

# categorical colours for knob values, in the order a knob's values are listed
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")
EXCLUDED = "#b4b4b4"  # trials or layouts a view sets apart: memory-infeasible, violating a constraint
FRONT = "#d62728"  # a Pareto front and its line

# breakdown part (column without `breakdown_`) -> colour; communication parts are named by the
# network dimension they cross, so the dimension names of the presets and the paper's studies
# are fixed here and any other name gets a colour from COMM_EXTRA chosen by its name alone
PART_COLOURS = {"compute_s": "#4c78a8", "bubble_s": "#c9c9c9", "optimizer_s": "#b279a2",
                "comm_nvlink_s": "#f58518", "comm_ib_s": "#e45756", "comm_pcie_s": "#eeca3b",
                "comm_ethernet_s": "#9d755d", "comm_torus_s": "#54a24b", "comm_ring_s": "#72b7b2"}
COMM_EXTRA = ("#ff9da6", "#9c755f", "#d67195", "#79706e", "#ffbf79", "#439894", "#bcbd22", "#17becf")

# memory kind (column without `memory_` and `_gib`) -> colour
MEMORY_COLOURS = {"weights": "#4c78a8", "fp8_weights": "#9ecae9", "gradients": "#f58518",
                  "optimizer": "#b279a2", "activations": "#54a24b", "kv_cache": "#e45756",
                  "transient": "#eeca3b", "reserved": "#c9c9c9"}


def part_colour(part: str) -> str:
    """The colour of a breakdown part, e.g. `comm_ib_s`; the same name always gets the same one."""
    return PART_COLOURS.get(part) or COMM_EXTRA[zlib.crc32(part.encode()) % len(COMM_EXTRA)]


def memory_colour(kind: str) -> str:
    """The colour of a memory kind, e.g. `kv_cache`."""
    return MEMORY_COLOURS.get(kind) or COMM_EXTRA[zlib.crc32(kind.encode()) % len(COMM_EXTRA)]
