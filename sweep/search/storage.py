"""Where a search keeps its Optuna study, opened for the driver or for a reader.

The default is a journal file in Optuna's own JournalStorage format (`journal:///PATH`): the
driver, the only process writing it (its output folder is locked), reads it once and then
answers Optuna's reads from memory, which keeps a trial's cost flat as the study grows. Any
SQLAlchemy URL (SQLite, PostgreSQL, ...) is an RDB storage, as Optuna opens it."""
import json
import os
from pathlib import Path

import optuna
from optuna.storages import JournalStorage
from optuna.storages.journal import BaseJournalBackend, JournalFileBackend

from core import SpecError
from sweep.study.search_block import JOURNAL_SCHEME


def journal_path(url: str) -> Path | None:
    """The file of a journal storage URL; None for any other URL."""
    return Path(url.removeprefix(JOURNAL_SCHEME)) if url.startswith(JOURNAL_SCHEME) else None


class DriverJournal(BaseJournalBackend):
    """Optuna's journal file, read once, then appended to and served from memory. Each append
    is flushed, not fsync'd: a killed driver loses nothing the OS holds; a power cut may lose
    the last trials, which a re-run asks again (as SQLite's synchronous=NORMAL would)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._logs = list(JournalFileBackend(str(path)).read_logs(0))
        self._file = open(path, "ab")
        self.path = path

    def read_logs(self, log_number_from: int) -> list:
        return self._logs[log_number_from:]

    def append_logs(self, logs: list) -> None:
        self._file.write("".join(json.dumps(log, separators=(",", ":")) + "\n" for log in logs).encode())
        self._file.flush()
        self._logs.extend(logs)

    def current(self) -> bool:
        """Whether the file is still the one this journal holds (not removed or rewritten)."""
        try:
            on_disk = os.stat(self.path)
        except OSError:
            return False
        return on_disk.st_ino == os.fstat(self._file.fileno()).st_ino and on_disk.st_size == self._file.tell()


_JOURNALS = {}  # path -> the process's one DriverJournal of that file


def open_storage(url: str):
    """The storage the driver writes: a journal file's one writer in this process, or an RDB
    storage. SQLite runs in write-ahead-log mode without an fsync per commit, for the reason
    DriverJournal gives."""
    path = journal_path(url)
    if path is not None:
        journal = _JOURNALS.get(path)
        if journal is None or not journal.current():
            journal = _JOURNALS[path] = DriverJournal(path)
        return JournalStorage(journal)
    import sqlalchemy

    sqlite = url.startswith("sqlite")
    database = url.removeprefix("sqlite:///")
    if sqlite and database and database != ":memory:":
        Path(database).parent.mkdir(parents=True, exist_ok=True)
    try:
        storage = optuna.storages.RDBStorage(url)
    except sqlalchemy.exc.SQLAlchemyError as err:
        reason = str(getattr(err, "orig", err)).strip().splitlines()[0]
        raise SpecError("study", "search.storage", url, f"cannot open this Optuna storage ({reason})") from None
    if not sqlite:
        return storage
    sqlalchemy.event.listen(storage.engine, "connect", _sqlite_pragmas)
    storage.engine.dispose()  # reconnect, so every connection gets the pragmas
    return storage


def reader_storage(url: str):
    """The storage for reading a finished search (the report), as Optuna itself opens it."""
    path = journal_path(url)
    if path is None:
        return url
    if not path.is_file():
        raise FileNotFoundError(f"no journal file at {path}")
    return JournalStorage(JournalFileBackend(str(path)))


def load_hint(url: str) -> str:
    """How a user opens the study in Python."""
    path = journal_path(url)
    if path is None:
        return "optuna.load_study(study_name=..., storage=URL)"
    return (f"optuna.load_study(study_name=..., storage=optuna.storages.JournalStorage("
            f"optuna.storages.journal.JournalFileBackend('{path}')))")


def _sqlite_pragmas(connection, _record) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()
