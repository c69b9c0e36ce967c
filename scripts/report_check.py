"""Render the reports of four small studies in headless Chromium at 1400 px wide and save a
screenshot of each, to look at as a person would (`make report-check`): the quick start (a
training grid), a fault study, a search with constraints and an inference study.

Each study is swept first if its table is missing (`--local`), reported with `rapid
report`, then loaded by Chromium with a virtual-time budget so plotly has drawn before the
shot. A screenshot whose page is its header alone, or nearly all white (plots not drawn),
fails the check."""
import shutil
import subprocess
import sys
from pathlib import Path

import matplotlib.image

ROOT = Path(__file__).resolve().parent.parent
RAPID = ROOT / ".venv" / "bin" / "rapid"
SHOTS = ROOT / "results" / "screenshots"
WIDTH, HEIGHT = 1400, 9000  # a laptop-wide window, tall enough for a whole report page
TRIM_MARGIN_PX = 40  # white kept below a page's last drawn row
VIRTUAL_TIME_MS = 20000
MIN_INK = 0.02  # share of non-white pixels, over the page's drawn height, below which it counts as blank
MIN_PAGE_PX = 500  # drawn height below which a page is its header alone (its plots not drawn)


STUDIES = ("quickstart.yaml", "faults_quick.yaml", "search_constraints_quick.yaml", "inference_quick.yaml",
           "serving_70b_h200.yaml", "serving_70b_slo.yaml", "serving_dsv3_b200.yaml", "serving_dsv3_slo.yaml")


def studies() -> list:
    return [ROOT / "studies" / name for name in STUDIES]


def browser() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    sys.exit("report-check: no chromium on PATH (make report-check installs Debian's chromium)")


def output_folder(study: Path) -> Path:
    out = subprocess.run([str(RAPID), "query", str(study), "--sql", "select 1", "--format", "csv"],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        subprocess.run([str(RAPID), "sweep", str(study), "--local", "--workers", "2", "--quiet"], check=True, cwd=ROOT)
    sys.path.insert(0, str(ROOT))
    from sweep.study.loader import load_study
    return ROOT / load_study(study).output


def ink(png: Path) -> tuple:
    """(share of non-white pixels down to the page's last drawn row, that row): over the page,
    not the tall window, so a short report of two figures is judged like a long one."""
    drawn = matplotlib.image.imread(png)[..., :3].min(axis=2) < 0.94
    rows = drawn.any(axis=1).nonzero()[0]
    height = int(rows[-1]) + 1 if len(rows) else 0
    return (float(drawn[:height].mean()) if height else 0.0), height


def trim(png: Path, height: int) -> None:
    """Cuts the tall window's blank tail off the screenshot, a margin below its last drawn row."""
    image = matplotlib.image.imread(png)
    matplotlib.image.imsave(png, image[:max(1, min(len(image), height + TRIM_MARGIN_PX))])


def main() -> int:
    chromium = browser()
    SHOTS.mkdir(parents=True, exist_ok=True)
    failed = 0
    for study in studies():
        folder = output_folder(study)
        page = SHOTS / f"{study.stem}.html"
        subprocess.run([str(RAPID), "report", str(folder), "--out", str(page)], check=True, cwd=ROOT)
        shot = SHOTS / f"{study.stem}.png"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={WIDTH},{HEIGHT}", f"--virtual-time-budget={VIRTUAL_TIME_MS}",
                        f"--screenshot={shot}", page.as_uri()],
                       check=True, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180)
        share, height = ink(shot)
        trim(shot, height)
        verdict = "ok" if share >= MIN_INK and height >= MIN_PAGE_PX else "BLANK"
        failed += verdict != "ok"
        print(f"{study.name:34s} {shot.relative_to(ROOT)}  {height:5d} px tall, {share:6.1%} of its pixels drawn  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
