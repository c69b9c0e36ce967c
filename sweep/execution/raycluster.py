"""Which Ray cluster a sweep runs on, decided before `ray.init` so that no path hangs or
crashes: an explicit `--address` (or RAY_ADDRESS) must answer within a few seconds; a
cluster already running on this machine (the one `ray start` recorded) is joined as it
is; otherwise an embedded single-node Ray starts on 127.0.0.1."""
import logging
import os
import signal
import socket
import threading

from core import SpecError

REACH_TIMEOUT_S = 5.0
QUIET = {"log_to_driver": False, "logging_level": logging.ERROR}
AUTH_HINT = ("a cluster started with RAY_AUTH_MODE=token also needs RAY_AUTH_MODE=token and its token "
             "(RAY_AUTH_TOKEN or RAY_AUTH_TOKEN_PATH) in this shell")


def preflight(address: str | None) -> None:
    """Check an explicit address before anything is written: SpecError when nobody answers."""
    explicit = address or os.environ.get("RAY_ADDRESS") or None
    if explicit and explicit != "auto":
        _require_reachable(explicit, "--address" if address else "RAY_ADDRESS")


def connect(ray, address: str | None, workers: int | None) -> str:
    """Initialise Ray; returns one line saying which cluster this is, for the user. Ray puts in
    a SIGTERM handler of its own (one that prints a native stack and exits 15, skipping the
    driver's cleanup); the one in place before, the CLI's (unwind as Ctrl-C does, keeping
    finished rows), is put back."""
    on_sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return _connect(ray, address, workers)
    finally:
        if on_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_sigterm)


def _connect(ray, address: str | None, workers: int | None) -> str:
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    explicit = address or os.environ.get("RAY_ADDRESS") or None
    if explicit and explicit != "auto":
        option = "--address" if address else "RAY_ADDRESS"
        _require_reachable(explicit, option)
        _init(ray, option, explicit)
        return f"running on the Ray cluster at {explicit}"
    running = running_local_cluster()
    if running:
        _init(ray, "--address", running)
        return (f"running on the Ray cluster already running on this machine at {running} "
                f"(its CPUs, not --workers; --local for a process pool instead)")
    if explicit == "auto":
        raise SpecError("command line", "--address", "auto", "no running Ray cluster found on this machine")
    ray.init(address="local", num_cpus=workers or os.cpu_count(), include_dashboard=False,
             _node_ip_address="127.0.0.1", **QUIET)
    return f"running on an embedded Ray ({workers or os.cpu_count()} CPUs)"


def running_local_cluster() -> str | None:
    """host:port of the cluster `ray start` last recorded here, when it still answers; a
    stale record (the cluster has stopped) counts as none."""
    from ray._private.utils import read_ray_address

    recorded = read_ray_address()
    return recorded if recorded and _reachable(recorded) else None


def _host_port(address: str) -> tuple[str, int] | None:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    return (host, int(port)) if host and port.isdigit() else None


def _reachable(address: str) -> bool:
    target = _host_port(address)
    if target is None:
        return False
    try:
        with socket.create_connection(target, timeout=REACH_TIMEOUT_S):
            return True
    except OSError:
        return False


def _require_reachable(address: str, option: str) -> None:
    if _host_port(address) is None:
        raise SpecError("command line", option, address, "expected host:port of a Ray cluster's head (or auto)")
    if not _reachable(address):
        raise SpecError("command line", option, address,
                        f"no Ray cluster answers there within {REACH_TIMEOUT_S:.0f} s (is `ray start --head` running?)")


def _init(ray, option: str, address: str) -> None:
    try:
        ray.init(address=address, **QUIET)
    except (ConnectionError, RuntimeError, ValueError, TimeoutError) as err:
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise SpecError("command line", option, address, f"could not join that Ray cluster ({first}); {AUTH_HINT}") from None
