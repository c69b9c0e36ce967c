"""One Parquet dataset per study: `part-NNNNNN.parquet` files in the output folder.

One writer at a time: a store holds an advisory lock on the folder (`.rapid.lock`, naming
its pid and host) for as long as it is open; a second writer is refused, or waits.
Each part is written under a hidden temporary name unique to its writer and renamed into
place, so a killed run leaves only whole parts; the point_ids in those parts are what a
re-run skips. A part that cannot be read, or that another study definition wrote, is
reported by name, never read past.
Parts share one schema (rows sorted by point_id), so pandas, polars and DuckDB open the
folder directly; the study file, tool version and git commit ride in the schema metadata.

A faults study (sweep.faults) has one row per (point, sample): rows are keyed, for resume
and sorting, by (point_id, fault_sample), and a re-run skips exactly the keys present.

Compaction merges runs of consecutive small parts (search rounds, time-flushed parts) into one:
the merged part is written under a temporary name, renamed over the run's last part, and only
then are the run's other parts removed. The merged part records the first name of the run
(`REPLACES_KEY`), so a part left behind by a kill before its removal is ignored by every reader
here and removed by the next writer: at every step a reader sees each row exactly once."""
import bisect
import errno
import fcntl
import json
import os
import re
import socket
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core import SpecError

from sweep.study.plan import definition_changes

PART_PREFIX = "part-"
TEMP_SUFFIX = ".tmp"
LOCK_NAME = ".rapid.lock"
FINISHED_NAME = "_finished.json"  # a finished study's plan summary, valid while the parts are as it lists them
DEFINITION_KEY = "definition"  # metadata entry: JSON {component: digest}; parts of another are refused
REPLACES_KEY = b"rapid_store.replaces"  # a merged part replaces every part named from this up to its own name
_TEMP_WRITER = re.compile(r"\.(?P<host>[^.]+)\.(?P<pid>\d+)\.[0-9a-f]+" + re.escape(TEMP_SUFFIX) + "$")
GROUP_PREFIXES = ("memory_", "breakdown_", "detail_")
LEAD_COLUMNS = ("memory_peak_gib",)  # a metric, though it shares the memory_ prefix
LAST_COLUMNS = ("eval_time_s",)
SEARCH_KEY = "optuna_storage"  # what a search's parts record (sweep.search.loop.search_metadata) and a grid's do not


class ResultStore:
    """Appends parts to a study's folder and knows which points it already holds."""

    def __init__(self, directory: Path, metadata: dict, fresh: bool = False, wait: bool = False):
        self.directory = Path(directory)
        self.metadata = {f"rapid.{k}".encode(): str(v).encode() for k, v in metadata.items()}
        self.definition = metadata.get(DEFINITION_KEY)
        self.searching = SEARCH_KEY in metadata
        _make_folder(self.directory)
        self._lock = _lock_folder(self.directory, wait)
        for stray in self.directory.glob(f".{PART_PREFIX}*{TEMP_SUFFIX}"):
            if not _writer_alive(stray.name):
                stray.unlink(missing_ok=True)
        if fresh:
            for part in _all_parts(self.directory):
                part.unlink()
        else:
            _remove_replaced(self.directory)
            self._check_definition()

    def close(self) -> None:
        """Release the folder for the next writer."""
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def parts(self) -> list:
        """Every part file: under the lock, once replaced parts are removed, all are live."""
        return _all_parts(self.directory)

    def done_ids(self) -> set:
        """point_ids of every finished part."""
        return {point for (point,) in self.done_keys(("point_id",))}

    def _check_definition(self) -> None:
        """Refuse to add rows to a table another study definition wrote (they would be mixed), or
        a search's trials to a grid's rows and back (a search reads the table as its trials)."""
        if self.definition is None:
            return
        for part in self.parts():
            metadata = _part_metadata(part)
            if (SEARCH_KEY in metadata) != self.searching:
                raise SpecError(str(self.directory), "output", str(part.name),
                                f"holds {'a search' if SEARCH_KEY in metadata else 'a grid'}'s rows, which "
                                f"{'a search' if self.searching else 'a grid'}'s would mix with; run with --fresh "
                                "to discard them, or --output a new folder")
            changed = definition_changes(metadata.get(DEFINITION_KEY), self.definition, metadata.get("knobs", ""))
            if changed:
                raise SpecError(str(self.directory), "output", str(part.name),
                                f"holds rows of another study definition ({changed} changed); run with --fresh "
                                f"to discard them, or --output a new folder")

    def done_keys(self, columns: tuple) -> set:
        """Tuples of `columns` (e.g. point_id, fault_sample) of every row of every finished part."""
        done = set()
        for part in self.parts():
            table = _read_part(part, columns=list(columns))
            done.update(zip(*(table.column(c).to_pylist() for c in columns)))
        return done

    def write_part(self, tables: list) -> int:
        """Concatenate batch tables into one part, sorted by `sort_keys`, written atomically."""
        parts = self.parts()
        schema = unified_schema([t.schema for t in tables] + [_read_schema(p) for p in parts[-1:]])
        # each batch conformed on its own: a breakdown part one batch lacks is 0 s on its timed rows
        table = pa.concat_tables([conform(t, schema) for t in tables])
        table = table.sort_by(sort_keys(table))
        index = int(parts[-1].stem.removeprefix(PART_PREFIX)) + 1 if parts else 0
        _write_atomically(table.replace_schema_metadata(self.metadata), self.directory / f"{PART_PREFIX}{index:06d}.parquet")
        return table.num_rows

    def harmonise(self) -> None:
        """Rewrite any part whose columns differ from the union, so every reader sees one schema."""
        parts = self.parts()
        schemas = [_read_schema(p) for p in parts]
        target = unified_schema(schemas)
        for part, schema in zip(parts, schemas):
            if not schema.remove_metadata().equals(target):
                table = _read_part(part)
                _write_atomically(conform(table, target).replace_schema_metadata(schema.metadata), part)

    def mark_finished(self, key: str, summary: dict) -> None:
        """Record that the study `key` names is finished, with its plan `summary` and the parts
        (name, bytes, mtime) it left, so a re-run can answer without planning."""
        record = {"key": key, "summary": summary, "parts": _part_stamps(self.directory)}
        temp = self.directory / f".{FINISHED_NAME}{TEMP_SUFFIX}"  # one writer: the lock holder
        temp.write_text(json.dumps(record))
        os.replace(temp, self.directory / FINISHED_NAME)

    def compact(self, rows: int) -> None:
        """Merge each run of consecutive parts that fits in `rows` rows into one part, after
        harmonising: rows, columns, the newest part's metadata and the order a reader sees
        stay as they were."""
        self.harmonise()
        runs, run_rows = [[]], 0
        for part in self.parts():
            part_rows = pq.read_metadata(part).num_rows
            if runs[-1] and run_rows + part_rows > rows:
                runs, run_rows = runs + [[]], 0
            runs[-1].append(part)
            run_rows += part_rows
        for run in runs:
            if len(run) > 1:
                _merge(run)


def _merge(run: list) -> None:
    """Write the rows of `run` (consecutive parts, one schema) over its last part, recording
    the first name it replaces, then remove the others. Rows stay in the order a reader sorts them
    (stable sort of the parts in name order)."""
    tables = [_read_part(p) for p in run]
    first = min([run[0].name] + [t.schema.metadata[REPLACES_KEY].decode() for t in tables
                                 if REPLACES_KEY in (t.schema.metadata or {})])
    table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    metadata = {**(tables[-1].schema.metadata or {}), REPLACES_KEY: first.encode()}
    _write_atomically(table.sort_by(sort_keys(table)).replace_schema_metadata(metadata), run[-1])
    for part in run[:-1]:
        part.unlink()


def finished_summary(directory, key: str) -> dict | None:
    """The plan summary `mark_finished` recorded for `key`, if the parts are still exactly those
    it saw (a part added, removed, rewritten or compacted since means: plan again)."""
    try:
        record = json.loads((Path(directory) / FINISHED_NAME).read_text())
    except (OSError, ValueError):
        return None
    if record.get("key") != key or record.get("parts") != _part_stamps(directory):
        return None
    return record["summary"]


def _part_stamps(directory) -> list | None:
    try:
        return [[p.name, p.stat().st_size, p.stat().st_mtime_ns] for p in _all_parts(directory)]
    except FileNotFoundError:  # a writer removed a part meanwhile: no record matches
        return None


def _all_parts(directory) -> list:
    return sorted(Path(directory).glob(f"{PART_PREFIX}*.parquet"))


def _live(parts: list, metadata: list) -> list:
    """`parts` (in name order) but those a merged part among them replaces."""
    names = [p.name for p in parts]
    replaced = set()
    for index, meta in enumerate(metadata):
        if REPLACES_KEY in (meta or {}):
            replaced.update(range(bisect.bisect_left(names, meta[REPLACES_KEY].decode()), index))
    return [p for i, p in enumerate(parts) if i not in replaced]


def _remove_replaced(directory: Path) -> None:
    """Remove the parts a killed compaction left behind (a merged part holds their rows)."""
    parts = _all_parts(directory)
    live = set(_live(parts, [_read_schema(p).metadata for p in parts]))
    for part in parts:
        if part not in live:
            part.unlink()


def part_files(directory) -> list:
    """The table's parts in name order, without those a merged part replaces. Safe beside a
    writer: a part removed between listing and reading means a compaction ran; list again."""
    while True:
        parts = _all_parts(directory)
        try:
            return _live(parts, [_read_schema(p).metadata for p in parts])
        except FileNotFoundError:
            continue


def read_results(directory, columns: set | None = None) -> pa.Table:
    """The whole study table, one schema, rows sorted by point_id; with `columns`, only those
    of them a part has (a summary of a large table need not hold the rest). Each part is read
    once, its metadata with its rows, so a compaction running beside never shows a row twice."""
    while True:
        parts = _all_parts(directory)
        try:
            tables = [_read_part(p, None if columns is None else [c for c in _read_schema(p).names if c in columns])
                      for p in parts]
            break
        except FileNotFoundError:
            continue
    live = set(_live(parts, [t.schema.metadata for t in tables]))
    tables = [t for p, t in zip(parts, tables) if p in live]
    if not tables:
        return pa.table({})
    schema = unified_schema([t.schema for t in tables])
    table = pa.concat_tables([conform(t, schema) for t in tables])
    table = table.sort_by(sort_keys(table))
    metadata = {k: v for k, v in (tables[-1].schema.metadata or {}).items() if k != REPLACES_KEY}
    return table.replace_schema_metadata(metadata)


def results_dataset(parts: list):
    """The table of `parts` (part_files') as a dataset read while it is scanned: SQL over a large
    table then reads the columns and rows it asks for, not the whole table. Rows come in no set
    order. None where there are no parts, or their columns differ (read_results fills a column
    a part lacks as its kind wants, 0 s of a breakdown part on a timed row, which a scan would
    leave null)."""
    import pyarrow.dataset as ds

    try:
        schemas = [_read_schema(p).remove_metadata() for p in parts]
    except FileNotFoundError:  # a compaction removed a part meanwhile
        return None
    if not schemas or any(not schema.equals(schemas[0]) for schema in schemas[1:]):
        return None
    return ds.dataset([str(p) for p in parts], schema=schemas[0], format="parquet")


def row_counts(directory) -> tuple:
    """(rows, feasible rows) of the study table, from its feasible column alone (a summary
    that needs no more than these reads neither the other columns nor sorts)."""
    while True:
        try:
            columns = [_read_part(p, columns=["feasible"]).column("feasible") for p in part_files(directory)]
            break
        except FileNotFoundError:  # a compaction removed a part meanwhile: list again
            continue
    return sum(len(c) for c in columns), sum(pc.sum(c).as_py() or 0 for c in columns)


def sort_keys(table: pa.Table) -> list:
    """point_id, then fault_sample where the table has fault samples."""
    return [(name, "ascending") for name in ("point_id", "fault_sample") if name in table.column_names]


def read_metadata(directory) -> dict:
    """The rapid.* metadata of the newest part (study text, version, git commit, ...)."""
    parts = part_files(directory)
    if not parts:
        return {}
    return _part_metadata(parts[-1])


def _part_metadata(part: Path) -> dict:
    raw = _read_schema(part).metadata or {}
    return {k.decode().removeprefix("rapid."): v.decode() for k, v in raw.items() if k.startswith(b"rapid.")}


def _unreadable(part: Path, why: str) -> SpecError:
    return SpecError(str(part.parent), "part", part.name,
                     f"{why}; move it out of the folder (or run rapid sweep --fresh to start the table over)")


def _read_schema(part: Path) -> pa.Schema:
    try:
        schema = pq.read_schema(part)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(part, f"not a readable Parquet part ({str(err).strip().splitlines()[0]})") from None
    if "point_id" not in schema.names:
        raise _unreadable(part, "not a rapid results part (it has no point_id column)")
    return schema


def _read_part(part: Path, columns: list | None = None) -> pa.Table:
    _read_schema(part)
    try:
        return pq.ParquetFile(part).read(columns=columns)  # read_table's dataset machinery costs ~0.3 s to load
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as err:
        raise _unreadable(part, f"not a readable Parquet part ({str(err).strip().splitlines()[0]})") from None


def _make_folder(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".probe.{uuid.uuid4().hex}"
        probe.touch()
        probe.unlink()
    except (FileExistsError, NotADirectoryError):
        raise SpecError("", "output", str(directory), "a file is in the way: expected a folder for the results") from None
    except OSError as err:
        raise SpecError("", "output", str(directory), f"cannot write there ({err.strerror})") from None


def _lock_folder(directory: Path, wait: bool):
    """An open lock file holding an exclusive flock; its text names the holder. Waiting (`wait`)
    says once on stderr whom it waits for."""
    handle = open(directory / LOCK_NAME, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno not in (errno.EAGAIN, errno.EACCES):
            raise
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        if not wait:
            handle.close()
            raise SpecError("", "output", str(directory),
                            f"another rapid sweep is writing this folder ({holder}); wait for it to finish, "
                            f"run with --wait to queue behind it, or --output another folder") from None
        print(f"waiting for the rapid sweep writing {directory} ({holder}) to finish", file=sys.stderr, flush=True)
        fcntl.flock(handle, fcntl.LOCK_EX)
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
    handle.flush()
    return handle


def _writer_alive(temp_name: str) -> bool:
    """Whether the writer a temporary part's name records is still running on this host (a
    name from another host or without a writer counts as gone: the folder lock is ours)."""
    match = _TEMP_WRITER.search(temp_name)
    if match is None or match["host"] != _host_tag():
        return False
    try:
        os.kill(int(match["pid"]), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        pass
    return True


def _host_tag() -> str:
    return re.sub(r"[^A-Za-z0-9-]", "-", socket.gethostname())


def unified_schema(schemas: list) -> pa.Schema:
    """Union of columns in a fixed order: leading columns as first seen, then memory_* and
    breakdown_* sorted, then evaluation time."""
    merged = pa.unify_schemas([s.remove_metadata() for s in schemas], promote_options="permissive")
    names = merged.names
    grouped = [n for n in names if n.startswith(GROUP_PREFIXES) and n not in LEAD_COLUMNS]
    lead = [n for n in names if n not in grouped and n not in LAST_COLUMNS]
    groups = [n for prefix in GROUP_PREFIXES for n in sorted(x for x in grouped if x.startswith(prefix))]
    last = [n for n in LAST_COLUMNS if n in names]
    return pa.schema([merged.field(n) for n in lead + groups + last])


def conform(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table` with `schema`'s columns: a missing breakdown part is 0 s on timed rows and
    null on untimed ones, a missing memory kind is 0 GiB, anything else missing is null."""
    if table.schema.equals(schema):  # the common case: as it is
        return table
    timed = pc.is_valid(table.column("step_time_s")) if "step_time_s" in table.column_names else None
    arrays = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name).cast(field.type)
        elif field.name.startswith("memory_"):
            column = pa.array([0.0] * table.num_rows, field.type)
        elif field.name.startswith(("breakdown_", "detail_")) and timed is not None:
            column = pc.if_else(timed, pa.scalar(0.0, field.type), pa.scalar(None, field.type))
        else:
            column = pa.nulls(table.num_rows, field.type)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def _write_atomically(table: pa.Table, path: Path) -> None:
    temp = path.with_name(f".{path.name}.{_host_tag()}.{os.getpid()}.{uuid.uuid4().hex[:12]}{TEMP_SUFFIX}")
    pq.write_table(table, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
