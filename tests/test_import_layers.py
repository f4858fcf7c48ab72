"""core/ is layered: its folders stand on floors and import only down them, and no two modules import each other,
directly or around a circle. Lazy imports inside a function count (a lazy import hides a circle from Python, not
from the reader)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# core/'s floors, the ground first (docs/architecture.md draws them): a folder of core/, or a module straight under
# it, imports only from the floors below its own, never from one beside it or above, so no two folders can reach
# each other. A name listed but absent is a floor still to be filled: leaderboard/, when its files leave tracking/.
FLOORS = (
    ("algos", "batch", "config", "file_lock", "module_import"),
    ("reward",),
    ("data", "tracking"),
    ("models",),
    ("engine",),
    ("rollout",),
    ("eval",),
    ("trainer", "leaderboard", "doctor"),
    ("cli",),
)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str], root: Path = REPO) -> set[str]:
    """Every core module `path` imports anywhere in its body (top level, functions, classes)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from .x import y
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # `from core.engine import fsdp` imports a module; `from core.engine.fsdp import X` a name.
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        found |= {name for name in names if name in modules}
    return found


def import_graph(root: Path = REPO) -> dict[str, set[str]]:
    paths = sorted((root / "core").rglob("*.py"))
    modules = {module_name(path, root) for path in paths}
    return {module_name(path, root): imported_modules(path, modules, root) - {module_name(path, root)} for path in paths}


def floor_part(module: str) -> str | None:
    """The folder or module straight under core/ that `module` is part of (`core.rollout.hf` -> `rollout`); None for
    core/__init__.py, which holds nothing."""
    return module.split(".")[1] if "." in module else None


def floor_violations(graph: dict[str, set[str]], floors: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every import that does not go down `floors` (sideways counts), and every part of core/ on no floor."""
    floor_of = {part: level for level, parts in enumerate(floors) for part in parts}
    parts = {floor_part(module) for module in graph} - {None}
    violations = [f"core/{part} stands on no floor: add it to FLOORS" for part in sorted(parts - set(floor_of))]
    for importer, imported in sorted((module, target) for module, targets in graph.items() for target in targets):
        low, high = floor_part(importer), floor_part(imported)
        if low in floor_of and high in floor_of and low != high and floor_of[high] >= floor_of[low]:
            violations.append(f"{importer} -> {imported}")
    return violations


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (no recursion limit on a deep import chain)."""
    index, low, on_stack, stack, components, counter = {}, {}, set(), [], [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = counter[0]
                counter[0] += 1
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_the_cycle_finder_finds_a_circle_of_three():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert sorted(c for c in strongly_connected_components(graph) if len(c) > 1) == [["a", "b", "c"]]


def test_lazy_and_relative_imports_count(tmp_path):
    package = tmp_path / "core" / "pkg"
    package.mkdir(parents=True)
    (package / "low.py").write_text("def f():\n    from core.pkg import high\n")
    (package / "high.py").write_text("from .low import f\n")
    modules = {"core.pkg.low", "core.pkg.high"}
    assert imported_modules(package / "low.py", modules, tmp_path) == {"core.pkg.high"}
    assert imported_modules(package / "high.py", modules, tmp_path) == {"core.pkg.low"}


def test_an_import_up_or_sideways_breaks_the_floors_even_inside_a_function(tmp_path):
    core = tmp_path / "core"
    for folder in ("low", "high", "stray"):
        (core / folder).mkdir(parents=True)
    (core / "low" / "task.py").write_text("def make():\n    from core.high import run\n")  # up, lazily
    (core / "high" / "run.py").write_text("from core.low.task import make\n")  # down: fine
    (core / "beside.py").write_text("from core.low import task\n")  # sideways, from a module straight under core/
    (core / "stray" / "thing.py").write_text("")
    floors = (("low", "beside"), ("high",), ("absent",))  # a floor still to be filled is no violation
    assert floor_violations(import_graph(tmp_path), floors) == [
        "core/stray stands on no floor: add it to FLOORS", "core.beside -> core.low.task",
        "core.low.task -> core.high.run"]


def test_core_imports_only_down_its_floors():
    violations = floor_violations(import_graph(), FLOORS)
    assert not violations, "imports against core's floors (FLOORS, drawn in docs/architecture.md): " + "; ".join(
        violations)


def test_core_modules_import_one_way():
    graph = import_graph()
    assert "core.engine.fsdp" in graph and "core.engine.tp" in graph["core.engine.fsdp"]  # the parser sees imports
    cycles = [component for component in strongly_connected_components(graph) if len(component) > 1]
    assert not cycles, "import cycles among core modules (make them one-way layers): " + "; ".join(
        " <-> ".join(component) for component in cycles)
