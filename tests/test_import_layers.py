"""core/ is layered: no two modules import each other, directly or around a circle, even lazily
inside a function (a lazy import hides a circle from Python, not from the reader)."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


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


def import_graph() -> dict[str, set[str]]:
    paths = sorted((REPO / "core").rglob("*.py"))
    modules = {module_name(path) for path in paths}
    return {module_name(path): imported_modules(path, modules) - {module_name(path)} for path in paths}


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


def test_core_modules_import_one_way():
    graph = import_graph()
    assert "core.engine.fsdp" in graph and "core.engine.tp" in graph["core.engine.fsdp"]  # the parser sees imports
    cycles = [component for component in strongly_connected_components(graph) if len(component) > 1]
    assert not cycles, "import cycles among core modules (make them one-way layers): " + "; ".join(
        " <-> ".join(component) for component in cycles)
