"""The layering the README promises, checked on the source: the core stands alone, imports flow one way, and
what is built on the core uses its public names only."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "vaswani"
BUILT_ON_THE_CORE = ("experiments", "benchmarks", "classification", "serve", "export", "tools", "workflows")
# Who may import whom inside the core (besides the package's small shared modules below).
# Processes only where the process is the point: git for the commit; a server under load, a training run killed
# with SIGKILL (a tool), and commands timed as a user runs them (start-up included), each in a process of its own.
# Everything else calls the public API in-process.
SUBPROCESS_ALLOWED = {"vaswani.provenance", "vaswani.tools.serve_load", "vaswani.tools.serve_ceilings",
                      "vaswani.tools.faults", "vaswani.tools.data_benchmark", "vaswani.benchmarks.engine_profile",
                      "vaswani.benchmarks.engines"}
SHARED = {"config", "settings", "errors", "io", "precision", "devices", "progress", "provenance", "records"}
# The command line inside the core: cli.py, each area's commands.py, and the options they share (arguments.py).
# Only these speak argparse; the rest of the core names settings by field and never knows a flag.
COMMAND_LINE = "arguments"
CORE_IMPORTS = {
    "model": {"model", "config", "settings", "errors", "io"},
    "data": {"data", "config", "settings", "errors", "io", "progress"},
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


def _is_command_line(module: str) -> bool:
    return module in ("vaswani.cli", "vaswani.__main__", f"vaswani.{COMMAND_LINE}") or module.endswith(".commands")


def test_imports_inside_the_core_flow_one_way() -> None:
    for name, path, tree in MODULES:
        allowed = CORE_IMPORTS.get(_area(name))
        if allowed is None:
            continue
        allowed = allowed | {COMMAND_LINE} if _is_command_line(name) else allowed
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


@pytest.mark.parametrize("name,path,tree", CORE_MODULES, ids=[name for name, _, _ in CORE_MODULES])
def test_only_the_command_line_of_the_core_speaks_argparse(name: str, path: Path, tree: ast.Module) -> None:
    if _is_command_line(name):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            assert all(alias.name != "argparse" for alias in node.names), f"{path}:{node.lineno}: imports argparse"
        elif isinstance(node, ast.ImportFrom):
            assert node.module not in ("argparse", f"vaswani.{COMMAND_LINE}"), \
                f"{path}:{node.lineno}: imports {node.module}, the command line's"


def test_importing_vaswani_leaves_the_environment_alone(tmp_path: Path) -> None:
    """A relative $VASWANI_DATA is resolved where it is used (and made absolute by `vaswani` itself, cli.main),
    never rewritten by an import."""
    check = ("import os; before = dict(os.environ); import vaswani, vaswani.config, vaswani.data.download, "
             "vaswani.decoding, vaswani.model, vaswani.cli; assert dict(os.environ) == before, "
             "{k: v for k, v in os.environ.items() if before.get(k) != v}")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent), "VASWANI_DATA": "relative/data",
           "VASWANI_CACHE": "relative/cache"}
    done = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# A module a reader takes in at once: the trainer's loop on a few screens, any other file in a sitting.
TRAINER_LINES, FILE_LINES = 300, 400
# Files over the limit that their areas' branches split. The test fails once one of them is within the limit, so
# that it leaves this list.
LONG_FILES_TO_SPLIT: set[str] = set()


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_the_trainer_reads_on_a_few_screens_and_every_file_in_a_sitting() -> None:
    assert _lines(PACKAGE / "training" / "trainer.py") <= TRAINER_LINES
    for name, path, _ in MODULES:
        relative = str(path.relative_to(PACKAGE))
        if relative in LONG_FILES_TO_SPLIT:
            assert _lines(path) > FILE_LINES, f"{relative} is within {FILE_LINES} lines: drop it from the list"
        else:
            assert _lines(path) <= FILE_LINES, f"{relative}: {_lines(path)} lines, over {FILE_LINES}; split it"


def test_the_server_reads_checkpoints_without_the_training_code() -> None:
    """serve loads a model and what its checkpoint says of itself through model/, decoding/ and evaluation/ types."""
    for name, path, tree in MODULES:
        if _area(name) != "serve":
            continue
        for module, _, line in _imports(tree):
            assert _area(module) != "training", f"{path}:{line}: {name} imports {module}"


# Writing a file or a folder whole is io's: staging, renames and fsync follow one rule there (see vaswani.io).
STAGING_CALLS = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move"), ("tempfile", "mkdtemp"),
                 ("tempfile", "mkstemp"), ("tempfile", "NamedTemporaryFile"), ("os", "fsync")}


def _staging_or_renames(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, call) of each call that stages, renames or fsyncs: os.replace/rename, shutil.move, tempfile's
    staging files, Path.rename and Path.replace (``x.replace(target)``: one positional argument, where str.replace
    takes two and dataclasses.replace takes keywords)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in ("os", "shutil", "tempfile"):
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names
                      if (node.module, alias.name) in STAGING_CALLS]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
        name = node.func.attr
        if (owner, name) in STAGING_CALLS or name == "rename" or \
                name == "replace" and owner != "dataclasses" and len(node.args) == 1 and not node.keywords:
            found.append((node.lineno, f"{owner or '...'}.{name}"))
    return found


def test_only_io_stages_renames_or_fsyncs() -> None:
    for name, path, tree in MODULES:
        if name == "vaswani.io" or name.startswith("vaswani.io."):
            continue
        calls = _staging_or_renames(tree)
        assert not calls, f"{path}: {calls}: write through vaswani.io (atomic_write, directory_written_whole, " \
                          "staging_directory + install_directory, atomic_symlink, move)"


def test_only_io_writes_a_figure() -> None:
    """A figure is a file like any other: written whole through vaswani.io (atomic_write_figure), never by savefig."""
    for name, path, tree in MODULES:
        if name == "vaswani.io" or name.startswith("vaswani.io."):
            continue
        calls = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                 and isinstance(node.func, ast.Attribute) and node.func.attr == "savefig"]
        assert not calls, f"{path}:{calls[0]}: savefig outside vaswani.io; use vaswani.io.atomic_write_figure"


CORE_AREAS = ("model", "data", "training", "decoding", "evaluation")


def test_no_module_of_the_core_is_a_program() -> None:
    """A program (a ``main``, a ``__main__`` block) is a tool or a command built on the core, never a core module."""
    for name, path, tree in MODULES:
        if _area(name) not in CORE_AREAS:
            continue
        mains = [node.lineno for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
        mains += [node.lineno for node in tree.body
                  if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        assert not mains, f"{path}:{mains[0]}: a program inside the core; move it to vaswani/tools/"


# Functions that take or return dict[str, Any]: results cross boundaries as dataclasses instead. The counts may only
# go down (lower them when a change removes some); none may be added in the core packages named here.
UNTYPED_DICT_FUNCTIONS_AT_MOST = {"src": 14, "core": 0}
TYPED_CORE = ("model", "training", "decoding", "evaluation", "io", "data")


def _functions_whose_hint(matches) -> list[tuple[str, str, int]]:
    """(module, function, line) of every function with a type hint (of an argument or its result) that
    ``matches``."""
    found = []
    for name, path, tree in MODULES:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                hints = [a.annotation for a in arguments if a.annotation is not None] + [node.returns]
                if any(hint is not None and matches(hint) for hint in hints):
                    found.append((name, node.name, node.lineno))
    return found


def _functions_hinted(text: str) -> list[tuple[str, str, int]]:
    return _functions_whose_hint(lambda hint: text in ast.unparse(hint))


def _untyped_dict_functions() -> list[tuple[str, str, int]]:
    return _functions_hinted("dict[str, Any]")


def _is_bare_dict(hint: ast.expr) -> bool:
    """``dict`` without its key and value types: as untyped as dict[str, Any]."""
    subscripted = {id(part.value) for part in ast.walk(hint) if isinstance(part, ast.Subscript)}
    return any(isinstance(part, ast.Name) and part.id == "dict" and id(part) not in subscripted
               for part in ast.walk(hint))


def _bare_dict_functions() -> list[tuple[str, str, int]]:
    return _functions_whose_hint(_is_bare_dict)


# Bare ``dict`` hints are as untyped as dict[str, Any]: none anywhere. A library's own protocol (a torch hook's
# kwargs, pickle's __getstate__, an optimizer's parameter groups, yaml's construct_mapping) names its key and value
# types too.
BARE_DICT_FUNCTIONS_AT_MOST = {"src": 0, "core": 0}


def test_fewer_functions_pass_bare_dicts_than_the_bound() -> None:
    found = _bare_dict_functions()
    core = [item for item in found if _area(item[0]) in TYPED_CORE]
    bound = BARE_DICT_FUNCTIONS_AT_MOST
    assert len(found) <= bound["src"] and len(core) <= bound["core"], (
        f"{len(found)} functions ({len(core)} in the core) hint a bare dict (at most {bound['src']} and "
        f"{bound['core']}): " + ", ".join(f"{module}.{function}:{line}" for module, function, line in found[-5:]))


# An open JSON object (vaswani.io.JsonObject) is the honest type only where a file format leaves its content to the
# writer or before a reader has checked it; these are those places, and no other function may pass one.
OPEN_JSON_OBJECTS = {("vaswani.io.manifests", "directory_written_whole"),
                     ("vaswani.io.manifests", "files_written_together"), ("vaswani.io.manifests", "write_manifest"),
                     ("vaswani.training.config", "to_dict"), ("vaswani.training.config", "_build")}


def test_open_json_objects_pass_only_where_a_file_format_leaves_them_open() -> None:
    found = {(module, function) for module, function, _ in _functions_hinted("JsonObject")}
    assert found <= OPEN_JSON_OBJECTS, f"{sorted(found - OPEN_JSON_OBJECTS)} pass an open JsonObject; pass a dataclass"


def test_fewer_functions_pass_untyped_dicts_than_the_bound() -> None:
    found = _untyped_dict_functions()
    core = [item for item in found if _area(item[0]) in TYPED_CORE]
    bound = UNTYPED_DICT_FUNCTIONS_AT_MOST
    assert len(found) <= bound["src"], (
        f"{len(found)} functions take or return dict[str, Any] (at most {bound['src']}); pass a dataclass instead")
    assert len(core) <= bound["core"], (
        f"{len(core)} functions of the core take or return dict[str, Any] (at most {bound['core']}): "
        + ", ".join(f"{module}.{function}:{line}" for module, function, line in core[-5:]))


# An import inside a function hides a dependency from the module's reader; it belongs there only where it keeps
# a command from paying for what it does not use:
# - in a command's handler (an area's commands.py, cli.py): the parser imports every commands module, so `vaswani
#   --help` and every other command would pay for each command's dependencies;
# - of a package that is heavy to import or optional (LAZY_PACKAGES): torch alone costs a second of start-up, and a
#   translation on CTranslate2 never imports it;
# - anywhere else, with the reason in a comment on its line or above its block of imports.
LAZY_PACKAGES = {"torch", "numpy", "ctranslate2", "transformers", "tokenizers", "sacrebleu", "safetensors", "tqdm",
                 "matplotlib", "sklearn", "datasets", "fastapi", "starlette", "uvicorn", "httpx", "h11", "playwright",
                 "py3langid", "yaml", "platform", "importlib"}


def _function_imports_without_a_reason() -> list[str]:
    found = []
    for name, path, tree in MODULES:
        if path.name == "commands.py" or name == "vaswani.cli":
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                if (module or "").split(".")[0] in LAZY_PACKAGES:
                    continue
                above = node.lineno - 2  # the reason may head the block of imports this one is in
                while lines[above].strip().startswith(("import ", "from ")):
                    above -= 1
                if "#" in lines[node.lineno - 1] or lines[above].strip().startswith("#"):
                    continue
                found.append(f"{name}:{node.lineno}")
    return sorted(set(found))


def test_imports_inside_functions_have_a_reason() -> None:
    found = _function_imports_without_a_reason()
    assert not found, (
        f"{len(found)} imports inside functions without a reason; "
        f"move them to the top of the module, or say why on the line: {', '.join(found[-5:])}")
