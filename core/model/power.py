"""Watts and joules of one GPU from what it keeps busy, and the clock a power limit leaves it.

A span of work (a training step, an inference request, a serving run) is an `Activity`: its
wall time, the time a kernel runs, tensor-core FLOPs per dtype, HBM and link bytes, and how
much of that time is compute-bound (scales with the clock). Its energy at clock share `r`
(of the boost clock) is

    idle_w * time + active_w * r * v(r)^2 * busy + v(r)^2 * sum(flop_energy * FLOPs)
        + hbm_energy * HBM bytes + link_energy * link bytes

with v(r) the voltage share: v = floor + (1 - floor) r, the board's voltage-frequency curve as
a line through 1 at the boost clock (`voltage_floor`; 0: voltage in proportion to the clock).
SM power goes as f*V^2 per busy second and a FLOP's switching energy as V^2, while HBM and
links run on their own clocks and voltages. Measured on our own H100 (graded loads under its
700 W limit, scripts/fit_power_measured.py) the floor is about half the boost voltage: a
lower clock saves less per FLOP than V ~ f says, so a limit takes the clock further down. A limit below what the work would
draw at the boost clock lowers r until the power while kernels run meets it (busy_power_w);
compute-bound time then stretches by 1/r, memory-bound time does not."""
from collections import namedtuple
from functools import lru_cache

from .specs import PowerSpec

# The lowest clock share the limit may push a GPU to, an assumption: about a third of the
# boost clock (nvidia-smi also refuses limits far below the TDP). A limit the work still
# exceeds there is not met: the GPU runs at this floor.
CLOCK_FLOOR = 0.35
_BISECTIONS = 30  # the clock to within 1e-9 of the boost clock


class Activity(namedtuple("Activity", ("time_s", "busy_s", "flops", "hbm_bytes", "link_bytes", "compute_bound_s",
                                         "busy_compute_bound_s", "clock"), defaults=(0.0, 0.0, 0.0, 1.0))):
    """What one GPU does over `time_s` at the clock it was timed at (`clock` of the boost):
    `busy_s` of kernels, tensor-core `flops` ((dtype, FLOPs), ...), HBM and link bytes;
    `compute_bound_s` of the wall time, and `busy_compute_bound_s` of the busy time, scale
    with 1 / clock. A named tuple, not a frozen dataclass: a sweep makes several per point,
    and a tuple is built in a third of the time (collections', as typing costs start-up)."""
    __slots__ = ()

    def spanning(self, time_s: float) -> "Activity":
        """The same work over another wall time."""
        return Activity(time_s, self.busy_s, self.flops, self.hbm_bytes, self.link_bytes, self.compute_bound_s,
                        self.busy_compute_bound_s, self.clock)

    def within(self, time_s: float) -> "Activity":
        """The same work done in `time_s` of wall time, busy for at most all of it: an engine
        that emits the tokens faster than the static model times them did the work in its time."""
        busy_s = min(self.busy_s, time_s)
        share = busy_s / self.busy_s if self.busy_s else 0.0
        return Activity(time_s, busy_s, self.flops, self.hbm_bytes, self.link_bytes, self.compute_bound_s * share,
                        self.busy_compute_bound_s * share, self.clock)

    def at_clock(self, clock: float) -> "Activity":
        """The same work at another clock share: compute-bound time stretched or shrunk."""
        stretch = self.clock / clock - 1.0
        return Activity(self.time_s + self.compute_bound_s * stretch, self.busy_s + self.busy_compute_bound_s * stretch,
                        self.flops, self.hbm_bytes, self.link_bytes, self.compute_bound_s * (stretch + 1.0),
                        self.busy_compute_bound_s * (stretch + 1.0), clock)


def voltage_sq(share: float, floor: float) -> float:
    """The squared voltage share at clock share `share` on a curve with that floor."""
    return (floor + (1.0 - floor) * share) ** 2


def energy_j(power: PowerSpec, work: Activity) -> float:
    """Joules one GPU spends on `work` at the clock share it was timed at."""
    v2 = voltage_sq(work.clock, power.voltage_floor)
    flop_j = flops_j(power.flop_energy_j, work.flops)
    return (power.idle_w * work.time_s + power.active_w * work.clock * v2 * work.busy_s + v2 * flop_j
            + power.hbm_energy_j_per_byte * work.hbm_bytes + power.link_energy_j_per_byte * work.link_bytes)


@lru_cache(maxsize=16384)
def flops_j(flop_energy_j: tuple, flops: tuple) -> float:
    """Switching joules of ((dtype, FLOPs), ...) at the boost clock's voltage, from a
    PowerSpec's flop_energy_j. Memoized on the two tuples, not the PowerSpec: a step's FLOPs
    are shared by its layouts apart only in communication, and the table by hardware variants
    (equal PowerSpecs of a sweep's variants are apart objects, compared field by field)."""
    energy = dict(flop_energy_j)
    return sum(count * energy[dtype] for dtype, count in flops)


def held_energy_j(power: PowerSpec, work: Activity, physical_clock: float) -> float:
    """energy_j as the board's power controller holds it: the kernels draw the limit at most,
    but at CLOCK_FLOOR, where the limit is not met. A step timed by the fitted factors (the
    `relative` clock) already runs at the clock the limit leaves, and a served batch is done in
    its engine's time (Activity.within), so the model's energy over those busy times would
    otherwise count more than the limit lets through."""
    joules = energy_j(power, work)
    if physical_clock > CLOCK_FLOOR:
        busy_s = min(work.busy_s, work.time_s)
        joules = min(joules, power.limit_w * busy_s + power.idle_w * (work.time_s - busy_s))
    return joules


def power_w(power: PowerSpec, work: Activity) -> float:
    """Average watts one GPU draws over `work`."""
    return energy_j(power, work) / work.time_s if work.time_s > 0 else power.idle_w


def busy_power_w(power: PowerSpec, work: Activity) -> float:
    """Average watts while kernels run: what the limit holds down. The board's power
    controller is taken to average over windows longer than a kernel but shorter than a
    pipeline bubble or an exposed gradient reduction (an assumption, not a measured window),
    so it sees the mix of a layer's kernels, not the step's idle stretches."""
    if work.busy_s <= 0:
        return power.idle_w
    return energy_j(power, work.spanning(work.busy_s)) / work.busy_s


def clock_under(power: PowerSpec, work: Activity, limit_w: float) -> float:
    """The clock share (of the boost clock) at which `work` draws at most `limit_w` while its
    kernels run: 1 when the boost clock stays under it, CLOCK_FLOOR when even that is over.
    Busy power at clock r is idle + active r v(r)^2 + (v(r)^2 FLOP energy + HBM and link
    energy) / busy seconds at r, rising with r; solved by bisection on those few numbers."""
    return _clock_under(power, work.busy_s, work.busy_compute_bound_s, work.clock, work.flops, work.hbm_bytes,
                        work.link_bytes, limit_w)


@lru_cache(maxsize=16384)
def _clock_under(power: PowerSpec, busy_s: float, bound_s: float, clock: float, flops: tuple, hbm_bytes: float,
                 link_bytes: float, limit_w: float) -> float:
    """clock_under on the numbers it reads (not the wall time: steps that differ only in
    exposed communication ask again)."""
    flop_j = flops_j(power.flop_energy_j, flops)
    fixed_j = power.hbm_energy_j_per_byte * hbm_bytes + power.link_energy_j_per_byte * link_bytes
    idle_w, active_w, floor = power.idle_w, power.active_w, power.voltage_floor

    def over(r: float) -> bool:
        """Whether busy power at clock share r exceeds the limit."""
        busy_at_r = busy_s + bound_s * (clock / r - 1.0)
        if busy_at_r <= 0:
            return idle_w > limit_w
        v2 = voltage_sq(r, floor)
        return idle_w + active_w * r * v2 + (v2 * flop_j + fixed_j) / busy_at_r > limit_w

    if not over(1.0):
        return 1.0
    low, high = CLOCK_FLOOR, 1.0
    if over(low):
        return low
    for _ in range(_BISECTIONS):
        mid = (low + high) / 2
        if over(mid):
            high = mid
        else:
            low = mid
    return low


def whole_step_clock(power: PowerSpec, work: Activity, sustained_clock: float) -> tuple:
    """(clock share the step's kernels run at, the GPU's physical clock share) under the
    power limit. `relative`: the fitted sustained_clock holds at the default limit (tdp) and
    moves by the ratio of the model's clocks at the set limit and at the default one, so the
    throttling the fit already holds is not counted twice; `absolute`: the model's clock alone."""
    at_limit = clock_under(power, work, power.limit_w)
    if power.clock == "absolute":
        return at_limit, at_limit
    at_default = at_limit if power.limit_w == power.tdp_w else clock_under(power, work, power.tdp_w)
    return min(1.0, sustained_clock * at_limit / at_default), at_limit
