"""One Parquet dataset per study: `part-NNNNNN.parquet` files in the output folder.

Each part is written under a hidden temporary name and renamed into place, so a killed
run leaves only whole parts; the point_ids in those parts are what a re-run skips.
Parts share one schema (rows sorted by point_id), so pandas, polars and DuckDB open the
folder directly; the study file, tool version and git commit ride in the schema metadata.

A faults study (sweep.faults) has one row per (point, sample): rows are keyed, for resume
and sorting, by (point_id, fault_sample), and a re-run skips exactly the keys present."""
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

PART_PREFIX = "part-"
TEMP_SUFFIX = ".tmp"
GROUP_PREFIXES = ("memory_", "breakdown_")
LEAD_COLUMNS = ("memory_peak_gib",)  # a metric, though it shares the memory_ prefix
LAST_COLUMNS = ("eval_time_s",)


class ResultStore:
    """Appends parts to a study's folder and knows which points it already holds."""

    def __init__(self, directory: Path, metadata: dict, fresh: bool = False):
        self.directory = Path(directory)
        self.metadata = {f"rapid.{k}".encode(): str(v).encode() for k, v in metadata.items()}
        self.directory.mkdir(parents=True, exist_ok=True)
        for stray in self.directory.glob(f".{PART_PREFIX}*{TEMP_SUFFIX}"):
            stray.unlink()
        if fresh:
            for part in self.parts():
                part.unlink()

    def parts(self) -> list:
        return part_files(self.directory)

    def done_ids(self) -> set:
        """point_ids of every finished part."""
        done = set()
        for part in self.parts():
            done.update(pq.read_table(part, columns=["point_id"]).column("point_id").to_pylist())
        return done

    def done_keys(self, columns: tuple) -> set:
        """Tuples of `columns` (e.g. point_id, fault_sample) of every row of every finished part."""
        done = set()
        for part in self.parts():
            table = pq.read_table(part, columns=list(columns))
            done.update(zip(*(table.column(c).to_pylist() for c in columns)))
        return done

    def write_part(self, tables: list) -> int:
        """Concatenate batch tables into one part, sorted by `sort_keys`, written atomically."""
        table = pa.concat_tables(tables, promote_options="default")
        schema = unified_schema([table.schema] + [pq.read_schema(p) for p in self.parts()[-1:]])
        table = conform(table, schema)
        table = table.sort_by(sort_keys(table))
        parts = self.parts()
        index = int(parts[-1].stem.removeprefix(PART_PREFIX)) + 1 if parts else 0
        _write_atomically(table.replace_schema_metadata(self.metadata), self.directory / f"{PART_PREFIX}{index:06d}.parquet")
        return table.num_rows

    def harmonise(self) -> None:
        """Rewrite any part whose columns differ from the union, so every reader sees one schema."""
        parts = self.parts()
        schemas = [pq.read_schema(p) for p in parts]
        target = unified_schema(schemas)
        for part, schema in zip(parts, schemas):
            if not schema.remove_metadata().equals(target):
                table = pq.read_table(part)
                _write_atomically(conform(table, target).replace_schema_metadata(schema.metadata), part)


def part_files(directory) -> list:
    return sorted(Path(directory).glob(f"{PART_PREFIX}*.parquet"))


def read_results(directory) -> pa.Table:
    """The whole study table, one schema, rows sorted by point_id."""
    parts = part_files(directory)
    if not parts:
        return pa.table({})
    tables = [pq.read_table(p) for p in parts]
    schema = unified_schema([t.schema for t in tables])
    table = pa.concat_tables([conform(t, schema) for t in tables])
    table = table.sort_by(sort_keys(table))
    return table.replace_schema_metadata(tables[-1].schema.metadata)


def sort_keys(table: pa.Table) -> list:
    """point_id, then fault_sample where the table has fault samples."""
    return [(name, "ascending") for name in ("point_id", "fault_sample") if name in table.column_names]


def read_metadata(directory) -> dict:
    """The rapid.* metadata of the newest part (study text, version, git commit, ...)."""
    parts = part_files(directory)
    if not parts:
        return {}
    raw = pq.read_schema(parts[-1]).metadata or {}
    return {k.decode().removeprefix("rapid."): v.decode() for k, v in raw.items() if k.startswith(b"rapid.")}


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
    timed = pc.is_valid(table.column("step_time_s")) if "step_time_s" in table.column_names else None
    arrays = []
    for field in schema:
        if field.name in table.column_names:
            column = table.column(field.name).cast(field.type)
        elif field.name.startswith("memory_"):
            column = pa.array([0.0] * table.num_rows, field.type)
        elif field.name.startswith("breakdown_") and timed is not None:
            column = pc.if_else(timed, pa.scalar(0.0, field.type), pa.scalar(None, field.type))
        else:
            column = pa.nulls(table.num_rows, field.type)
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def _write_atomically(table: pa.Table, path: Path) -> None:
    temp = path.with_name(f".{path.name}{TEMP_SUFFIX}")
    pq.write_table(table, temp)
    with open(temp, "rb") as handle:
        os.fsync(handle.fileno())
    os.replace(temp, path)
