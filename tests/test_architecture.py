"""The layering the README promises, checked on the source: the core stands alone, imports flow one way, and
what is built on the core uses its public names only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vaswani"
BUILT_ON_THE_CORE = ("experiments", "benchmarks", "classification", "serve", "export", "tools")
# Who may import whom inside the core (besides the package's small shared modules below).
# Processes only where the process is the point: git for the commit; a server under load, a training run killed
# with SIGKILL, and commands timed as a user runs them (start-up included), each in a process of its own.
# Everything else calls the public API in-process.
SUBPROCESS_ALLOWED = {"vaswani.provenance", "vaswani.serve.loadtest", "vaswani.training.faults",
                      "vaswani.benchmarks.engines", "vaswani.tools.data_benchmark"}
SHARED = {"config", "errors", "io", "precision", "devices", "provenance"}
CORE_IMPORTS = {
    "model": {"model", "config", "errors", "io"},
    "data": {"data", "config", "errors", "io"},
    "decoding": {"decoding", "model", "data", *SHARED},
    "evaluation": {"evaluation", "decoding", "model", "data", *SHARED},
    "training": {"training", "model", "data", "decoding", "evaluation", *SHARED},
}


def _modules() -> list[tuple[str, Path, ast.Module]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("vaswani", *path.relative_to(PACKAGE).with_suffix("").parts))
        found.append((name.removesuffix(".__init__"), path, ast.parse(path.read_text(), str(path))))
    return found


MODULES = _modules()


def _imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """(module, imported names, line) of every vaswani import, wherever it is (lazy imports count too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vaswani"):
            found.append((node.module, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Import):
            found += [(alias.name, [], node.lineno) for alias in node.names if alias.name.startswith("vaswani")]
    return found


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _is_core(module: str) -> bool:
    return _area(module) not in (*BUILT_ON_THE_CORE, "cli", "__main__")


CORE_MODULES = [module for module in MODULES if _is_core(module[0])]


# Ids are the module names: the same in every process, as pytest-xdist requires of its workers' collections.
@pytest.mark.parametrize("name,path,tree", CORE_MODULES, ids=[name for name, _, _ in CORE_MODULES])
def test_the_core_never_imports_what_is_built_on_it(name: str, path: Path, tree: ast.Module) -> None:
    for module, _, line in _imports(tree):
        assert _is_core(module), f"{path}:{line}: the core module {name} imports {module}"


def test_imports_inside_the_core_flow_one_way() -> None:
    for name, path, tree in MODULES:
        allowed = CORE_IMPORTS.get(_area(name))
        if allowed is None:
            continue
        for module, _, line in _imports(tree):
            if module == "vaswani":
                continue
            assert _area(module) in allowed, f"{path}:{line}: {name} may not import {module}"


def test_nothing_reaches_into_private_names_of_another_module() -> None:
    for name, path, tree in MODULES:
        for module, names, line in _imports(tree):
            private = [n for n in names if n.startswith("_")]
            assert not private or module == name, f"{path}:{line}: {name} imports private {private} from {module}"
        source = path.read_text()
        for forbidden in (r"torch\._C\b", r"\._last_lr\b", r"\._update\b", r"\b_token_embedding\b"):
            assert not re.search(forbidden, source), f"{path}: uses {forbidden}"


def test_library_code_never_calls_the_command_line() -> None:
    for name, path, tree in MODULES:
        if name in ("vaswani.cli", "vaswani.__main__"):
            continue
        for module, _, line in _imports(tree):
            assert module != "vaswani.cli", f"{path}:{line}: {name} imports the CLI"
        starts_processes = any(isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names)
                               for node in ast.walk(tree))
        assert not starts_processes or name in SUBPROCESS_ALLOWED, f"{path}: starts subprocesses"


def test_the_data_modules_are_a_library_not_scripts() -> None:
    """Only data/commands.py speaks to the command line; harnesses such as the data benchmark live in tools/."""
    for name, path, tree in MODULES:
        if not name.startswith("vaswani.data.") or name == "vaswani.data.commands":
            continue
        imports = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imports |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert "argparse" not in imports, f"{path}: imports argparse"
        functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        assert "main" not in functions, f"{path}: has a main()"
