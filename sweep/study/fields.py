"""What every block of a study file checks first: that it names only fields it knows."""
from core import SpecError


def refuse_unknown(data: dict, allowed: tuple, source: str, prefix: str = "") -> None:
    """Refuse the first key of `data` not in `allowed`, naming it as `prefix` + key."""
    for key in data:
        if key not in allowed:
            raise SpecError(source, f"{prefix}{key}", data[key], f"unknown field (allowed: {', '.join(allowed)})")
