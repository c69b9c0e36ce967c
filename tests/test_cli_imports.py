"""Each command imports only what it uses: `rapid run` never loads Optuna, plotly, pandas or
Ray, `sweep` loads Optuna only for a search and Ray only when it runs on Ray. Checked as the
set of modules a fresh process holds after the command, not by the clock."""
import json
import subprocess
import sys

import pytest

HEAVY = ("optuna", "sqlalchemy", "plotly", "pandas", "ray", "matplotlib")


def loaded_modules(argv: list, tmp_path) -> set:
    """The modules a fresh interpreter holds after `rapid argv`."""
    script = ("import json, sys\nfrom sweep.cli import main\n"
              f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
              "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


def modules_after(argv: list, tmp_path) -> set:
    """The top-level packages a fresh interpreter holds after `rapid argv`."""
    return {name.split(".")[0] for name in loaded_modules(argv, tmp_path)}


@pytest.mark.parametrize("argv", [
    ["--help"],
    ["run", "--help"],
    ["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--tp", "8", "--global-batch", "16"],
    ["net", "--help"],
    ["replay", "--help"],
    ["validate", "--help"],
    ["gemm", "--hardware", "h100-sxm5-80gb", "--m", "16", "--n", "4096", "--k", "4096"],
], ids=lambda argv: " ".join(argv[:2]))
def test_point_commands_import_no_table_search_plot_or_cluster_library(argv, tmp_path):
    assert not modules_after(argv, tmp_path) & set(HEAVY)


@pytest.mark.parametrize("argv", [
    ["run", "--help"],
    ["run", "--model", "llama3.1-8b", "--hardware", "a100-sxm4-80gb", "--tp", "8", "--global-batch", "16"],
], ids=lambda argv: " ".join(argv[:2]))
def test_run_times_a_point_without_numpy(argv, tmp_path):
    """numpy's import is a third of `rapid run`'s start-up; the operator model does without it."""
    assert "numpy" not in modules_after(argv, tmp_path)


def test_query_reads_tables_without_optuna_plotly_or_ray(tmp_path):
    assert not modules_after(["query", "--help"], tmp_path) & {"optuna", "sqlalchemy", "plotly", "ray", "matplotlib"}


def test_a_local_grid_sweep_loads_neither_optuna_nor_ray_nor_plotly(tmp_path):
    study = tmp_path / "tiny.yaml"
    study.write_text("name: tiny\nmodel: llama3.1-8b\nhardware: a100-sxm4-80gb\ngpus: 8\n"
                     "workload: {mode: train, global_batch: 16, seq: 2048}\nspace: {tp: [4, 8]}\n")
    loaded = modules_after(["sweep", str(study), "--local", "--workers", "1", "--quiet",
                            "--output", str(tmp_path / "out")], tmp_path)
    assert "pyarrow" in loaded  # it did write its table
    assert not loaded & {"optuna", "sqlalchemy", "plotly", "ray", "matplotlib"}


def test_report_loads_plotly_but_not_optuna_or_ray(tmp_path):
    loaded = modules_after(["report", "--help"], tmp_path)
    assert "plotly" in loaded and not loaded & {"optuna", "ray"}


# What `rapid net` has no use for: numpy and the YAML parser (a JSON network file), the operator
# model (core), and the standard library's costliest modules to import, which it does without.
NOT_FOR_NET = {"numpy", "yaml", "core", "dataclasses", "inspect", "typing", "threading"}


def test_net_on_a_json_network_file_imports_nothing_it_does_not_use(tmp_path):
    network = tmp_path / "switch.json"
    network.write_text(json.dumps({"topology": ["Switch"], "npus_count": [8], "bandwidth": [100.0],
                                   "latency": [1000.0]}))
    loaded = modules_after(["net", "--network", str(network), "--collective", "all_reduce", "--size", "1MiB",
                            "--json"], tmp_path)
    assert "astra_backend" in loaded and not loaded & NOT_FOR_NET


def test_net_help_imports_nothing_it_does_not_use(tmp_path):
    assert not modules_after(["net", "--help"], tmp_path) & NOT_FOR_NET



def test_replay_of_our_bundle_imports_neither_the_bundle_writer_nor_the_yaml_parser(tmp_path):
    """The bundle's network.yml is in the YAML subset the compiled reader takes, notes and all."""
    import core

    model, hw = core.load_model("qwen2.5-3b"), core.load_hardware("a100-sxm4-80gb")
    core.evaluate(model, hw, core.Parallelism(tp=2), core.InferWorkload(batch=1, prompt=64, decode=2), 2,
                  backend="astra-flattened", emit_traces=tmp_path)
    loaded = loaded_modules(["replay", str(tmp_path / model.name), "--network", str(tmp_path / "network.yml"),
                             "--comm-groups", str(tmp_path / "comm_group.json"), "--json"], tmp_path)
    assert "core.chakra.replay" in loaded  # it did replay
    assert not loaded & {"yaml", "core.chakra.bundle", "core.chakra.encode", "core.model", "core.replay"}
