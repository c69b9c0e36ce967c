"""`rapid report`: each kind of table gets the figures its data supports, with one point
per row where it should, and no figure for data it lacks."""
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from sweep.cli import main
from sweep.execution.engine import run_study
from sweep.search.loop import run_search
from sweep.report.colours import EXCLUDED, memory_colour, part_colour
from sweep.report.page import build_report, figure_specs, header_facts, write_html
from sweep.store.parts import read_results
from sweep.study.loader import load_study

STUDY_TEXT = yaml.safe_dump({"name": "hand", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 8,
                             "workload": {"mode": "train", "global_batch": 16, "seq": 2048},
                             "space": {"tp": [1, 2], "recompute": ["none", "full"]}})


def grid_columns() -> dict:
    """Four layouts (tp x recompute); tp 1 without recompute does not fit in memory."""
    return {
        "point_id": ["a", "b", "c", "d"], "model": ["llama3.1-8b"] * 4, "gpus": [8] * 4, "mode": ["train"] * 4,
        "tp": [1, 1, 2, 2], "recompute": ["none", "full", "none", "full"],
        "feasible": [False, True, True, True], "infeasible_reason": ["needs 90 GiB", None, None, None],
        "step_time_s": [None, 3.0, 2.0, 2.5], "memory_peak_gib": [90.0, 60.0, 50.0, 40.0],
        "memory_weights_gib": [30.0, 30.0, 15.0, 15.0], "memory_activations_gib": [60.0, 30.0, 35.0, 25.0],
        "breakdown_compute_s": [None, 2.5, 1.5, 2.0], "breakdown_comm_nvlink_s": [None, 0.5, 0.5, 0.5],
        "breakdown_dp_comm_total_s": [None, 0.9, 0.9, 0.9],
    }


def write_table(folder, columns: dict, **metadata) -> None:
    """A results folder of one part, as `rapid sweep` writes it (study text in the metadata)."""
    folder.mkdir(parents=True)
    meta = {"study": STUDY_TEXT, "study_name": "hand", "knobs": "tp,recompute", **metadata}
    table = pa.table(columns).replace_schema_metadata({f"rapid.{k}": str(v) for k, v in meta.items()})
    pq.write_table(table, folder / "part-000000.parquet")


def page_figures(folder, tmp_path) -> dict:
    """Title -> plotly figure spec, read back from the written page."""
    page = write_html(build_report(folder), tmp_path / "page.html").read_text()
    return {spec["layout"]["title"]["text"]: spec for spec in figure_specs(page)}


def find(figures: dict, start: str) -> dict:
    matches = [spec for title, spec in figures.items() if title.startswith(start)]
    assert len(matches) == 1, f"{start!r} in {list(figures)}"
    return matches[0]


def trace(spec: dict, name: str) -> dict:
    matches = [t for t in spec["data"] if t.get("name") == name]
    assert len(matches) == 1, f"{name!r} in {[t.get('name') for t in spec['data']]}"
    return matches[0]


def visible_points(spec: dict) -> list:
    return [len(trace["x"]) for trace in spec["data"] if trace.get("visible", True) is True]


def test_grid_report_ranks_feasible_layouts_and_draws_no_fault_search_or_variant_views(tmp_path):
    write_table(tmp_path / "grid", grid_columns())
    figures = page_figures(tmp_path / "grid", tmp_path)
    ranked = find(figures, "Which layouts are fastest? All 3 feasible layouts")
    # coloured by the knob that moves step time most: tp (medians 3.0 vs 2.25 s) over recompute;
    # the biggest group is drawn first, so the smaller ones lie on top of it
    assert [t["name"] for t in ranked["data"] if t["visible"] is True] == ["tensor parallel (tp) = 2 (2)",
                                                                         "tensor parallel (tp) = 1 (1)"]
    assert visible_points(ranked) == [2, 1]
    assert sum(len(t["x"]) for t in ranked["data"]) == 3 * 2  # one set of traces per varying knob
    assert ranked["layout"]["xaxis"]["type"] == ranked["layout"]["yaxis"]["type"] == "log"  # the fastest get room
    breakdown = find(figures, "Where does the time go?")
    assert [t["name"] for t in breakdown["data"]] == ["compute", "exposed comm. on nvlink"]  # no dp total
    assert breakdown["data"][0]["x"] == [1.5, 2.0, 2.5]  # fastest first
    memory = find(figures, "Does it fit?")
    assert {t["name"] for t in memory["data"]} == {"weights", "activations"}
    effect = find(figures, "Effect of tensor parallel (tp)")
    assert trace(effect, "best")["y"] == [3.0, 2.0]  # best per value
    assert len(figures) == 5
    assert not any(t.startswith(("How much do link faults", "Which links", "How fast did the search",
                                 "Where does a hardware change")) for t in figures)


def fault_columns() -> dict:
    """Two layouts, a fault-free baseline (sample 0) and three single-link samples each."""
    rows = []
    for point, tp, slowdowns in (("a", 1, [1.5, 1.1, 1.2]), ("b", 2, [1.05, 1.0, 1.02])):
        rows.append((point, tp, 0, [], 2.0, 1.0))
        for sample, (link, slowdown) in enumerate(zip(["0-1", "1-2", "8-9"], slowdowns), start=1):
            rows.append((point, tp, sample, [link], 2.0 * slowdown, slowdown))
    point, tp, sample, links, step, slowdown = (list(c) for c in zip(*rows))
    n = len(rows)
    return {"point_id": point, "model": ["llama3.1-8b"] * n, "gpus": [8] * n, "mode": ["train"] * n, "tp": tp,
            "recompute": ["none"] * n, "feasible": [True] * n, "step_time_s": step,
            "fault_sample": pa.array(sample, pa.int64()), "fault_links": pa.array(links, pa.list_(pa.string())),
            "fault_dims": pa.array([["nvlink"] * len(x) for x in links], pa.list_(pa.string())),
            "fault_factors": pa.array([[0.5] * len(x) for x in links], pa.list_(pa.float64())),
            "slowdown": slowdown, "fault_replayed": [s > 0 for s in sample], "fault_reason": [None] * n}


def test_fault_report_draws_slowdown_per_layout_and_the_faulted_links(tmp_path):
    write_table(tmp_path / "faults", fault_columns())
    figures = page_figures(tmp_path / "faults", tmp_path)
    boxes = find(figures, "How much do link faults slow each layout down?")
    assert [t["x"][0] for t in boxes["data"] if t["type"] == "box"] == ["tp1", "tp2"]  # most fragile first
    assert [len(t["y"]) for t in boxes["data"]] == [3, 3]  # baselines are not samples
    links = find(figures, "Which links hurt most when they degrade?")
    npus = next(t for t in links["data"] if t.get("name") == "GPU (NPU id)")
    assert len(npus["x"]) == 8
    switches = next(t for t in links["data"] if t.get("name") == "switch")
    assert switches["text"] == ["8", "9"]  # node ids past the NPUs
    midpoints = next(t for t in links["data"] if t.get("name", "").startswith("faulted link"))
    assert [c[0] for c in midpoints["customdata"]] == ["0-1", "8-9", "1-2"]  # mean 1.275, 1.11, 1.05
    assert midpoints["marker"]["color"] == pytest.approx([1.275, 1.11, 1.05])
    assert not any(t.startswith(("How fast did the search", "Where does a hardware change")) for t in figures)


def search_columns() -> dict:
    columns = grid_columns()
    columns["trial_number"] = pa.array([0, 1, 2, 3], pa.int64())
    columns["sampler"] = ["tpe"] * 4
    return columns


def test_search_report_without_storage_notes_the_missing_importances(tmp_path):
    write_table(tmp_path / "search", search_columns())
    report = build_report(tmp_path / "search")
    page = write_html(report, tmp_path / "page.html").read_text()
    figures = {spec["layout"]["title"]["text"]: spec for spec in figure_specs(page)}
    history = find(figures, "How fast did the search converge? Minimize step time (s) (tpe sampler)")
    assert trace(history, "meets the constraints (3)")["x"] == [1, 2, 3]  # timed trials
    assert trace(history, "best so far")["y"] == [3.0, 2.0, 2.0]
    assert trace(history, "did not fit in memory (1)")["x"] == [0]  # drawn apart, along the top
    front = find(figures, "What does the best trial cost? step time (minimize) against peak memory")
    assert [len(trace(front, n)["x"]) for n in ("meets the constraints (3)", "Pareto front (2)")] == [3, 2]
    assert "names no Optuna storage" in page and "carries no search: block" in page
    assert not any(t.startswith("Which knobs mattered") for t in figures)


def test_search_report_reads_importances_from_the_optuna_storage(tmp_path):
    import optuna
    storage = f"sqlite:///{tmp_path / 'search.db'}"
    study = optuna.create_study(study_name="hand-search", storage=storage, sampler=optuna.samplers.RandomSampler(0))
    for tp, recompute, seconds in ((1, "full", 3.0), (2, "none", 2.0), (2, "full", 2.5), (1, "none", 3.2)):
        study.add_trial(optuna.trial.create_trial(
            params={"tp": tp, "recompute": recompute}, value=seconds,
            distributions={"tp": optuna.distributions.CategoricalDistribution([1, 2]),
                           "recompute": optuna.distributions.CategoricalDistribution(["none", "full"])}))
    write_table(tmp_path / "search", search_columns(), optuna_storage=storage, optuna_study="hand-search")
    figures = page_figures(tmp_path / "search", tmp_path)
    bars = find(figures, "Which knobs mattered to the search?")["data"][0]
    assert sorted(bars["y"]) == ["recompute policy", "tensor parallel (tp)"]
    assert sum(bars["x"]) == pytest.approx(1.0)


VARIANT_STUDY = {"name": "variants", "model": "llama3.1-8b", "hardware": "a100-pcie-80gb", "gpus": 8,
                 "workload": {"mode": "train", "global_batch": 16, "seq": 2048},
                 "space": {"tp": [2, 4], "recompute": ["full"]},
                 "variants": {"base": {}, "fast-hbm": {"hardware.gpu.hbm.bandwidth": "7740 GB/s"},
                              "big-hbm": {"hardware.gpu.hbm.capacity": "160 GB"}},
                 "baseline": "base"}


def test_variants_are_crossed_with_the_space_and_reported_as_speedups(tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text(yaml.safe_dump({**VARIANT_STUDY, "output": str(tmp_path / "out")}, sort_keys=False))
    study = load_study(path)
    run_study(study, executor="inprocess", progress=False)
    table = read_results(study.output).to_pandas()
    assert sorted(zip(table["variant"], table["tp"])) == sorted((v, tp) for v in ("base", "fast-hbm", "big-hbm")
                                                                 for tp in (2, 4))
    assert table["point_id"].nunique() == 6
    by_variant = table.groupby("variant")["step_time_s"].min()
    assert by_variant["fast-hbm"] < by_variant["base"]  # more bandwidth, less time
    assert by_variant["big-hbm"] == by_variant["base"]  # capacity alone changes no time
    figures = page_figures(study.output, tmp_path)
    speedup = find(figures, "Where does a hardware change pay? Training speedup over base")
    bars = speedup["data"][0]
    assert bars["x"] == ["base", "fast-hbm", "big-hbm"]
    assert bars["y"] == pytest.approx([1.0, by_variant["base"] / by_variant["fast-hbm"], 1.0])


@pytest.mark.parametrize("change, field", [
    ({"variants": ["base", "fast"]}, "variants"),
    ({"variants": {"base": {}, "x": {"gpu.hbm.bandwidth": "1 TB/s"}}}, "variants.x.gpu.hbm.bandwidth"),
    ({"variants": {"base": {}, "x": {"hardware.gpu.hbm.bandwith": "1 TB/s"}}}, "variants.x.hardware.gpu.hbm.bandwith"),
    ({"variants": {"base": {}, "x": {}}}, "variants.x"),
    ({"baseline": "missing"}, "baseline"),
    ({"variants": {"base": {}, "x": {"hardware.gpu.hbm.bandwidth": "1 TB/s"}},
      "space": {"tp": [2], "hardware.gpu.hbm.bandwidth": ["2 TB/s"]}}, "variants.x.hardware.gpu.hbm.bandwidth"),
])
def test_a_malformed_variants_block_is_one_line_and_writes_nothing(tmp_path, capsys, change, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**VARIANT_STUDY, "output": str(tmp_path / "out"), **change}, sort_keys=False))
    assert main(["sweep", str(path), "--local", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and f"field '{field}'" in err
    assert not (tmp_path / "out").exists()


def test_cli_writes_the_page_and_pngs_of_the_same_figures(tmp_path, capsys):
    write_table(tmp_path / "grid", grid_columns())
    assert main(["report", str(tmp_path / "grid"), "--out", str(tmp_path / "r.html"), "--png", str(tmp_path / "png")]) == 0
    assert "5 figures" in capsys.readouterr().out
    pngs = sorted((tmp_path / "png").glob("*.png"))
    assert len(pngs) == 5 and all(p.read_bytes()[:4] == b"\x89PNG" for p in pngs)
    page = (tmp_path / "r.html").read_text()
    assert "Plotly.newPlot" in page and "src=\"http" not in page  # plotly.js inlined, nothing fetched


def run_tiny(tmp_path, study: dict) -> object:
    """A real results table from a small study run in-process (not a hand-made one)."""
    path = tmp_path / f"{study['name']}.yaml"
    path.write_text(yaml.safe_dump({**study, "output": str(tmp_path / study["name"])}, sort_keys=False))
    loaded = load_study(path)
    if loaded.search is not None:
        run_search(loaded, executor="inprocess", progress=False)
    else:
        run_study(loaded, executor="inprocess", progress=False)
    return loaded.output


def test_fault_study_links_are_drawn_where_the_studys_own_torus_puts_them(tmp_path):
    """The network comes from the study's `hardware.network` override (a 2x2 torus times a
    ring of 2), not the preset: NPU 2 starts the torus's second row, NPU 4 the next block."""
    output = run_tiny(tmp_path, {
        "name": "tiny-faults", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 8,
        "overrides": {"hardware.network": [
            {"name": "torus", "topology": "torus2d", "size": 4, "link_bandwidth": "100 GB/s", "latency": "1 us"},
            {"name": "ring", "topology": "ring", "size": 2, "link_bandwidth": "25 GB/s", "latency": "1 us"}]},
        "workload": {"mode": "train", "global_batch": 8, "seq": 1024},
        "space": {"tp": [2, 4], "pp": [1], "recompute": ["full"]}, "backend": "astra-hierarchical",
        "faults": {"samples": 6, "seed": 1, "links": "all", "count": 1, "factor": [0.5]}})
    figures = page_figures(output, tmp_path)
    boxes = find(figures, "How much do link faults slow each layout down?")
    assert sorted(len(t["y"]) for t in boxes["data"] if t["type"] == "box") == [6, 6]
    assert " parallel (" in boxes["data"][0]["name"]  # coloured by a knob (tp and dp move together here)
    links = find(figures, "Which links hurt most when they degrade?")
    npus = next(t for t in links["data"] if t.get("name") == "GPU (NPU id)")
    assert (npus["x"][2], npus["y"][2]) == (0, -1) and (npus["x"][4], npus["y"][4]) == (4, 0)
    assert "one block per torus (torus2d of 4)" in links["layout"]["xaxis"]["title"]["text"]
    marks = next(t for t in links["data"] if t.get("name", "").startswith("faulted link"))
    table = read_results(output).to_pandas()
    faulted = {link for links_ in table["fault_links"] for link in links_}
    assert sorted(c[0] for c in marks["customdata"]) == sorted(faulted)
    assert {c[1] for c in marks["customdata"]} <= {"torus", "ring"}


def test_refined_search_ranks_each_layout_once_and_shows_range_knobs_in_their_units(tmp_path):
    output = run_tiny(tmp_path, {
        "name": "tiny-search", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 8,
        "workload": {"mode": "train", "global_batch": 8, "seq": 1024},
        "space": {"tp": [1, 2, 4, 8], "recompute": ["full"],
                  "hardware.gpu.hbm.bandwidth": {"low": "1 TB/s", "high": "4 TB/s", "step": "0.1 TB/s"}},
        "search": {"sampler": "random", "trials": 20, "parallel": 4, "seed": 3,
                   "refine": {"backend": "astra-hierarchical", "top": 3}}})
    table = read_results(output).to_pandas()
    analytical = table[(table["backend"] == "analytical") & table["feasible"]]
    assert (table["backend"] == "astra-hierarchical").sum() == 3
    figures = page_figures(output, tmp_path)
    layouts = analytical["point_id"].nunique()  # a point asked again is one layout, not one per trial
    ranked = find(figures, f"Which layouts are fastest? All {layouts} feasible layouts")
    assert sum(visible_points(ranked)) == layouts  # refined rows are not ranked twice
    history = find(figures, "How fast did the search converge?")
    assert len(trace(history, f"meets the constraints ({len(analytical)})")["x"]) == len(analytical)
    assert len(trace(history, "re-evaluated with astra-hierarchical")["x"]) == 3  # drawn apart
    effect = find(figures, "Effect of HBM bandwidth (TB/s)")
    points = next(t for t in effect["data"] if t.get("name") in ("best", "layout"))  # dots, or a scatter past 12 values
    assert all(1.0 <= float(x) <= 4.0 for x in points["x"])  # TB/s, not bytes/s
    assert find(figures, "Which knobs mattered to the search?")["data"][0]["y"]  # read from the study's storage


def test_the_default_page_leaves_the_folder_readable_as_one_parquet_dataset(tmp_path, capsys):
    """pandas.read_parquet(FOLDER) reads every file in the folder but those starting with '_' or
    '.': the page `rapid report` writes there by default must not break the README's promise."""
    import pandas as pd

    folder = run_tiny(tmp_path, {**yaml.safe_load(STUDY_TEXT), "name": "readable"})
    assert main(["report", str(folder)]) == 0
    assert str(folder / "_report.html") in capsys.readouterr().out
    assert len(pd.read_parquet(folder)) == len(read_results(folder))


def test_a_study_where_nothing_fits_says_so_and_how_far_the_nearest_is(tmp_path):
    folder = run_tiny(tmp_path, {**yaml.safe_load(STUDY_TEXT), "name": "nofit", "model": "llama3.1-405b",
                                 "space": {"tp": [4, 8]}})
    report = build_report(folder)
    page = write_html(report, tmp_path / "page.html").read_text()
    nearest = min(read_results(folder).column("memory_peak_gib").to_pylist())
    assert not report.sections and figure_specs(page) == []
    assert f"No layout fits in memory, so none was timed: the 2 rows need at least {nearest:.1f} GiB per GPU" in page


SEARCH_FAULT_STUDY = {**yaml.safe_load(STUDY_TEXT), "faults": {"samples": 3, "seed": 1, "links": "all"},
                      "search": {"sampler": "tpe", "trials": 2,
                                 "objectives": ["minimize step_time_s", "minimize slowdown_p95"],
                                 "constraints": ["slowdown_p95 <= 1.3"]}}


def test_a_search_report_draws_the_studys_objectives_and_the_trials_its_constraint_excludes_apart(tmp_path):
    """Objectives step time and p95 slowdown under faults, constraint p95 <= 1.3: layout a (p95
    slowdown 1.47x) breaks it and is drawn grey in its own trace, off the front; b (1.05x) meets it."""
    columns = {**fault_columns(), "trial_number": pa.array([0] * 4 + [1] * 4, pa.int64()), "sampler": ["tpe"] * 8}
    write_table(tmp_path / "search", columns, study=yaml.safe_dump(SEARCH_FAULT_STUDY))
    page = write_html(build_report(tmp_path / "search"), tmp_path / "page.html").read_text()
    figures = {spec["layout"]["title"]["text"]: spec for spec in figure_specs(page)}
    trade = find(figures, "What does the search trade? step time (minimize) against 95th-percentile slowdown")
    assert trade["layout"]["yaxis"]["title"]["text"] == "95th-percentile slowdown under faults (x)"  # not memory
    meets, front = trace(trade, "meets the constraints (1)"), trace(trade, "Pareto front (1)")
    broken = trace(trade, "breaks a constraint (1)")
    assert meets["x"] == front["x"] == [2.0] and broken["x"] == [2.0]
    assert broken["marker"]["color"] == EXCLUDED and broken["legendgroup"] == "breaks"
    assert broken["y"] == pytest.approx([1.47])  # the p95 of a's samples 1.5, 1.1, 1.2
    assert "slowdown_p95 <= 1.3" in broken["customdata"][0][1]  # the hover says which constraint
    assert [shape["y0"] for shape in trade["layout"]["shapes"]] == [1.3]  # the bound, dashed
    assert find(figures, "How fast did the search converge? Minimize 95th-percentile slowdown")
    assert "minimize step_time_s, minimize slowdown_p95 with slowdown_p95 &lt;= 1.3" in page  # in the header
    assert "the 1 that break the study&#x27;s constraints (slowdown_p95 &lt;= 1.3) included" in page  # grid views say so


INFER_STUDY = {"name": "serve", "model": "llama3.1-8b", "hardware": "a100-sxm4-80gb", "gpus": 8,
               "workload": {"mode": "infer", "batch": 4, "prompt": 512, "decode": 64}, "space": {"tp": [1, 2, 4]}}


def test_an_inference_report_draws_ttft_tpot_and_tokens_per_s_and_its_header_names_no_training_setting(tmp_path):
    output = run_tiny(tmp_path, INFER_STUDY)
    table = read_results(output).to_pandas()
    report = build_report(output)
    figures = page_figures(output, tmp_path)
    serving = find(figures, "Which layouts serve most tokens at what latency?")
    layouts = trace(serving, "layout")
    assert sorted(layouts["x"]) == pytest.approx(sorted(table["tpot_s"] * 1e3))  # TPOT in ms, one per layout
    assert serving["layout"]["xaxis"]["title"]["text"] == "time per output token, TPOT (ms)"
    assert "TTFT" in layouts["marker"]["colorbar"]["title"]["text"]
    top = find(figures, "Which layouts serve most tokens? The 3 highest throughputs")
    assert all(text.startswith("TTFT ") and " TPOT " in text for text in top["data"][0]["text"])
    assert find(figures, "Where does the time go?")["layout"]["xaxis"]["title"]["text"] == \
        "seconds per request (prefill + decode)"
    assert "request time (s)" in find(figures, "Which layouts are fastest?")["layout"]["yaxis"]["title"]["text"]
    header = dict(header_facts(report.data))
    assert header["inference"] == "batch of 4 requests, prompt 512 tokens, decode 64 tokens"
    words = " ".join(f"{k} {v}" for k, v in header.items()).lower()
    assert not any(w in words for w in ("training", "global batch", "seq", "micro", "recompute", "zero"))


def test_every_breakdown_part_and_memory_kind_has_one_colour_in_every_report(tmp_path):
    """Two tables with different parts: a part both have keeps its colour, whatever else is there."""
    write_table(tmp_path / "one", grid_columns())
    other = {**grid_columns(), "breakdown_bubble_s": [None, 0.1, 0.1, 0.1], "breakdown_comm_ib_s": [None, 0.2, 0.2, 0.2],
             "memory_optimizer_gib": [5.0, 5.0, 5.0, 5.0]}
    write_table(tmp_path / "two", other)
    colours = []
    for name in ("one", "two"):
        figures = page_figures(tmp_path / name, tmp_path)
        parts = find(figures, "Where does the time go?")["data"] + find(figures, "Does it fit?")["data"]
        colours.append({t["name"]: t["marker"]["color"] for t in parts})
    shared = colours[0].keys() & colours[1].keys()
    assert shared == {"compute", "exposed comm. on nvlink", "weights", "activations"}
    assert all(colours[0][name] == colours[1][name] for name in shared)
    assert colours[1]["compute"] == part_colour("compute_s") and colours[1]["weights"] == memory_colour("weights")
    breakdown = [colours[1][n] for n in ("compute", "pipeline bubble", "exposed comm. on nvlink", "exposed comm. on ib")]
    assert len(set(breakdown)) == len(breakdown)


def test_knob_effects_are_dots_on_an_axis_that_does_not_start_at_zero_labelled_by_relative_change(tmp_path):
    """30 s against 33 s: bars from 0 would look equal; dots on an axis near the data, with +10 %."""
    columns = grid_columns()
    columns["step_time_s"] = [None, 33.0, 30.0, 31.0]
    write_table(tmp_path / "grid", columns)
    effect = find(page_figures(tmp_path / "grid", tmp_path), "Effect of tensor parallel (tp)")
    assert {t["type"] for t in effect["data"]} == {"scatter"}  # no bars
    best = trace(effect, "best")
    assert best["y"] == [33.0, 30.0] and best["text"] == ["+10.0 %", "fastest"]
    assert "axis not from 0" in effect["layout"]["yaxis"]["title"]["text"]


def test_pngs_draw_the_search_fault_and_inference_views(tmp_path):
    """`rapid report --png` draws the views with log axes, grey set-apart trials, per-link marker
    sizes and colour scales as well as the plain ones."""
    from sweep.report.png import write_pngs

    columns = {**fault_columns(), "trial_number": pa.array([0] * 4 + [1] * 4, pa.int64()), "sampler": ["tpe"] * 8}
    write_table(tmp_path / "search", columns, study=yaml.safe_dump(SEARCH_FAULT_STUDY))
    figures = build_report(tmp_path / "search").figures + build_report(run_tiny(tmp_path, INFER_STUDY)).figures
    paths = write_pngs(figures, tmp_path / "png")
    assert len(paths) == len(figures) and all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
