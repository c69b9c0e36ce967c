"""The study's `search:` block: which Optuna sampler, how many trials, what to optimise under
which constraints, where the Optuna study lives, and an optional fidelity refinement.

Validated with the rest of the study file, so a bad block is one line and nothing is written."""
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path

from core import BACKENDS, SpecError

from sweep.metrics import AGGREGATES
from sweep.metrics import HIGHER_IS_BETTER
from sweep.metrics import COST, ENERGY, METRICS, SERVE_METRICS
from .fields import refuse_unknown

JOURNAL_SCHEME = "journal:///"  # our URL for Optuna's journal file format (sweep.search.storage)
JOURNAL_SUFFIXES = (".journal", ".log")
SEARCH_KEYS = ("sampler", "trials", "parallel", "objectives", "constraints", "storage", "seed", "refine")
REFINE_KEYS = ("backend", "top")
# sampler -> Python packages it needs beyond Optuna itself
SAMPLERS = {"tpe": (), "nsga2": (), "random": (), "qmc": ("scipy",), "cmaes": ("cmaes",), "gp": ("scipy", "torch")}
SINGLE_OBJECTIVE_SAMPLERS = ("cmaes",)
DIRECTIONS = ("minimize", "maximize")
# aggregates over a point's Monte Carlo fault samples: only for a study with a `faults:` block
CONSTRAINT_PATTERN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=)\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class RefineSpec:
    """Re-evaluate the `top` best rows with a higher-fidelity `backend`."""
    backend: str
    top: int


@dataclass(frozen=True)
class SearchSpec:
    sampler: str
    trials: int  # total trials in the Optuna study; a re-run continues up to this
    parallel: int  # trials asked per round, evaluated together
    objectives: tuple  # ((column, "minimize" | "maximize"), ...)
    constraints: tuple  # ((column, "<=" | ">=", bound), ...); feasibility is always one more
    storage: str  # Optuna storage URL
    seed: int
    refine: RefineSpec | None

    @property
    def directions(self) -> list:
        return [direction for _, direction in self.objectives]

    @property
    def objective_columns(self) -> list:
        return [column for column, _ in self.objectives]


# what a serving point's row leaves empty: it times requests, not steps, and holds no memory breakdown
SERVE_EMPTY = ("step_time_s", "mfu", "memory_peak_gib")


def objective_column(name: str, source: str, field: str, has_faults: bool = False, mode: str = "") -> str:
    """The results column an objective or constraint names (a fault aggregate is computed per
    point from its sample rows, sweep.search.fault_rows), one the study's `mode` fills ("": any).
    The one place objective names are resolved."""
    if name in AGGREGATES:
        if not has_faults:
            raise SpecError(source, field, name, "a fault aggregate needs a faults: block in the study")
        return name
    if name not in METRICS + SERVE_METRICS:
        raise SpecError(source, field, name,
                        f"expected a metric column ({', '.join(METRICS + SERVE_METRICS + AGGREGATES)})")
    if mode == "serve" and name in SERVE_EMPTY:
        serving = ", ".join(c for c in METRICS + SERVE_METRICS if c not in SERVE_EMPTY + ENERGY + COST)
        raise SpecError(source, field, name, f"a serve study's rows leave it empty (the serving simulator times "
                        f"requests, not steps); expected one of {serving}")
    if mode and mode != "serve" and name in SERVE_METRICS:
        raise SpecError(source, field, name, f"only a serve study's rows have it; this study's mode is {mode}")
    return name


def parse_search(data, source: str, output: Path, default_seed: int, has_faults: bool = False,
                 mode: str = "") -> SearchSpec:
    """Validate the `search:` mapping (`has_faults`: the study has a `faults:` block, so fault
    aggregates may be objectives; `mode`: the workload's, whose rows the objectives and
    constraints must name columns of); the storage defaults to a journal file beside the table."""
    if not isinstance(data, dict):
        raise SpecError(source, "search", data, "expected a mapping (sampler, trials, parallel, objectives, ...)")
    refuse_unknown(data, SEARCH_KEYS, source, "search.")
    sampler = data.get("sampler", "tpe")
    if sampler not in SAMPLERS:
        raise SpecError(source, "search.sampler", sampler, f"expected one of {', '.join(SAMPLERS)}")
    missing = [package for package in SAMPLERS[sampler] if importlib.util.find_spec(package) is None]
    if missing:
        raise SpecError(source, "search.sampler", sampler, f"needs the Python package {', '.join(missing)}, which is not installed")
    trials = _positive_int(data, "trials", None, source)
    parallel = _positive_int(data, "parallel", 1, source)
    seed = data.get("seed", default_seed)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SpecError(source, "search.seed", seed, "expected a non-negative integer")
    objectives = _objectives(data.get("objectives", ["minimize step_time_s"]), source, has_faults, mode)
    if sampler in SINGLE_OBJECTIVE_SAMPLERS and len(objectives) > 1:
        raise SpecError(source, "search.sampler", sampler, "optimises one objective; use nsga2, tpe or random for several")
    constraints = _constraints(data.get("constraints", []), source, has_faults, mode)
    storage = data.get("storage", str(default_storage(output)))
    if not isinstance(storage, str) or not storage.strip():
        raise SpecError(source, "search.storage", storage,
                        "expected an Optuna storage URL or a file path (.journal or .log: a journal file; else SQLite)")
    url = storage_url(storage)
    if not url.startswith(JOURNAL_SCHEME):
        _check_storage_url(url, source)
    refine = _refine(data["refine"], source) if data.get("refine") is not None else None
    if refine is not None and has_faults:
        raise SpecError(source, "search.refine", data["refine"], "not with a faults: block (fault samples are "
                        "already replayed on the study's simulator backend)")
    return SearchSpec(sampler, trials, parallel, objectives, constraints, url, seed, refine)


def default_storage(output: Path) -> Path:
    """A journal file beside the table, named with a leading _ so that pandas and pyarrow, which
    skip such files, still read the folder as one Parquet dataset; a search begun in SQLite
    (_optuna.db, or the earlier optuna.db) keeps its database."""
    return next((old for old in (output / "_optuna.db", output / "optuna.db") if old.exists()),
                output / "_optuna.journal")


def storage_url(storage: str) -> str:
    """A storage as written (a URL, or a file path) as a URL: a path ending in .journal or .log
    is a journal file (`journal:///PATH`, Optuna's JournalStorage format), any other is SQLite."""
    if "://" in storage:
        return storage
    path = Path(storage).resolve()
    return f"{JOURNAL_SCHEME}{path}" if path.suffix in JOURNAL_SUFFIXES else f"sqlite:///{path}"


def _check_storage_url(url: str, source: str) -> None:
    """A URL SQLAlchemy can parse and has a driver for, checked before anything is written."""
    import sqlalchemy

    try:
        dialect = sqlalchemy.engine.make_url(url).get_dialect()
        dialect.import_dbapi()  # the database's driver (psycopg2, pymysql, ...), which Optuna would need
    except ImportError as err:
        raise SpecError(source, "search.storage", url, f"this database's Python driver is not installed ({err}): "
                        "install it into the project's environment, or give a .journal or SQLite file") from None
    except sqlalchemy.exc.ArgumentError as err:
        raise SpecError(source, "search.storage", url, f"expected an Optuna storage URL SQLAlchemy can open "
                        f"(sqlite:///FILE, postgresql://..., mysql://...) or a file path ({err})") from None


def _positive_int(data: dict, key: str, default, source: str) -> int:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(source, f"search.{key}", value if key in data else "<missing>", "expected a positive integer")
    return value


def _objectives(raw, source: str, has_faults: bool, mode: str = "") -> tuple:
    items = raw if isinstance(raw, list) else [raw]
    if not items:
        raise SpecError(source, "search.objectives", raw, "expected at least one objective such as 'minimize step_time_s'")
    objectives = []
    for item in items:
        words = item.split() if isinstance(item, str) else []
        if len(words) == 1:
            words = ["maximize" if words[0] in HIGHER_IS_BETTER else "minimize"] + words
        if len(words) != 2 or words[0] not in DIRECTIONS:
            raise SpecError(source, "search.objectives", item, "expected 'minimize COLUMN' or 'maximize COLUMN'")
        column = objective_column(words[1], source, "search.objectives", has_faults, mode)
        if column in [c for c, _ in objectives]:
            raise SpecError(source, "search.objectives", item, f"{column} is already an objective")
        objectives.append((column, words[0]))
    return tuple(objectives)


def _constraints(raw, source: str, has_faults: bool, mode: str = "") -> tuple:
    items = raw if isinstance(raw, list) else [raw]
    constraints = []
    for item in items:
        match = CONSTRAINT_PATTERN.match(item) if isinstance(item, str) else None
        if not match:
            raise SpecError(source, "search.constraints", item, "expected 'COLUMN <= NUMBER' or 'COLUMN >= NUMBER'")
        column = objective_column(match.group(1), source, "search.constraints", has_faults, mode)
        constraints.append((column, match.group(2), float(match.group(3))))
    return tuple(constraints)


def _refine(raw, source: str) -> RefineSpec:
    if not isinstance(raw, dict):
        raise SpecError(source, "search.refine", raw, "expected a mapping {backend, top}")
    refuse_unknown(raw, REFINE_KEYS, source, "search.refine.")
    backend = raw.get("backend")
    simulators = [b for b in BACKENDS if b != "analytical"]
    if backend not in simulators:
        raise SpecError(source, "search.refine.backend", backend if "backend" in raw else "<missing>",
                        f"expected one of {', '.join(simulators)}")
    top = raw.get("top", 20)
    if isinstance(top, bool) or not isinstance(top, int) or top < 2:
        raise SpecError(source, "search.refine.top", top, "expected an integer of at least 2 (a ranking to compare)")
    return RefineSpec(backend, top)
