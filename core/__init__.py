"""rapid-sweep core: specs, presets, the operator and memory models, and the analytical
executor. `evaluate` answers one configuration; everything else builds on it."""
from .errors import SpecError
from .evaluate import BACKENDS, estimate_memory, evaluate
from core.model.layout import check_layout
from core.model.loader import list_presets, load_hardware, load_model
from core.model.specs import HardwareSpec, InferWorkload, ModelSpec, Parallelism, TrainWorkload
from .version import MODEL_VERSION

__all__ = ["BACKENDS", "HardwareSpec", "InferWorkload", "MODEL_VERSION", "ModelSpec", "Parallelism", "SpecError",
           "TrainWorkload", "check_layout", "estimate_memory", "evaluate", "list_presets", "load_hardware", "load_model"]
