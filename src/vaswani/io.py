"""Writing files so that a crash never leaves half of one, and reading back what was written: every file and folder
the tool writes goes through here, and nothing else stages, renames or fsyncs.

The pattern is the same everywhere: write a temporary file in the destination's directory, fsync it, give it the
permissions a plainly created file would have, rename it over the destination and fsync the directory
(:func:`atomic_write`). Readers see the old file or the new one, never a torn one, even if the process is killed
mid-write. A directory of several files is assembled in a staging directory beside its destination
(:func:`staging_directory`) and renamed into place (:func:`install_directory`, or the two together,
:func:`directory_written_whole`), with a manifest written last (:func:`write_manifest`): the manifest says what the
directory is and holds each file's size and sha256, so a reader knows a run, a checkpoint or an evaluation by what
the tool wrote, never by which files happen to be there.

One fsync rule holds for all of them: every file is fsynced before the rename that publishes it, and the directory
holding the new name after it; a file system that cannot fsync a directory at all (EINVAL: some network and FUSE
mounts) is skipped, since the rename is still atomic there, and any other failure is raised.

A write that fails because the machine cannot take it (a full disk, the file-size limit of ``ulimit -f``, a
read-only mount) is one :class:`EnvironmentFault` naming the file, whichever library was writing (:func:`writing`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import resource
import shutil
import stat
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Literal, Sequence, TextIO

from vaswani.errors import EnvironmentFault, VaswaniError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def default_file_mode() -> int:
    """The permissions a plainly created file would get (mkstemp makes private 0600 files)."""
    return 0o666 & ~_umask()


def default_directory_mode() -> int:
    """The permissions a plainly created directory would get (mkdtemp makes private 0700 ones)."""
    return 0o777 & ~_umask()


def absolute_path(value: str | Path) -> Path:
    """A user-typed path made absolute against the directory it was typed in (``~`` expanded), so that it still
    names the same folder after a ``chdir`` or in a child process started elsewhere."""
    return Path(os.path.abspath(Path(value).expanduser()))


def default_cache_dir() -> Path:
    """Where the tool keeps what it downloads and converts: ``$VASWANI_CACHE``, else ``~/.cache/vaswani``."""
    value = os.environ.get("VASWANI_CACHE")
    return absolute_path(value) if value else Path.home() / ".cache" / "vaswani"


def write_fault(error: BaseException, path: str | Path) -> EnvironmentFault | None:
    """The one-line EnvironmentFault for ``error``, raised while writing ``path``, when the machine is to blame; None
    when it is not (a bug keeps its traceback).

    Libraries report the same full disk differently: an OSError with an errno (plain writes), an OSError without one
    (numpy: "N requested and M written"), torch.save's RuntimeError ("unexpected pos ..."), safetensors' own error
    ("I/O error: ... (os error 28)"). So the errno is read where there is one, and otherwise the file-size limit and
    the free space of the destination's file system say what happened.
    """
    number = getattr(error, "errno", None)
    if number is None:
        match = re.search(r"os error (\d+)", str(error))
        number = int(match.group(1)) if match else None
    if number is None:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft_limit != resource.RLIM_INFINITY:
            number = errno.EFBIG
        else:
            try:
                number = errno.ENOSPC if shutil.disk_usage(Path(path).parent).free < 1 << 20 else None
            except OSError:
                number = None
    if number is None:
        return None
    reason = os.strerror(number)
    if number == errno.EFBIG:
        soft_limit, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
        limit = f"{soft_limit:,} bytes" if soft_limit != resource.RLIM_INFINITY else "set"
        reason += f": the file-size limit (ulimit -f) is {limit}; raise it or write elsewhere"
    elif number in (errno.ENOSPC, errno.EDQUOT):
        reason += "; free some space or write elsewhere"
    return EnvironmentFault(f"{path}: cannot be written ({reason})")


@contextlib.contextmanager
def writing(path: str | Path) -> Iterator[None]:
    """Run the block that writes ``path``; a failure the machine is to blame for (see :func:`write_fault`) becomes
    one EnvironmentFault naming ``path``. The caller removes what the failed write left."""
    try:
        yield
    except VaswaniError:
        raise
    except Exception as error:
        fault = write_fault(error, path)
        if fault is None:
            raise
        raise fault from None


@contextlib.contextmanager
def named_as(staging: str | Path, destination: str | Path) -> Iterator[None]:
    """A write fault in the block names ``destination`` where it would name ``staging``, the temporary directory the
    output is assembled in: the user knows the one, not the other."""
    try:
        yield
    except EnvironmentFault as fault:
        raise EnvironmentFault(str(fault).replace(str(staging), str(destination))) from None


def atomic_write(path: str | Path, write: Callable[[str], None]) -> None:
    """Call ``write(temporary_path)`` to produce the file, then fsync and rename it to ``path`` and fsync the
    directory. A write the machine refuses (full disk, file-size limit) is an EnvironmentFault naming ``path``; any
    failure of ``write`` leaves no temporary file."""
    path = Path(path)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write(tmp)
            fsync_file(tmp)
            os.chmod(tmp, default_file_mode())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        fsync_directory(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` with UTF-8 ``text`` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, payload: Any) -> None:
    """Replace ``path`` with ``payload`` as indented JSON (non-JSON values, e.g. paths, written as strings)."""
    atomic_write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


def atomic_copy(source: str | Path, destination: str | Path) -> None:
    """Replace ``destination`` with a copy of ``source`` atomically (a crash leaves the old file or the new one)."""
    atomic_write(destination, lambda tmp: shutil.copyfile(source, tmp))


# What a JSON or YAML file vaswani reads back may hold: far more than any it writes (a results file is kilobytes, a
# tokenizer a few megabytes), far less than would exhaust memory or the parser's recursion.
MAX_DOCUMENT_BYTES = 256 << 20
MAX_NESTING = 64
MAX_VALUES = 20_000_000


def read_document(path: str | Path, what: str, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``limit`` bytes (checked before it is read); anything
    else is a VaswaniError naming it as ``what``."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise VaswaniError(f"{path}: the {what} is not a regular file; it is not what vaswani wrote")
            if info.st_size > limit:
                raise VaswaniError(f"{path}: the {what} is {info.st_size:,} bytes, more than the {limit:,} vaswani "
                                   "reads; it is not what vaswani wrote")
            data = handle.read(limit + 1)
    except OSError as error:
        raise VaswaniError(f"{path}: the {what} cannot be read ({error.strerror or error})") from None
    if len(data) > limit:  # grew while being read
        raise VaswaniError(f"{path}: the {what} is more than the {limit:,} bytes vaswani reads")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise VaswaniError(f"{path}: the {what} is not UTF-8 text; it is damaged or not what vaswani wrote") from None


def document_shape_problem(value: Any, nesting: int = MAX_NESTING, values: int = MAX_VALUES) -> str | None:
    """Why a parsed JSON or YAML ``value`` is too deep or too large to hand on (None when it is not): walked without
    recursion, and shared values (YAML aliases) counted each time they are reached, as a reader would."""
    stack = [(value, 1)]
    seen = 0
    while stack:
        item, depth = stack.pop()
        seen += 1
        if seen > values:
            return f"more than {values:,} values"
        if isinstance(item, (dict, list, tuple)):
            if depth > nesting:
                return f"nested more than {nesting} levels deep"
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


def read_json(path: str | Path, what: str = "JSON file") -> Any:
    """The JSON value in ``path``; a file that cannot be read, is larger than MAX_DOCUMENT_BYTES, is not UTF-8, is
    not JSON or is nested deeper than MAX_NESTING is a VaswaniError naming it as ``what`` (e.g. "classifier
    description")."""
    path = Path(path)
    text = read_document(path, what)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise VaswaniError(f"{path}: the {what} is not valid JSON ({error}); it is damaged or not what vaswani "
                           "wrote") from None
    except RecursionError:
        value, problem = None, f"nested more than {MAX_NESTING} levels deep"
    else:
        problem = document_shape_problem(value)
    if problem is not None:
        raise VaswaniError(f"{path}: the {what} is {problem}; it is not what vaswani wrote")
    return value


def ensure_writable_directory(path: str | Path, what: str = "output directory") -> Path:
    """Create ``path`` if needed and prove it can be written by creating and removing a file in it, so a command
    fails before its work, not after. Raises EnvironmentFault naming the directory and the reason."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        raise EnvironmentFault(f"{path}: the {what} exists and is not a directory") from None
    except OSError as error:
        raise EnvironmentFault(f"{path}: the {what} cannot be written ({error.strerror or error}); "
                               "pick a directory you can write to") from None
    return path


NUMBER = (int, float)


def json_shape_problem(value: Any, shape: Any, where: str = "") -> str | None:
    """What makes the parsed JSON ``value`` unlike ``shape`` (the first problem, naming its field), or None.

    A shape is a type or tuple of types (``NUMBER`` for int or float; true and false are never numbers), a dict of
    shapes (an object with those keys; a key ending in "?" may be absent or null), or a one-element list (a non-empty
    array of that shape). Numbers must be finite. Readers check a file once, against the shape of everything they
    read, so a damaged field is one message naming it rather than a KeyError deep inside a report.
    """
    name = where.rstrip(".") or "the file"
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            return f"{name} is {_json_kind(value)}, not an object"
        for key, inner in shape.items():
            field_name, optional = key.removesuffix("?"), key.endswith("?")
            if value.get(field_name) is None and optional:
                continue
            if field_name not in value:
                return f"no {where}{field_name!r}"
            problem = json_shape_problem(value[field_name], inner, f"{where}{field_name}.")
            if problem:
                return problem
        return None
    if isinstance(shape, list):
        if not isinstance(value, list) or not value:
            return f"{name} is {_json_kind(value)}, not a non-empty array"
        for index, item in enumerate(value):
            problem = json_shape_problem(item, shape[0], f"{where.rstrip('.')}[{index}].")
            if problem:
                return problem
        return None
    kinds = shape if isinstance(shape, tuple) else (shape,)
    if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
        names = {int: "a whole number", float: "a number", str: "a string", bool: "true or false", type(None): "null",
                 list: "an array", dict: "an object"}
        wanted = [names[k] for k in kinds if not (k is int and float in kinds)]  # int or float: "a number"
        return f"{name} is {_json_kind(value)}, not {' or '.join(wanted)}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} is {value}, not a finite number"
    return None


def _json_kind(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def staging_directory(destination: str | Path, name: str | None = None) -> Path:
    """An empty directory beside ``destination`` to assemble it in, with the permissions a plainly created directory
    would have. Hidden: ``name`` when the caller must find it again (a checkpoint's ``.tmp-step_N-PID``, which a
    later save removes if a kill left it), else a fresh ``.NAME.XXXXXXXX``."""
    destination = Path(destination)
    with writing(destination):
        destination.parent.mkdir(parents=True, exist_ok=True)
        if name is None:
            staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
        else:
            staging = destination.parent / name
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir()
        os.chmod(staging, default_directory_mode())
    return staging


def install_directory(staging: str | Path, destination: str | Path, keep: Callable[[Path], bool] | None = None,
                      aside: str | Path | None = None) -> bool:
    """Make the assembled ``staging`` directory ``destination``: fsync every file in it and the directory, then
    rename it into place and fsync the parent. An existing ``destination`` is kept when ``keep(destination)`` says
    so (another process wrote the same output meanwhile: ``staging`` is discarded and False returned); otherwise it
    is first renamed ``aside`` (default: a fresh hidden directory beside it), and deleted only once the new one is in
    place (a named ``aside`` is deleted then even if a killed install left it). A kill at any instant leaves the old
    ``destination`` or the new one, never a mix. Returns True when ``staging`` took the place."""
    staging, destination = Path(staging), Path(destination)
    for path in sorted(staging.rglob("*")):
        if path.is_file() and not path.is_symlink():
            fsync_file(path)
    fsync_directory(staging)
    if keep is not None and destination.exists() and keep(destination):
        shutil.rmtree(staging, ignore_errors=True)
        return False
    previous = None
    if destination.exists() or destination.is_symlink():
        if aside is None:
            holder = Path(tempfile.mkdtemp(prefix=f".{destination.name}.old.", dir=destination.parent))
            previous = holder / destination.name
        else:
            previous = holder = Path(aside)
            shutil.rmtree(holder, ignore_errors=True)
        os.replace(destination, previous)
    try:
        os.replace(staging, destination)
    except OSError as error:
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST) and keep is not None and keep(destination):
            shutil.rmtree(staging, ignore_errors=True)  # another process put a whole one there first
            if previous is not None:
                shutil.rmtree(holder, ignore_errors=True)
            return False
        if previous is not None:
            os.replace(previous, destination)
        raise
    fsync_directory(destination.parent)
    if previous is not None or aside is not None:  # a named ``aside`` may be left from an earlier, killed install
        shutil.rmtree(Path(aside) if aside is not None else holder, ignore_errors=True)
    return True


@contextlib.contextmanager
def directory_written_whole(out: str | Path, kind: str | None = None, details: dict[str, Any] | None = None,
                            writer: str | None = None) -> Iterator[Path]:
    """Yield an empty staging directory beside ``out``; when the block succeeds it takes ``out``'s place, and an
    existing ``out`` is deleted only after that. With ``kind``, the manifest (see :func:`write_manifest`) is written
    into it last, naming the command (``writer``). A failure (or a kill) never leaves a half-written ``out`` and never
    loses the old one: what can remain is a hidden ``.NAME.*`` directory beside it."""
    out = Path(out)
    staging = staging_directory(out)
    try:
        with named_as(staging, out):
            yield staging
        with writing(out):
            if kind is not None:
                write_manifest(staging, kind, details, writer=writer)
            install_directory(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def files_written_together(directory: str | Path, kind: str | None = None,
                           details: dict[str, Any] | None = None) -> Iterator[Path]:
    """Yield an empty staging directory inside ``directory`` (which may hold other things, e.g. other experiments'
    folders); when the block succeeds, each file written there is renamed into ``directory``, the manifest (with
    ``kind``) last. Every byte is written before the first file moves, so a full disk or a failure leaves the earlier
    files, never a mix of new and old ones; renames within a directory need no space."""
    directory = Path(directory)
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
    staging = staging_directory(directory / "staging")  # .staging.XXXXXXXX inside it
    try:
        with named_as(staging, directory):
            yield staging
        with writing(directory):
            if kind is not None:
                write_manifest(staging, kind, details)
            names = sorted(p.name for p in staging.iterdir() if p.name != MANIFEST_FILE)
            for name in names:
                fsync_file(staging / name)
            for name in [*names, *([MANIFEST_FILE] if kind is not None else [])]:
                os.replace(staging / name, directory / name)
            fsync_directory(directory)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def atomic_symlink(link: str | Path, target: str) -> None:
    """Make ``link`` a symlink to ``target`` (relative to the link's directory), replacing what was there by one
    rename: a reader finds the old link or the new one, never none."""
    link = Path(link)
    with writing(link):
        temporary = link.parent / f".{link.name}.tmp-{os.getpid()}"
        temporary.unlink(missing_ok=True)
        os.symlink(target, temporary)
        os.replace(temporary, link)
        fsync_directory(link.parent)


def move(source: str | Path, destination: str | Path) -> None:
    """Rename ``source`` (a file or a folder) to ``destination`` on the same file system, durably: both directories
    are fsynced, so a crash finds it in one place or the other."""
    source, destination = Path(source), Path(destination)
    with writing(destination):
        os.replace(source, destination)
        fsync_directory(destination.parent)
        if source.parent != destination.parent:
            fsync_directory(source.parent)


def fsync_file(path: str | Path) -> None:
    """Write ``path``'s bytes to the disk before anything is renamed to publish it."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(path: str | Path) -> None:
    """Make a rename inside ``path`` durable (the directory entry is written, not only the file). A file system that
    cannot fsync a directory (EINVAL) is skipped: the rename is atomic there all the same."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
    finally:
        os.close(fd)


# ---- manifests: what a directory is, by what the tool wrote ------------------------------------------------------

MANIFEST_FILE = "vaswani.json"
MANIFEST_FORMAT = 1
HASH_CHUNK = 1 << 20


@dataclass
class Manifest:
    """What a directory is (``kind``: run, checkpoint, evaluation, comparison, export, classifier, ...) and the
    bytes and sha256 of each file it was written with (a run directory, which grows, lists none)."""

    kind: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    writer: str | None = None  # the command that wrote it, where several write the same kind (a checkpoint)


def bytes_sha256(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: str | Path) -> str:
    """The sha256 of ``path``'s bytes, in hex, read a chunk at a time. Remembered for the process by the file's
    identity and times (device, inode, size, modification and change time, in nanoseconds), so a load that checks a
    checkpoint and then keys its conversion reads the weights once; any write changes that identity."""
    info = os.stat(path)
    identity = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    known = _HASHED.get(identity)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    _HASHED[identity] = digest.hexdigest()
    return _HASHED[identity]


_HASHED: dict[tuple[int, ...], str] = {}


def files_sha256(directory: str | Path, names: Iterable[str]) -> str:
    """One sha256 over the files ``names`` in ``directory``, each as its name, its size and its sha256: equal files,
    equal key (the key of what a derived output, such as a conversion, was made from)."""
    lines = [f"{name}\0{(Path(directory) / name).stat().st_size}\0{file_sha256(Path(directory) / name)}\n"
             for name in names]
    return bytes_sha256("".join(lines).encode())


def write_manifest(directory: str | Path, kind: str, details: dict[str, Any] | None = None,
                   files: Iterable[str] | None = None, writer: str | None = None) -> Manifest:
    """Write ``directory``'s manifest: its ``kind``, the command that wrote it (``writer``), ``details``, and the
    size and sha256 of ``files`` (default: every visible regular file directly in it). Written last, atomically: a
    directory with a manifest is complete."""
    directory = Path(directory)
    names = sorted(files) if files is not None else sorted(
        p.name for p in directory.iterdir() if p.is_file() and not p.is_symlink() and not p.name.startswith(".")
        and p.name != MANIFEST_FILE)
    listed = {name: {"bytes": (directory / name).stat().st_size, "sha256": file_sha256(directory / name)}
              for name in names}
    manifest = Manifest(kind, listed, dict(details or {}), writer)
    atomic_write_json(directory / MANIFEST_FILE, {"kind": kind, "format": MANIFEST_FORMAT, "files": listed,
                                                  "details": manifest.details,
                                                  **({"writer": writer} if writer is not None else {})})
    return manifest


def read_manifest(directory: str | Path) -> Manifest | None:
    """``directory``'s manifest, or None when it has none; a damaged one is a VaswaniError naming it."""
    path = Path(directory) / MANIFEST_FILE
    if not path.is_file():
        return None
    values = read_json(path, "directory manifest")
    problem = _manifest_problem(values)
    if problem:
        raise VaswaniError(f"{path}: not a vaswani manifest ({problem}); it is damaged or was not written by vaswani")
    return Manifest(values["kind"], values["files"], values.get("details") or {}, values.get("writer"))


def _manifest_problem(values: Any) -> str | None:
    if not isinstance(values, dict):
        return "not a JSON object"
    if values.get("format") != MANIFEST_FORMAT:
        return f"format {values.get('format')!r} is not {MANIFEST_FORMAT}"
    if not isinstance(values.get("kind"), str):
        return 'no "kind"'
    files = values.get("files")
    if not isinstance(files, dict):
        return 'no "files" object'
    for name, entry in files.items():
        if "/" in name or name in ("", ".", "..") or not isinstance(entry, dict):
            return f"bad entry {name!r}"
        size, digest = entry.get("bytes"), entry.get("sha256")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0 or not isinstance(digest, str):
            return f"bad entry {name!r}"
    if not isinstance(values.get("details", {}), dict):
        return '"details" is not an object'
    if not isinstance(values.get("writer", ""), str):
        return '"writer" is not a string'
    return None


def directory_kind(directory: str | Path) -> str | None:
    """The kind ``directory``'s manifest names, or None (no manifest, or a damaged one)."""
    try:
        manifest = read_manifest(directory)
    except VaswaniError:
        return None
    return manifest.kind if manifest is not None else None


def verify_files(directory: str | Path, manifest: Manifest, names: Iterable[str] | None = None) -> None:
    """Check that the files the manifest lists (or ``names`` among them) are there with the bytes they were written
    with; a missing, resized or changed file is a VaswaniError naming it and the manifest."""
    directory = Path(directory)
    for name in manifest.files if names is None else [n for n in names if n in manifest.files]:
        path, entry = directory / name, manifest.files[name]
        if not path.is_file():
            raise VaswaniError(f"{path}: missing, though {directory / MANIFEST_FILE} lists it; the {manifest.kind} "
                               "is incomplete")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise VaswaniError(f"{path}: {size:,} bytes, but {directory / MANIFEST_FILE} says vaswani wrote "
                               f"{entry['bytes']:,}; the file is truncated or was replaced")
        if file_sha256(path) != entry["sha256"]:
            raise VaswaniError(f"{path}: its content differs from what {directory / MANIFEST_FILE} records (sha256); "
                               "the file is damaged or was edited")


# ---- no output reaches an input ------------------------------------------------------------------------------

# Kinds several commands write under the same name: a manifest of one replaces only what its writer wrote.
SHARED_KINDS = {"checkpoint"}
DESCENDANTS_SEARCHED = 10_000  # entries looked at below a folder that would be replaced, for a manifest it holds


def repository_results() -> Path | None:
    """The ``results/`` folder of the repository this package runs from (an editable install or a checkout), whose
    published figures no command overwrites unless ``--out`` names them; None for an installed package."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "results").is_dir():
        return (root / "results").resolve()
    return None


def check_output(path: str | Path, *, command: str, writes: Literal["folder", "files", "file"],
                 inputs: Sequence[str | Path | None] = (), kind: str | None = None, force: bool = False,
                 replaces_own: bool = False, option: str = "--out", explicit: bool = True,
                 belongs_in: str | None = None, names: Sequence[str] = (), nests: bool = False) -> Path:
    """The one rule that no output reaches an input, checked before any work and writing nothing. Returns ``path``.

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
    - except inside the subfolder ``belongs_in`` of such a folder, where the output is meant to go (evaluate:
      ``eval/`` of a run or a checkpoint);
    - is a folder with a manifest of another kind, or of the same kind by another command; one of the same kind by
      the same command is replaced with ``force`` (or, with ``replaces_own``, as a re-run always does); a non-empty
      folder vaswani did not write is never replaced;
    - lies inside the repository's ``results/`` when no option named it (``explicit`` False: a default).

    Finally the nearest existing folder above it must be writable (probed with a file that is removed again).
    """
    given = Path(path)
    where = f"{option} {given}"
    target = _resolved(given, where)
    for guarded, what in _guarded(inputs):
        if target == guarded:
            raise VaswaniError(f"{where} is {what}, an input of this command; pick a new "
                               f"{'file' if writes == 'file' else 'directory'}")
        if _inside(guarded, target):
            if writes == "folder" and given.exists():
                raise VaswaniError(f"{where} holds {what}, which replacing it would delete; pick a new directory")
            if writes == "files" and guarded.parent == target and (not names or guarded.name in names):
                raise VaswaniError(f"{where} holds {what}, an input this command would overwrite; pick another "
                                   "directory")
        if _inside(target, guarded) and not _belongs(target, guarded, belongs_in):
            raise VaswaniError(f"{where} lies inside {what}, an input of this command; write outside it")
    for folder in target.parents:  # the nearest folder vaswani wrote decides
        manifest = _manifest_or_damaged(folder)
        if manifest is None or nests and writes == "files" and manifest.kind == kind:
            continue
        if _belongs(target, folder, belongs_in):
            break  # where this output goes (a checkpoint's eval/): a run holding that checkpoint holds it too
        raise VaswaniError(f"{where} lies inside {folder}, {_a(manifest.kind)} vaswani wrote; write outside it")
    results = repository_results()
    if not explicit and results is not None and (target == results or _inside(target, results)):
        raise VaswaniError(f"{where} is inside the repository's published results ({results}); pass {option} to "
                           "write there on purpose, or run from another directory")
    if given.exists():
        if writes == "file":
            if given.is_dir():
                raise VaswaniError(f"{where}: is a directory; name a file")
            if not given.is_file():
                raise VaswaniError(f"{where}: is not a regular file; name a file")
        elif not given.is_dir():
            raise VaswaniError(f"{where} is a file, not a directory")
        else:
            _check_folder(given, target, command, writes, kind, force, replaces_own, where)
    probe_writable(target, where)
    return given


def _check_folder(given: Path, target: Path, command: str, writes: str, kind: str | None, force: bool,
                  replaces_own: bool, where: str) -> None:
    manifest = read_manifest(target)  # a damaged one is named
    if writes == "files":
        if manifest is not None and manifest.kind != kind:
            raise VaswaniError(f"{where} is {_a(manifest.kind)} vaswani wrote; pick another directory")
        return
    if Path.cwd().resolve() == target or _inside(Path.cwd().resolve(), target):
        raise VaswaniError(f"{where} holds the current directory, which replacing it would delete; pick a new "
                           "directory")
    if not any(given.iterdir()):
        return
    if manifest is None:
        raise VaswaniError(f"{where} exists, is not empty and was not written by `vaswani {command}`; pick a new "
                           "directory (or empty this one)")
    if manifest.kind != kind or not _same_writer(manifest, kind, command):
        by = f" by `vaswani {manifest.writer}`" if manifest.writer else ""
        raise VaswaniError(f"{where} is {_a(manifest.kind)} written{by or ' by another command'}, not an earlier "
                           f"output of `vaswani {command}`; pick a new directory")
    held = _manifest_below(target)
    if held is not None:
        raise VaswaniError(f"{where} holds {held[0]}, {_a(held[1])} vaswani wrote, which replacing it would delete; "
                           "pick a new directory")
    if not force and not replaces_own:
        raise VaswaniError(f"{where} holds an earlier {kind} of `vaswani {command}`; pass --force to replace it")


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
        found.append((path.resolve(), str(path)))
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


def probe_writable(target: str | Path, where: str) -> None:
    """Prove the nearest existing folder at or above where ``target`` will be written can take a new file, leaving
    nothing behind (missing folders are made only when the output is written); an EnvironmentFault naming
    ``where`` otherwise."""
    target = Path(target).absolute()
    folder = target if target.is_dir() else target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise EnvironmentFault(f"{where}: {folder} is a file, not a directory")
    try:
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise EnvironmentFault(f"{where}: {folder} cannot be written ({error.strerror or error}); pick a directory "
                               "you can write to") from None


def standard_stream(name: Literal["stdin", "stdout"], instead: str) -> TextIO:
    """``sys.stdin`` or ``sys.stdout``; a one-line error saying what to do ``instead`` when the shell started us
    with it closed (``<&-``, ``>&-``), which Python shows as None."""
    stream = getattr(sys, name)
    if stream is None:
        label = "standard input" if name == "stdin" else "standard output"
        raise VaswaniError(f"{label} is closed; {instead}")
    return stream
