"""Content hashes of what a results folder's rows share: specs and study parts, stable across runs."""
import hashlib
import json
from dataclasses import asdict


def spec_digest(spec) -> str:
    """Hash of a frozen spec's contents; its display name and source label are left out,
    since renaming a file or preset changes no number."""
    fields = {k: v for k, v in asdict(spec).items() if k not in ("name", "source")}
    return digest(fields)


def digest(value) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
