"""The README's own study example parses and plans as written."""
import re
from pathlib import Path

from sweep.cli import main
from sweep.study.grid import plan_study
from sweep.study.loader import load_study

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_study() -> str:
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    return next(b for b in blocks if b.startswith("name:"))


def test_readme_study_example_plans(tmp_path, capsys):
    path = tmp_path / "readme.yaml"
    path.write_text(readme_study())
    study = load_study(path)
    assert study.space.choices()["placement"] == ("tp,cp,dp,pp",)
    assert len(plan_study(study).points) > 0
    assert main(["sweep", str(path), "--dry-run", "--output", str(tmp_path / "out")]) == 0
    assert "legal" in capsys.readouterr().out and not (tmp_path / "out").exists()


def test_placement_as_a_list_of_orders(write_study):
    study = load_study(write_study(space={"placement": [["tp", "cp", "dp", "pp"], "dp,tp,cp,pp"]}))
    assert study.space.choices()["placement"] == ("tp,cp,dp,pp", "dp,tp,cp,pp")
