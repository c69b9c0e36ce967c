"""Where a link sits in the drawing of a network: NPU positions and the path of a link
between two nodes, following the node numbering of astra_backend (dimension 0 innermost;
a 2-D dimension of size n numbered row-major in rows of n / f, f the largest divisor of
n not above its square root).

The innermost dimension is drawn as one block (a grid for 2-D topologies, else a row);
the blocks of the next dimension side by side, a block's width apart so the links between
two blocks meet in the gap; further dimensions stack the rows of blocks. Links between
neighbours are arcs (straight inside a block), wrap-around links short stubs at both
ends (between blocks: into the gap beside the first and the last block, where no other
link is), switches a row below everything."""
import math
from dataclasses import dataclass

TWO_D = ("mesh2d", "torus2d", "kingmesh2d")
ARC_POINTS = 9


@dataclass(frozen=True)
class Drawing:
    npus: int
    block: int  # NPUs in the innermost dimension
    columns: int  # NPUs per row of a block
    rows: int  # rows of a block
    blocks_across: int  # blocks side by side (the second dimension's size)

    def position(self, node: int) -> tuple:
        """(x, y) of an NPU; y grows downwards as negative numbers."""
        local, block = node % self.block, node // self.block
        column, row = local % self.columns, local // self.columns
        across, down = block % self.blocks_across, block // self.blocks_across
        return (across * 2 * self.columns + column, -(down * 2 * (self.rows + 1) + row))

    def link_path(self, a: int, b: int, switches: dict) -> tuple:
        """(xs, ys, (x, y) of the link's marker) for the link a-b; None separates stubs."""
        pa = switches.get(a) or self.position(a)
        pb = switches.get(b) or self.position(b)
        pa, pb = sorted((pa, pb))
        if a in switches or b in switches or self._neighbours(a, b):
            bulge = 0.0 if a // self.block == b // self.block else 0.5
            return _arc(pa, pb, bulge)
        if pa[1] == pb[1] or pa[0] == pb[0]:  # a wrap-around link: a stub out of each end
            axis = 0 if pa[1] == pb[1] else 1
            low, high = sorted((pa, pb), key=lambda p: p[axis] * (1 if axis == 0 else -1))
            step = 0.5 if a // self.block == b // self.block else self.columns
            out_high = (high[0] + step, high[1]) if axis == 0 else (high[0], high[1] - 0.5)
            out_low = (low[0] - step, low[1]) if axis == 0 else (low[0], low[1] + 0.5)
            return [high[0], out_high[0], None, low[0], out_low[0]], \
                   [high[1], out_high[1], None, low[1], out_low[1]], out_high
        return _arc(pa, pb, 0.3 * math.dist(pa, pb))  # any other link (fully connected, hypercube)

    def _neighbours(self, a: int, b: int) -> bool:
        (xa, ya), (xb, yb) = self.position(a), self.position(b)
        if a // self.block == b // self.block:
            return abs(xa - xb) + abs(ya - yb) == 1
        same_place = a % self.block == b % self.block
        across = abs(xa - xb) == 2 * self.columns and ya == yb
        down = xa == xb and abs(ya - yb) == 2 * (self.rows + 1)
        return same_place and (across or down)


def drawing(dims: tuple, npus: int) -> Drawing:
    """The layout for a network's dimensions (sized for `npus`); one row when unknown."""
    if not dims or not 1 < dims[0].size <= npus:
        columns = max(1, math.ceil(math.sqrt(npus)))
        return Drawing(npus, npus, columns, math.ceil(npus / columns), 1)
    inner = dims[0]
    rows = max(d for d in range(1, math.isqrt(inner.size) + 1) if inner.size % d == 0) \
        if inner.topology in TWO_D else 1
    across = dims[1].size if len(dims) > 1 and dims[1].size > 1 else 1
    return Drawing(npus, inner.size, inner.size // rows, rows, across)


def _arc(pa: tuple, pb: tuple, bulge: float) -> tuple:
    """A quadratic curve from pa to pb whose middle sits bulge / 2 off the chord."""
    (xa, ya), (xb, yb) = pa, pb
    length = math.dist(pa, pb) or 1.0
    cx, cy = (xa + xb) / 2 - bulge * (yb - ya) / length, (ya + yb) / 2 + bulge * (xb - xa) / length
    xs, ys = [], []
    for i in range(ARC_POINTS):
        t = i / (ARC_POINTS - 1)
        xs.append((1 - t) ** 2 * xa + 2 * t * (1 - t) * cx + t ** 2 * xb)
        ys.append((1 - t) ** 2 * ya + 2 * t * (1 - t) * cy + t ** 2 * yb)
    middle = ARC_POINTS // 2
    return xs, ys, (xs[middle], ys[middle])
