"""The import graph points one way: sweep -> core -> astra_backend, no module circle, and no
subpackage imports a sibling that imports it back. Imports inside functions count too: a
lazy import is still a dependency."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("astra_backend", "core", "sweep")


def module_names() -> dict:
    """Dotted module name -> source path, for every module of our packages (compiled ones too)."""
    names = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    names["astra_backend._netsim"] = names["core.serving._loop"] = None
    return names


def imports_of(name: str, path: Path, known: dict) -> set:
    """The modules of ours that `name` imports; `from package import module` counts as the module."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom):
            base = name.split(".") if is_package else name.split(".")[:-1]
            anchor = base[:len(base) - node.level + 1] if node.level else []
            parent = ".".join(anchor + ([node.module] if node.module else []))
            submodules = {f"{parent}.{alias.name}" for alias in node.names} & set(known)
            found |= submodules
            if parent in known and len(submodules) < len(node.names):
                found.add(parent)
    return found - {name}


def import_graph() -> dict:
    known = module_names()
    return {name: imports_of(name, path, known) for name, path in known.items() if path is not None}


def circles(graph: dict) -> list:
    """Strongly connected groups of more than one node (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = set()
            while not group or node not in group:
                group.add(stack.pop())
            on_stack.difference_update(group)
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def subpackage(name: str) -> str:
    """`sweep.faults.draws` -> `sweep.faults`; a module beside the subpackages (`core.errors`,
    a package's `__init__`) stands for itself."""
    return ".".join(name.split(".")[:2])


def test_no_module_imports_itself_round_a_circle():
    assert circles(import_graph()) == []


def test_no_subpackage_imports_a_sibling_that_imports_it_back():
    graph = import_graph()
    packages = {}
    for name, targets in graph.items():
        for target in targets:
            if subpackage(name) != subpackage(target):
                packages.setdefault(subpackage(name), set()).add(subpackage(target))
    assert circles(packages) == []


def test_dependencies_point_from_sweep_to_core_to_the_simulator():
    graph = import_graph()
    upward = [(name, target) for name, targets in graph.items() for target in targets
              if PACKAGES.index(name.split(".")[0]) < PACKAGES.index(target.split(".")[0])]
    assert upward == []


def test_the_checks_see_a_circle_when_there_is_one():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert subpackage("sweep.faults.draws") == "sweep.faults" and subpackage("core") == "core"
