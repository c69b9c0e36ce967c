"""The kernel suite's accuracy targets (issue 21, point 2) and how many of its groups meet them:
per kernel class, on the GPUs the targets name, the groups (GPU, framework, kernel, dtype, size
bucket) whose median |error|, and for large GEMMs whose 90th-percentile |error|, are within
bounds. The median is of each row's |error|, as the targets are worded; a group whose rows
straddle zero can have a small median signed error and still miss (target_summary counts
those too, as the looser reading's)."""
from dataclasses import dataclass

from core.model.memory import MiB

from .kernels import SUITE, flop_bucket, message_bucket

TARGET_GPUS = ("h100_sxm", "h200_sxm", "b200_sxm", "gb200")


@dataclass(frozen=True)
class Target:
    name: str
    kernels: tuple  # kernel name prefixes of core.validation.kernels' records
    median_pct: float  # bound on the median |error|
    p90_pct: float = float("inf")  # bound on the 90th-percentile |error|
    buckets: tuple = ()  # size buckets it covers (): every bucket

    def covers(self, record: dict) -> bool:
        return record["gpu"] in TARGET_GPUS and record["kernel"].startswith(self.kernels) and \
            (not self.buckets or record["bucket"] in self.buckets)

    def met(self, record: dict, median: str = "median_abs_error_pct") -> bool:
        """Within bounds; `median` "median_error_pct" reads the bound on the median signed
        error's size instead (the looser reading)."""
        return abs(record[median]) <= self.median_pct and record["p90_abs_error_pct"] <= self.p90_pct

    @property
    def bound(self) -> str:
        p90 = f", p90 |error| <= {self.p90_pct:g} %" if self.p90_pct != float("inf") else ""
        return f"median |error| <= {self.median_pct:g} %{p90}"


TARGETS = (
    Target("GEMMs >= 1 GFLOP", ("gemm",), 7.0, 20.0, (flop_bucket(1e9), flop_bucket(100e9))),
    Target("GEMMs < 1 GFLOP", ("gemm",), 15.0, buckets=(flop_bucket(0.0),)),
    Target("prefill and decode attention (GQA and MLA)", ("attention.", "mla."), 12.0),
    Target("NCCL collectives >= 1 MiB", ("nccl.",), 10.0, buckets=(message_bucket(MiB),)),
)


def target_summary(records: list) -> list:
    """Per target: its name and bound, the groups it covers among `records` and how many meet
    it (and how many would with the median signed error's size in place of the median |error|),
    and the ones that miss (their records)."""
    out = []
    for target in TARGETS:
        covered = [r for r in records if r["suite"] == SUITE and target.covers(r)]
        missed = [r for r in covered if not target.met(r)]
        signed = sum(target.met(r, "median_error_pct") for r in covered)
        out.append({"target": target.name, "bound": target.bound, "gpus": list(TARGET_GPUS),
                    "groups": len(covered), "on_target": len(covered) - len(missed),
                    "on_target_signed_median": signed, "missed": missed})
    return out
