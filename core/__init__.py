"""rapid-sweep core: specs, presets, the operator and memory models, and the analytical
executor. `evaluate` answers one configuration; everything else builds on it.

The names below load on first use, so a command that needs only `core.errors` (or nothing of
core, as `rapid net` and `rapid replay`) does not pay for the operator model."""
import importlib

_HOMES = {
    "SpecError": "core.errors",
    "BACKENDS": "core.evaluation", "estimate_memory": "core.evaluation", "evaluate": "core.evaluation",
    "check_layout": "core.model.layout",
    "list_presets": "core.model.loader", "load_hardware": "core.model.loader", "load_model": "core.model.loader",
    "HardwareSpec": "core.model.specs", "InferWorkload": "core.model.specs", "ModelSpec": "core.model.specs",
    "Parallelism": "core.model.specs", "TrainWorkload": "core.model.specs",
    "MODEL_VERSION": "core.version",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    home = importlib.import_module(_HOMES[name])
    for export, module in _HOMES.items():  # all of that module's names: `evaluate` the function, not the module
        if module == _HOMES[name]:
            globals()[export] = getattr(home, export)  # later lookups skip this function
    return globals()[name]


def __dir__() -> list:
    return sorted(set(globals()) | set(_HOMES))
