"""The package's shape, read from its source with ``ast``: stages in layers, imports only downward,
no import circles, small functions and files.

Every import counts, the ones inside functions too: a lazy import is still a dependency.
"""

from __future__ import annotations

import ast
from pathlib import Path

import e1

PACKAGE = Path(e1.__file__).parent

# Top to bottom: a unit may import its own modules and those of any lower layer, never one of
# its own layer or above. What each holds is in the README's "Architecture" section.
LAYERS = (
    ("cli",),  # the command line: one thin module per subcommand
    ("view",),  # e1 view: the web app over run directories (only the command line imports it)
    ("demo",),  # runs of runs: the paper in miniature
    ("grpo", "serve"),  # training; serving with budgets
    ("eval",),  # evaluation runs: one model, sweeps, ranks
    ("report",),  # metrics, Elo, plots, terminal
    ("engine", "rewards"),  # budgeted decoding; scoring
    ("sandbox",),  # confining model-written code
    ("data", "models"),  # datasets, prompts; tiny models built from a config
    ("store",),  # the run directory
    ("budget",),  # base modules: budgets ...
    ("numeric",),  # ... the one check of every number a user gives ...
    ("errors",),  # ... and the errors every layer raises
)
BASE_MODULES = {"__init__.py", "__main__.py", "budget.py", "numeric.py", "errors.py"}
MAX_FUNCTION_LINES, MAX_FILE_LINES = 60, 450


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imports_of(name: str) -> set[str]:
    """The e1 modules ``name`` imports anywhere in its body (``from pkg import sub`` names pkg.sub)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:  # e1.eval.run.EvalConfig -> e1.eval.run
                target = target.rpartition(".")[0]
            if target.startswith("e1") and target != name:
                found.add(target)
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def unit(name: str) -> str | None:
    """The top-level unit a module belongs to (``e1.eval.run`` -> ``eval``); None for e1 itself."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[1] != "__main__" else None


LEVEL = {member: level for level, members in enumerate(LAYERS) for member in members}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(root):
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
                if len(component) > 1:
                    found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_every_unit_has_a_layer_and_the_top_holds_packages_and_base_modules():
    units = {unit(name) for name in MODULES} - {None}
    assert units == set(LEVEL), f"give each package a layer: {sorted(units ^ set(LEVEL))}"
    loose = {path.name for path in PACKAGE.glob("*.py")}
    assert loose <= BASE_MODULES, f"modules at the top of e1/ that belong in a package: {sorted(loose - BASE_MODULES)}"


def test_imports_only_run_downward():
    upward = [
        f"{name} -> {target}"
        for name, targets in GRAPH.items()
        for target in targets
        if unit(name) and unit(target) and unit(name) != unit(target) and LEVEL[unit(target)] <= LEVEL[unit(name)]
    ]
    assert upward == [], "imports of a unit of the same or a higher layer:\n" + "\n".join(sorted(upward))


def test_rewards_import_nothing_from_the_engine():
    assert not [name for name in MODULES if unit(name) == "rewards" and any(unit(t) == "engine" for t in GRAPH[name])]


def test_no_import_circles():
    assert cycles(GRAPH) == []


def test_the_circle_check_finds_circles():
    """The check itself, on made-up graphs (so a silent pass above means something)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_functions_and_files_stay_small():
    long = []
    for name, path in MODULES.items():
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_FILE_LINES:
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                if (lines := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert long == []
