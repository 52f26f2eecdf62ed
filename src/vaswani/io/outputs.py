"""No output reaches an input: the one rule every writing command checks its destination against, before any work."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Sequence

from vaswani.errors import VaswaniError
from vaswani.io.manifests import MANIFEST_FILE, Manifest, read_manifest
from vaswani.io.paths import default_cache_dir, probe_writable
from vaswani.io.recorded_inputs import prepared_from

SHARED_KINDS = {"checkpoint"}


DESCENDANTS_SEARCHED = 10_000  # entries looked at below a folder that would be replaced, for a manifest it holds


MAX_NAME_CHARS = 100  # a name that becomes part of a path: a test set's, whose evaluation folder it names


def check_name(name: str, what: str) -> str:
    """``name``, which becomes one part of a path (a folder vaswani writes), when it is a plain name: not
    empty, no separator, not ``..``, no leading dot (a hidden folder, or one vaswani stages in) and at most
    MAX_NAME_CHARS characters; anything else is a one-line VaswaniError naming ``what`` (the setting or option
    it came from)."""
    problem = ("is empty" if not name else
               "holds a path separator" if "/" in name or "\\" in name or os.sep in name else
               "holds a NUL character" if "\0" in name else
               "starts with a dot" if name.startswith(".") else
               f"is longer than {MAX_NAME_CHARS} characters" if len(name) > MAX_NAME_CHARS else None)
    if problem is not None:
        shown = name[:MAX_NAME_CHARS]
        raise VaswaniError(f"{what}: the name {shown!r} {problem}; it names a folder, so give a plain name "
                           f"(letters, digits, '-', '_', at most {MAX_NAME_CHARS} characters)")
    return name


def repository_results() -> Path | None:
    """The ``results/`` folder of the repository this package runs from (an editable install or a checkout), whose
    published figures no command overwrites unless ``--out`` names them; None for an installed package."""
    root = Path(__file__).resolve().parents[3]  # src/vaswani/io/outputs.py: the repository holds src/
    if (root / "pyproject.toml").is_file() and (root / "results").is_dir():
        return (root / "results").resolve()
    return None


@dataclass(frozen=True)
class OutputRule:
    """check_output's flags: what ``command`` makes at its destination (``writes``: a ``folder`` replaced whole, with
    a manifest of ``kind``; ``files`` among others in a folder, ``names`` when known; one ``file``), how an existing
    one may be replaced (``force``, ``replaces_own``), how the destination was chosen (``option``, ``explicit``) and
    where inside a folder vaswani wrote it may go (``belongs_in`` of an input; ``nests`` in one of its own kind)."""

    command: str
    writes: Literal["folder", "files", "file"]
    kind: str | None = None
    force: bool = False
    replaces_own: bool = False
    option: str = "--out"
    explicit: bool = True
    belongs_in: str | None = None
    names: tuple[str, ...] = ()
    nests: bool = False


def check_output(path: str | Path, *, command: str, writes: Literal["folder", "files", "file"],
                 inputs: Sequence[str | Path | None] = (), kind: str | None = None, force: bool = False,
                 replaces_own: bool = False, option: str = "--out", explicit: bool = True,
                 belongs_in: str | None = None, names: Sequence[str] = (), nests: bool = False) -> Path:
    """The one rule that no output reaches an input, checked before any work and writing nothing. Returns ``path``.
    The flags after ``inputs`` are an :class:`OutputRule`'s.

    ``writes`` says what the command makes at ``path``: a ``folder`` replaced whole (with a manifest of ``kind``
    naming ``command`` as its writer), ``files`` written into a folder that may hold other things (``names``, when
    known), or one ``file``.
    The destination is resolved (``..``, links above it; a link as the destination itself is refused, since
    replacing it would replace the link), and refused when it

    - is, holds or lies inside one of the command's ``inputs``, or a folder an input links to (a run's
      ``checkpoints/best`` is the checkpoint it points to), or the user cache;
    - lies inside any folder vaswani wrote with a manifest (a run, a checkpoint, an export, a cache, a classifier,
      an evaluation...; with ``nests``, a folder of files of the same kind excepted, such as one experiment's
      results inside another's), or, for a folder replaced whole, holds one or holds the current directory;
    - except inside the subfolder ``belongs_in`` of such a folder that is one of the ``inputs``, where the output
      is meant to go (evaluate: ``eval/`` of the run or checkpoint it evaluates, never another's);
    - writes ``files`` of a ``kind`` (a folder that gets a manifest, which claims what it holds) and holds an input;
    - is a folder with a manifest of another kind, or of the same kind by another command; one of the same kind by
      the same command is replaced with ``force`` (or, with ``replaces_own``, as a re-run always does); a non-empty
      folder vaswani did not write is never replaced;
    - is (or, for ``files``, would write among ``names``) a corpus file prepared data still on disk was made from
      (io/recorded_inputs.py): another run's training files are no input of this command, yet still in use;
    - lies inside the repository's ``results/`` when no option named it (``explicit`` False: a default).

    Finally the nearest existing folder above it must be writable (probed with a file that is removed again).
    """
    rule = OutputRule(command, writes, kind, force, replaces_own, option, explicit, belongs_in, tuple(names), nests)
    given = Path(path)
    where = f"{rule.option} {given}"
    target = _resolved(given, where)
    inputs_found = _guarded(inputs)
    for guarded, what in inputs_found:
        if target == guarded:
            raise VaswaniError(f"{where} is {what}, an input of this command; pick a new "
                               f"{'file' if rule.writes == 'file' else 'directory'}")
        if _inside(guarded, target):
            if rule.writes == "folder" and given.exists():
                raise VaswaniError(f"{where} holds {what}, which replacing it would delete; pick a new directory")
            if rule.writes == "files" and rule.kind is not None:
                raise VaswaniError(f"{where} holds {what}, an input of this command, and would become "
                                   f"{_a(rule.kind)} folder, which holds only what vaswani writes; pick another "
                                   "directory")
            overwritten = not rule.names or guarded.name in rule.names
            if rule.writes == "files" and guarded.parent == target and overwritten:
                raise VaswaniError(f"{where} holds {what}, an input this command would overwrite; pick another "
                                   "directory")
        if _inside(target, guarded) and not _belongs(target, guarded, rule.belongs_in):
            raise VaswaniError(f"{where} lies inside {what}, an input of this command; write outside it")
    written_files = {"file": [target], "files": [target / name for name in rule.names]}.get(rule.writes, [])
    for written in written_files:
        corpus = prepared_from(written)
        if corpus is not None:
            raise VaswaniError(f"{where}: {written} is a corpus file the prepared data {corpus} was made from, which "
                               "writing over it would change under that data's runs; pick a new file")
    for folder in target.parents:  # the nearest folder vaswani wrote decides
        manifest = _manifest_or_damaged(folder)
        if manifest is None or rule.nests and rule.writes == "files" and manifest.kind == rule.kind:
            continue
        if _belongs(target, folder, rule.belongs_in) and any(folder == guarded for guarded, _ in inputs_found):
            break  # where this output goes (its own checkpoint's eval/): a run holding that checkpoint holds it too
        raise VaswaniError(f"{where} lies inside {folder}, {_a(manifest.kind)} vaswani wrote; write outside it")
    results = repository_results()
    if not rule.explicit and results is not None and (target == results or _inside(target, results)):
        raise VaswaniError(f"{where} is inside the repository's published results ({results}); pass {rule.option} "
                           "to write there on purpose, or run from another directory")
    if given.exists():
        if rule.writes == "file":
            if given.is_dir():
                raise VaswaniError(f"{where}: is a directory; name a file")
            if not given.is_file():
                raise VaswaniError(f"{where}: is not a regular file; name a file")
        elif not given.is_dir():
            raise VaswaniError(f"{where} is a file, not a directory")
        else:
            _check_folder(given, target, rule, where)
    probe_writable(target, where)
    return given


def _check_folder(given: Path, target: Path, rule: OutputRule, where: str) -> None:
    manifest = read_manifest(target)  # a damaged one is named
    if rule.writes == "files":
        if manifest is not None and manifest.kind != rule.kind:
            raise VaswaniError(f"{where} is {_a(manifest.kind)} vaswani wrote; pick another directory")
        return
    if Path.cwd().resolve() == target or _inside(Path.cwd().resolve(), target):
        raise VaswaniError(f"{where} holds the current directory, which replacing it would delete; pick a new "
                           "directory")
    if not any(given.iterdir()):
        return
    if manifest is None:
        raise VaswaniError(f"{where} exists, is not empty and was not written by `vaswani {rule.command}`; pick a "
                           "new directory (or empty this one)")
    if manifest.kind != rule.kind or not _same_writer(manifest, rule.kind, rule.command):
        by = f" by `vaswani {manifest.writer}`" if manifest.writer else ""
        raise VaswaniError(f"{where} is {_a(manifest.kind)} written{by or ' by another command'}, not an "
                           f"earlier output of `vaswani {rule.command}`; pick a new directory")
    held = _manifest_below(target)
    if held is not None:
        raise VaswaniError(f"{where} holds {held[0]}, {_a(held[1])} vaswani wrote, which replacing it would delete; "
                           "pick a new directory")
    if not rule.force and not rule.replaces_own:
        raise VaswaniError(f"{where} holds an earlier {rule.kind} of `vaswani {rule.command}`; pass --force to "
                           "replace it")


def _a(kind: str) -> str:
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def _same_writer(manifest: Manifest, kind: str | None, command: str) -> bool:
    if manifest.writer is not None:
        return manifest.writer == command
    return kind not in SHARED_KINDS  # a shared kind written before writers were recorded: whose is unknown


def _resolved(given: Path, where: str) -> Path:
    if given.is_symlink():
        raise VaswaniError(f"{where} is a link (to {os.readlink(given)}); name the file or folder itself")
    try:
        return given.resolve()
    except (OSError, RuntimeError) as error:  # a loop of links
        raise VaswaniError(f"{where} cannot be resolved ({error}); name another path") from None


def _guarded(inputs: Sequence[str | Path | None]) -> list[tuple[Path, str]]:
    """The resolved inputs, what the links inside an input folder point to (a run's ``checkpoints/best`` is the
    checkpoint it names), and the user cache."""
    found: list[tuple[Path, str]] = []
    for given in inputs:
        if given is None:
            continue
        path = Path(given)
        try:
            found.append((path.resolve(), str(path)))
        except (OSError, RuntimeError) as error:  # RuntimeError: a loop of links
            raise VaswaniError(f"{path}: cannot be resolved ({error}); name the file itself, not a loop of "
                               "links") from None
        if path.is_dir():
            for link in _links_within(path, depth=2):
                found.append((link.resolve(), f"{link} (the {link.resolve().name} it points to)"))
    found.append((default_cache_dir().resolve(), f"the cache {default_cache_dir()}"))
    return found


def _links_within(folder: Path, depth: int) -> list[Path]:
    links = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return links
    for entry in entries:
        if entry.is_symlink():
            if entry.exists():
                links.append(entry)
        elif depth > 1 and entry.is_dir():
            links += _links_within(entry, depth - 1)
    return links


def _inside(path: Path, folder: Path) -> bool:
    return folder in path.parents


def _belongs(target: Path, folder: Path, belongs_in: str | None) -> bool:
    """Is ``target`` inside ``folder``'s subfolder ``belongs_in``, where this kind of output goes?"""
    return belongs_in is not None and _inside(target, folder / belongs_in)


def _manifest_or_damaged(folder: Path) -> Manifest | None:
    """``folder``'s manifest; a damaged one still says vaswani wrote the folder (its kind then unknown)."""
    try:
        return read_manifest(folder)
    except VaswaniError:
        return Manifest("damaged output")


def _manifest_below(folder: Path) -> tuple[Path, str] | None:
    """A folder under ``folder`` with a manifest (links not followed): what replacing ``folder`` would delete."""
    seen = 0
    for root, directories, files in os.walk(folder):
        seen += len(directories) + len(files)
        if Path(root) != folder and MANIFEST_FILE in files:
            manifest = _manifest_or_damaged(Path(root))
            return Path(root), manifest.kind if manifest is not None else "folder"
        if seen > DESCENDANTS_SEARCHED:
            return folder, "folder too large to search"
    return None
