"""ASTRA-sim's system.json as far as a replay reads it: its names for our collective algorithms
and for the key of each collective type, and the algorithms a file picks read back. Apart from
the bundle writer, so that `rapid replay` does not import what writing a bundle needs."""
import json
from pathlib import Path

from core.errors import SpecError

ASTRA_SIM_ALGORITHM = {"ring": "ring", "direct": "direct", "double_binary_tree": "doubleBinaryTree",
                       "halving_doubling": "halvingDoubling"}
SYSTEM_KEYS = {"all_reduce": "all-reduce-implementation", "all_gather": "all-gather-implementation",
               "reduce_scatter": "reduce-scatter-implementation", "all_to_all": "all-to-all-implementation"}


def load_system_algorithms(path) -> dict:
    """Our algorithm per collective from an ASTRA-sim system.json (first dimension's entry)."""
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecError(str(path), "system", "(file)", f"must be readable JSON ({exc})") from None
    ours = {v: k for k, v in ASTRA_SIM_ALGORITHM.items()}
    out = {}
    for collective, key in SYSTEM_KEYS.items():
        names = raw.get(key) if isinstance(raw, dict) else None
        if names is None:
            continue
        name = names[0] if isinstance(names, list) and names else names
        if name not in ours:
            raise SpecError(str(path), key, name, f"one of {', '.join(ours)}")
        out[collective] = ours[name]
    return out
