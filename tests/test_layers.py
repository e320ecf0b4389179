"""The package's layers (docs/architecture.md): each folder of pipelink/ is a layer, and a module imports
only from its own layer and the layers below it. Every import counts, functions' imports too; imports
under `if TYPE_CHECKING:` name types only and are left out."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "pipelink"

# layer -> the layers its modules may import (besides its own). A module at the top of the package is in
# the layer "api" (pipelink, api, report) or "cli" (cli).
ALLOWED = {
    "core": set(),
    "toolchain": {"core"},
    "formats": {"core", "toolchain"},
    "runtime": {"core"},
    "authoring": {"core", "toolchain", "formats"},
    "linker": {"core", "toolchain", "formats", "runtime", "authoring"},
    "api": {"core", "toolchain", "formats", "runtime", "authoring", "linker"},
    "harness": {"core", "toolchain", "formats", "runtime", "authoring", "linker", "api"},
    "cli": {"core", "toolchain", "formats", "runtime", "authoring", "linker", "api", "harness"},
}
TOP = {"": "api", "api": "api", "report": "api", "cli": "cli", "__main__": "cli"}


def module_file(module: str) -> Path | None:
    base = PACKAGE.joinpath(*module.split(".")) if module else PACKAGE
    for f in (base.with_suffix(".py"), base / "__init__.py"):
        if f.is_file() and (module or f.name == "__init__.py"):
            return f
    return None


def modules() -> list[str]:
    """Every Python module of the package, named relative to pipelink ("" is pipelink itself)."""
    out = []
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(PACKAGE).with_suffix("").parts
        if parts[0] in ("include", "schema"):  # data: the C headers and the JSON schemas
            continue
        out.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return out


def layer(module: str) -> str:
    return TOP[module] if module in TOP else module.split(".")[0]


def _type_checking_blocks(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return ids


def imports(module: str) -> set[str]:
    """The package's modules that `module` imports."""
    path = module_file(module)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    tree = ast.parse(path.read_text())
    skip = _type_checking_blocks(tree)
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
            elif node.module and (node.module == "pipelink" or node.module.startswith("pipelink.")):
                base, node = [], ast.ImportFrom(module=node.module.partition(".")[2] or None, names=node.names, level=1)
            else:
                continue
            target = [*base, *node.module.split(".")] if node.module else base
            found.add(".".join(target))
            found.update(".".join([*target, a.name]) for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name.partition(".")[2] for a in node.names if a.name.startswith("pipelink."))
    return {m for m in found if m != module and module_file(m) is not None and (m or module_file("") is not None)}


GRAPH = {m: imports(m) for m in modules()}


def test_every_module_is_in_a_layer():
    assert {layer(m) for m in GRAPH} <= set(ALLOWED), "a new folder of pipelink/ needs its row in ALLOWED"
    assert set(ALLOWED) == {layer(m) for m in GRAPH}


def test_imports_go_down_the_layers():
    wrong = sorted(f"pipelink.{m or '__init__'} ({layer(m)}) imports pipelink.{t or '__init__'} ({layer(t)})"
                   for m, targets in GRAPH.items() for t in targets
                   if layer(t) != layer(m) and layer(t) not in ALLOWED[layer(m)] and t != "")
    assert not wrong, "\n".join(wrong)


def test_no_import_cycles():
    """Between modules, counting every import (functions' too): a cycle means two modules belong together
    or a piece of one belongs elsewhere. A package's __init__ is left out: it is where a package
    re-exports its modules."""
    graph = {m: {t for t in ts if module_file(t).name != "__init__.py"} for m, ts in GRAPH.items()
             if module_file(m).name != "__init__.py"}
    state, stack, cycles = {}, [], []

    def visit(m):
        state[m] = "open"
        stack.append(m)
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [t]))
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert not cycles, "\n".join(cycles)


def test_the_graph_sees_the_imports():
    """The parser above finds the imports it checks (a guard against a test that passes on nothing)."""
    assert "core.model" in GRAPH["linker.resolve"]
    assert "runtime.manifest" in GRAPH["linker.emit"]
    assert "toolchain" in GRAPH["linker.passes"]
    assert "linker.glue" in GRAPH["linker.passes"]  # an import inside a function
    assert "formats.inputs" not in GRAPH["core.model"]  # under TYPE_CHECKING


@pytest.mark.parametrize("package", ["pipelink.runtime", "pipelink.core"])
def test_the_runtime_imports_without_the_toolchain(package):
    """A process that only loads and launches kernels imports no compiler: not pipelink.toolchain, nor the
    NVRTC or nvJitLink bindings, nor the layers that use them."""
    names = [f"pipelink.{m}" for m in GRAPH if m.split(".")[0] == package.split(".")[1]]
    code = (f"import importlib, importlib.util, json, sys\n"
            f"for name in {names!r}:\n"
            f"    if name != 'pipelink.runtime.torch' or importlib.util.find_spec('torch'):\n"  # it needs torch
            f"        importlib.import_module(name)\n"
            f"print(json.dumps(sorted(sys.modules)))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                           text=True, cwd=PACKAGE.parent).stdout))
    assert package in loaded
    forbidden = {m for m in loaded if m in ("pipelink.toolchain", "cuda.bindings.nvrtc", "cuda.bindings.nvjitlink")
                 or m.startswith(("pipelink.linker.passes", "pipelink.authoring", "pipelink.formats", "pipelink.harness"))}
    assert not forbidden
