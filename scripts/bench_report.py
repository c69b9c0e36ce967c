"""Time `rapid report` on the quick start's table (swept first if missing): wall-clock
seconds from the command line to the written page, its size and figure count."""
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RAPID = ROOT / ".venv" / "bin" / "rapid"
TABLE = ROOT / "results" / "quickstart"
RUNS = 3


def main() -> int:
    if not list(TABLE.glob("part-*.parquet")):
        subprocess.run([str(RAPID), "sweep", "studies/quickstart.yaml", "--local", "--quiet"], check=True, cwd=ROOT)
    page = ROOT / "results" / "bench-report.html"
    seconds = []
    for _ in range(RUNS):
        start = time.perf_counter()
        out = subprocess.run([str(RAPID), "report", str(TABLE), "--out", str(page)], check=True, cwd=ROOT,
                             capture_output=True, text=True)
        seconds.append(time.perf_counter() - start)
    print(out.stdout.strip())
    print(f"rapid report on results/quickstart: best {min(seconds):.2f} s, worst {max(seconds):.2f} s "
          f"over {RUNS} runs (whole command, interpreter start included); page {page.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
