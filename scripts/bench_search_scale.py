"""Long Optuna searches: prints the figures issue 23 asks for, asserts nothing.

- a 1,000-trial TPE search (parallel 16, `--local --workers 2`) over studies/search_70b_hardware.yaml's
  space (layout x HBM bandwidth x L2 x InfiniBand, 4.6 M combinations): whole-command seconds
  (target 60 s), and the time per trial over its first and its last 200 trials (flat, not growing
  with the study, is the point of the journal storage);
- the same with NSGA-II on the study's own two objectives (step time and memory);
- a 10,000-trial random search of the same space: the Parquet parts it leaves (target <= 20)
  and its seconds.

Each search runs `rapid sweep` in a fresh process on a fresh folder.

    python scripts/bench_search_scale.py [--trials 1000] [--many 10000]"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sweep.search.storage import reader_storage  # noqa: E402
from sweep.store.parts import part_files  # noqa: E402
from sweep.study.loader import load_study  # noqa: E402


def study_file(folder: Path, name: str, sampler: str, trials: int, single_objective: bool = True) -> Path:
    data = yaml.safe_load((ROOT / "studies" / "search_70b_hardware.yaml").read_text())
    data.update(name=name, output=str(folder / name))
    data["search"].update(sampler=sampler, trials=trials)
    if single_objective:
        data["search"]["objectives"] = ["minimize step_time_s"]
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "sweep.cli", "sweep", str(path), "--local", "--workers", "2", "--quiet"],
                   check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def trial_seconds(path: Path, first: bool, count: int = 200) -> float:
    """Mean wall seconds between trial starts over the first or last `count` trials."""
    study = load_study(path)
    trials = optuna.load_study(study_name=study.name, storage=reader_storage(study.search.storage)).trials
    chosen = trials[:count] if first else trials[-count:]
    return (chosen[-1].datetime_start - chosen[0].datetime_start).total_seconds() / (len(chosen) - 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--many", type=int, default=10000, help="trials of the random search (0: skip it)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, sampler, single in (("TPE", "tpe", True), ("NSGA-II (two objectives)", "nsga2", False)):
            path = study_file(folder, sampler, sampler, args.trials, single)
            seconds = run(path)
            print(f"{args.trials:,}-trial {label} search: {seconds:.1f} s whole command (target 60 s); "
                  f"{1000 * trial_seconds(path, True):.1f} ms per trial over the first 200, "
                  f"{1000 * trial_seconds(path, False):.1f} ms over the last 200")
        if not args.many:
            return
        many = study_file(folder, "many", "random", args.many)
        seconds = run(many)
        parts = len(part_files(load_study(many).output))
        print(f"{args.many:,}-trial random search: {parts} Parquet part(s) (target <= 20), {seconds:.1f} s")


if __name__ == "__main__":
    main()
