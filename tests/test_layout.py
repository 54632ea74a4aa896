"""The package's shape, read from its source with ``ast``: stages in layers, imports only downward,
no import circles, packages that meet only through their fronts, small functions and files.

Every reference to an e1 module counts as an import: the ones inside functions (a lazy import is
still a dependency), ``importlib.import_module("e1.x")`` and any other string that names a module
(``"e1.serve.processor:ServedBudgetProcessor"``, a package's table of lazily loaded names).
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import e1

PACKAGE = Path(e1.__file__).parent

# Top to bottom: a unit may import its own modules and those of any lower layer, never one of
# its own layer or above. What each holds is in docs/architecture.md.
LAYERS = (
    (
        "cli",
    ),  # the command line: the app, shared options, help, completion (e1/cli/); a module per subcommand (e1/commands/)
    ("view",),  # e1 view: the web app over run directories (only the command line imports it)
    ("demo",),  # runs of runs: the paper in miniature
    (
        "integrations",
    ),  # e1's budgets inside other tools: transformers' generate, vLLM offline, TRL's GRPOTrainer, lm-eval's model
    ("grpo", "serve"),  # training; serving with budgets
    ("eval",),  # evaluation runs: one model, sweeps, ranks
    ("report",),  # metrics, Elo, plots, terminal
    ("engine", "rewards"),  # budgeted decoding; scoring
    ("sandbox",),  # confining model-written code
    ("data", "models"),  # datasets, prompts; tiny models built from a config
    ("store",),  # the run directory
    ("budget", "cpu"),  # base modules: budgets, CPU threads ...
    ("settings",),  # ... each setting's one declaration (flag, help, default, bounds) ...
    ("numeric",),  # ... the one check of every number a user gives ...
    ("names",),  # ... of every name, and the one gate of every registry ...
    ("errors",),  # ... and the errors every layer raises
)
# folders that belong to another unit: e1/commands/ is the command line's second folder (one module per
# subcommand, beside e1/cli/'s app, shared options, help and completion); nothing outside the command line imports it
FOLDERS = {"commands": "cli"}
BASE_MODULES = {
    "__init__.py",
    "__main__.py",
    "budget.py",
    "cpu.py",
    "settings.py",
    "numeric.py",
    "names.py",
    "errors.py",
}
MAX_FUNCTION_LINES, MAX_FILE_LINES = 60, 450


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in PACKAGE.rglob("*.py")}
# The packages under e1/ (their subpackages belong to them), each met only through its __init__.
PACKAGES = {
    name
    for name, path in MODULES.items()
    if path.name == "__init__.py" and name.count(".") == 1 and name.partition(".")[2] not in FOLDERS
}
MODULE_STRING = re.compile(r"e1(\.\w+)+(:\w+)?")  # "e1.x.y" or "e1.x.y:attr"


@dataclass(frozen=True)
class Ref:
    """One place where a module names an e1 module: ``from e1.engine import Mode`` is
    ``Ref(line, "from e1.engine import Mode", "e1.engine", ("Mode",))``."""

    line: int
    code: str
    module: str  # the module named: the longest prefix of the dotted name that is a module
    names: tuple[str, ...] = ()  # what ``from module import ...`` takes from it


def resolve(dotted: str, modules=MODULES) -> str:
    """The module a dotted name lies in (``e1.eval.run.EvalConfig`` -> ``e1.eval.run``)."""
    while dotted and dotted not in modules:
        dotted = dotted.rpartition(".")[0]
    return dotted


def references(source: str, name: str, is_package: bool = False, modules=MODULES) -> list[Ref]:
    """Every e1 module that the module ``name`` (of text ``source``) names, anywhere in its body."""
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    loggers = {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)  # a logger's name is not an import
        and getattr(node.func, "attr", getattr(node.func, "id", None)) == "getLogger"
        for arg in node.args
    }
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Ref(node.lineno, f"import {a.name}", resolve(a.name, modules)) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
            for alias in node.names:
                code = f"from {base} import {alias.name}"
                if f"{base}.{alias.name}" in modules:  # from e1.report import ui: the module e1.report.ui
                    found.append(Ref(node.lineno, code, f"{base}.{alias.name}"))
                else:
                    found.append(Ref(node.lineno, code, resolve(base, modules), (alias.name,)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in loggers:
            if MODULE_STRING.fullmatch(node.value):
                found.append(Ref(node.lineno, repr(node.value), resolve(node.value.partition(":")[0], modules)))
    return [ref for ref in found if ref.module.startswith("e1") and ref.module != name]


REFS = {name: references(path.read_text(), name, path.name == "__init__.py") for name, path in MODULES.items()}
GRAPH = {name: {ref.module for ref in REFS[name]} for name in MODULES}


def unit(name: str) -> str | None:
    """The top-level unit a module belongs to (``e1.eval.run`` -> ``eval``); None for e1 itself."""
    parts = name.split(".")
    return FOLDERS.get(parts[1], parts[1]) if len(parts) > 1 and parts[1] != "__main__" else None


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


def top_level_names(path: Path) -> set[str]:
    """The names a module binds at its top level (imports, definitions, assignments)."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).partition(".")[0] for alias in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
    return names


def fronts() -> dict[str, set[str]]:
    """Each package's ``__all__``: what other packages may import from it."""
    return {package: set(importlib.import_module(package).__all__) for package in PACKAGES}


def front_breaches(name: str, refs: list[Ref], exports: dict[str, set[str]]) -> list[str]:
    """``name``'s imports from another package that do not go through that package's ``__all__``."""
    breaches = []
    for ref in refs:
        package = ".".join(ref.module.split(".")[:2])
        if package not in exports or unit(name) == unit(package):
            continue
        where = f"{MODULES[name].relative_to(PACKAGE.parent) if name in MODULES else name}:{ref.line} `{ref.code}`"
        if ref.module != package:
            breaches.append(f"{where} reaches into {ref.module}: import it from {package} (its __all__)")
        elif missing := [n for n in ref.names if n not in exports[package]]:
            breaches.append(f"{where}: {', '.join(missing)} not in {package}.__all__ (add it there)")
    return breaches


def test_packages_meet_only_through_their_fronts():
    """From another package, ``from e1.engine import Mode``; never ``from e1.engine.base import Mode``,
    nor a name that e1.engine's ``__all__`` does not list. Inside a package, modules import each other."""
    exports = fronts()
    breaches = [breach for name in sorted(MODULES) for breach in front_breaches(name, REFS[name], exports)]
    assert breaches == [], "imports past a package's front:\n" + "\n".join(breaches)


def test_the_front_check_finds_breaches():
    """The check itself, on made-up imports (so a silent pass above means something)."""
    source = (
        "from e1.engine.base import Mode\n"
        "from e1.engine import Mode, Secret\n"
        "from e1.report import ui\n"
        "import e1.store.results\n"
        "from e1.data import build_prompt\n"
        "from e1.eval import shared\n"  # its own package: anything goes
        "def load():\n"
        "    importlib.import_module('e1.engine.hf.hf_engine')\n"
        "    logging.getLogger('e1.engine.hf.hf_engine')\n"  # a logger's name, not an import
    )
    exports = {
        "e1.engine": {"Mode"},
        "e1.report": set(),
        "e1.store": set(),
        "e1.data": {"build_prompt"},
        "e1.eval": set(),
    }
    breaches = front_breaches("e1.eval.run", references(source, "e1.eval.run"), exports)
    assert [breach.partition(" `")[2].partition("`")[0] for breach in breaches] == [
        "from e1.engine.base import Mode",
        "from e1.engine import Secret",
        "from e1.report import ui",
        "import e1.store.results",
        "'e1.engine.hf.hf_engine'",
    ]
    assert "Secret not in e1.engine.__all__" in breaches[1]


def test_every_package_names_its_front_and_each_name_is_there():
    """An ``__all__`` per package; each name bound in its ``__init__`` or in its ``_LAZY`` table (whose
    modules are read, not imported: they import torch or vLLM), and none hiding a submodule."""
    wrong = []
    for package in sorted(PACKAGES):
        module = importlib.import_module(package)
        bound = top_level_names(MODULES[package])
        lazy = getattr(module, "_LAZY", {})
        for name in getattr(module, "__all__", None) or wrong.append(f"{package}: no __all__") or ():
            if f"{package}.{name}" in MODULES:
                wrong.append(f"{package}.{name} names a module, and the package's name for it hides the module")
            elif name in lazy:
                where, _, attribute = lazy[name].partition(":")
                if (attribute or name) not in top_level_names(MODULES[where]):
                    wrong.append(f"{package}._LAZY[{name!r}]: {lazy[name]} does not define it")
            elif name not in bound:
                wrong.append(f"{package}.__all__ lists {name!r}, which its __init__ does not define")
    assert wrong == [], "\n".join(wrong)


def test_importing_every_front_imports_no_heavy_library():
    """A front imports its light modules only, so `e1 --help` and completion stay instant."""
    code = (
        f"import sys\nimport {', '.join(sorted(PACKAGES))}\n"
        "print(sorted(m for m in ('torch', 'transformers', 'vllm', 'deepspeed', 'pandas', 'datasets', 'math_verify',"
        " 'starlette', 'uvicorn', 'plotly', 'matplotlib') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "[]\n"


def same_named(modules: dict[str, Path]) -> list[str]:
    """Modules of one unit that share a file name (``engine/options.py`` and ``engine/modes/options.py``):
    a reader who is told "options.py" should not have to ask which."""
    seen: dict[tuple[str | None, str], list[str]] = {}
    for name, path in sorted(modules.items()):
        if path.name != "__init__.py" and unit(name):
            seen.setdefault((unit(name), path.name), []).append(str(path.relative_to(PACKAGE.parent)))
    return [" and ".join(paths) for paths in seen.values() if len(paths) > 1]


def test_no_two_modules_of_a_unit_share_a_file_name():
    assert same_named(MODULES) == [], "rename one of each pair:\n" + "\n".join(same_named(MODULES))


def private_reaches(name: str, refs: list[Ref], modules=MODULES) -> list[str]:
    """``name``'s uses of a private name (``_x``) of a module outside its own folder (package or
    sub-package): what a sibling folder needs is public, in the folder that both may import."""
    folder = name if modules.get(name, Path()).name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for ref in refs:
        names = ref.names or ((ref.code.strip("'\"").partition(":")[2],) if ":" in ref.code else ())
        owner = ref.module if modules.get(ref.module, Path()).name == "__init__.py" else ref.module.rpartition(".")[0]
        for private in (n for n in names if n.startswith("_") and not n.startswith("__")):
            if owner != folder:
                found.append(f"{name}:{ref.line} `{ref.code}` takes {ref.module}'s private {private}")
    return found


def test_no_module_takes_a_private_name_from_another_folder():
    """The API and vLLM backends once took hf's private EOS reader: now a public name of the engine's core."""
    reaches = [reach for name in sorted(MODULES) for reach in private_reaches(name, REFS[name])]
    assert reaches == [], "\n".join(reaches)


def test_the_name_and_privacy_checks_find_what_they_look_for():
    """The two checks above, on made-up modules (so a silent pass means something)."""
    root = PACKAGE.parent
    made_up = {
        name: root / (name.replace(".", "/") + ".py")
        for name in (
            "e1.engine.knobs",
            "e1.engine.modes.knobs",
            "e1.engine.hf.hf_engine",
            "e1.engine.hf.kv_cache",
            "e1.engine.vllm.vllm_engine",
            "e1.eval.knobs",
        )
    }
    assert same_named(made_up) == ["e1/engine/knobs.py and e1/engine/modes/knobs.py"]
    source = (
        "from e1.engine.hf.hf_engine import _eos_ids, load_tokenizer\n"
        "LAZY = {'eos': 'e1.engine.hf.hf_engine:_eos_ids'}\n"
    )
    assert [
        reach.partition(" takes ")[2]
        for reach in private_reaches(
            "e1.engine.vllm.vllm_engine", references(source, "e1.engine.vllm.vllm_engine", modules=made_up), made_up
        )
    ] == ["e1.engine.hf.hf_engine's private _eos_ids"] * 2
    inside = "from e1.engine.hf.kv_cache import _bucket\n"  # its own folder: allowed
    assert (
        private_reaches(
            "e1.engine.hf.hf_engine", references(inside, "e1.engine.hf.hf_engine", modules=made_up), made_up
        )
        == []
    )


def test_functions_and_files_stay_small():
    long = []
    for path in MODULES.values():
        source = path.read_text()
        if (lines := len(source.splitlines())) > MAX_FILE_LINES:
            long.append(f"{path.relative_to(PACKAGE.parent)}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                start = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                if (lines := node.end_lineno - start + 1) > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines")
    assert long == []
