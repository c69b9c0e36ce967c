"""Reading the files users hand us: every problem (missing, a folder, unreadable, binary,
not YAML/JSON, a key given twice) is one SpecError line naming the file."""
import json
from pathlib import Path

import yaml

from .errors import SpecError


def read_text(path, source: str | None = None, kind: str = "file") -> str:
    """The file's text; `source` is how an error names it (default: the path), `kind` what
    the file is for (a study file, ...)."""
    file = Path(path)
    source = source or str(path)
    if file.is_dir():
        raise SpecError(source, "<file>", str(path), f"is a folder; expected a {kind}")
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise SpecError(source, "<file>", str(path), f"no such {kind}") from None
    except OSError as err:
        raise SpecError(source, "<file>", str(path), f"cannot read it ({err.strerror})") from None
    if b"\0" in data:
        raise SpecError(source, "<file>", file.name, "a binary file; expected YAML or JSON text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(source, "<file>", file.name, "not UTF-8 text; expected YAML or JSON text") from None


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML that refuses a mapping key given twice (plain YAML keeps the last silently)."""


def _mapping_without_duplicates(loader, node, deep=False):
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, (str, int, float, bool)) and key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(
                None, None, f"key '{key}' is given twice (line {mark.line + 1})", mark)
        seen.add(key if isinstance(key, (str, int, float, bool)) else id(key))
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping_without_duplicates)


def parse_mapping(text: str, source: str, name: str, as_json: bool = False) -> dict:
    """A YAML (or JSON) document whose top level is a mapping; duplicate keys refused."""
    try:
        data = json.loads(text, object_pairs_hook=_json_pairs) if as_json else yaml.load(text, _StrictLoader)
    except (yaml.YAMLError, json.JSONDecodeError, ValueError) as err:
        first = (str(err).strip().splitlines() or ["unreadable"])[0]
        if isinstance(err, yaml.MarkedYAMLError) and err.problem:
            first = f"{err.problem} at line {err.problem_mark.line + 1}" if err.problem_mark else err.problem
        raise SpecError(source, "<file>", name, f"not valid {'JSON' if as_json else 'YAML'} ({first})") from None
    if not isinstance(data, dict):
        raise SpecError(source, "<file>", name, "expected a mapping of fields at the top level")
    return data


def _json_pairs(pairs):
    keys = [k for k, _ in pairs]
    for key in keys:
        if keys.count(key) > 1:
            raise ValueError(f"key '{key}' is given twice")
    return dict(pairs)
