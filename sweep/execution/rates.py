"""The last rates measured on this machine (combinations per second, by kind: `plan`, `run
analytical`, ...), so that a study's size can be told in minutes before it starts. Kept in
the user's cache folder; only studies of at least MIN_COMBINATIONS are remembered."""
import json
import os
from pathlib import Path

MIN_COMBINATIONS = 10_000


def rates_file() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rapid-sweep" / "rates.json"


def last_rate(kind: str) -> float | None:
    try:
        return float(json.loads(rates_file().read_text())[kind])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember_rate(kind: str, combinations: int, seconds: float) -> None:
    """Keep `combinations / seconds` as the last rate of `kind`; a cache that cannot be
    written is no error (the estimate is only a courtesy)."""
    if combinations < MIN_COMBINATIONS or seconds <= 0:
        return
    path = rates_file()
    try:
        rates = json.loads(path.read_text()) if path.exists() else {}
        rates[kind] = combinations / seconds
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps(rates))
        temporary.replace(path)
    except (OSError, ValueError, TypeError):
        return
