"""Writing files so that a crash never leaves half of one, and reading back what was written: every file and folder
the tool writes goes through here, and nothing else stages, renames or fsyncs. One concept per module: writing.py
(staging, fsync, rename), paths.py (paths as the user means them, and whether one can be written), streams.py
(the standard streams), manifests.py (what a folder is, by its checksummed files), reading.py (documents bounded
before they are parsed), outputs.py (no output reaches an input), recorded_inputs.py (the corpus files prepared
data was made from, which no output overwrites).

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
read-only mount) is one :class:`EnvironmentFault` naming the file, whichever library was writing
(:func:`write_faults_named`).
"""


from vaswani.io.manifests import (
    HASH_CHUNK,
    MANIFEST_FILE,
    MANIFEST_FORMAT,
    Manifest,
    bytes_sha256,
    directory_kind,
    directory_written_whole,
    file_sha256,
    files_sha256,
    files_written_together,
    read_manifest,
    verify_files,
    write_manifest,
)
from vaswani.io.outputs import (
    DESCENDANTS_SEARCHED,
    MAX_NAME_CHARS,
    SHARED_KINDS,
    OutputRule,
    check_name,
    check_output,
    repository_results,
)
from vaswani.io.paths import absolute_path, default_cache_dir, ensure_writable_directory, probe_writable
from vaswani.io.reading import (
    MAX_DOCUMENT_BYTES,
    MAX_NESTING,
    MAX_VALUES,
    NUMBER,
    JsonObject,
    JsonValue,
    document_shape_problem,
    json_shape_problem,
    parse_yaml,
    read_document,
    read_json,
    read_yaml,
)
from vaswani.io.recorded_inputs import INPUTS_FOLDER, input_record, prepared_from, record_inputs
from vaswani.io.streams import standard_stream
from vaswani.io.writing import (
    atomic_copy,
    atomic_symlink,
    atomic_write,
    atomic_write_bytes,
    atomic_write_figure,
    atomic_write_json,
    atomic_write_text,
    default_directory_mode,
    default_file_mode,
    fsync_directory,
    fsync_file,
    install_directory,
    move,
    staging_directory,
    staging_reported_as,
    write_fault,
    write_faults_named,
)

__all__ = [
    "absolute_path",
    "atomic_copy",
    "atomic_symlink",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_figure",
    "atomic_write_json",
    "atomic_write_text",
    "default_cache_dir",
    "default_directory_mode",
    "default_file_mode",
    "ensure_writable_directory",
    "fsync_directory",
    "fsync_file",
    "install_directory",
    "move",
    "staging_reported_as",
    "probe_writable",
    "staging_directory",
    "standard_stream",
    "write_fault",
    "write_faults_named",
    "HASH_CHUNK",
    "MANIFEST_FILE",
    "MANIFEST_FORMAT",
    "Manifest",
    "bytes_sha256",
    "directory_kind",
    "directory_written_whole",
    "file_sha256",
    "files_sha256",
    "files_written_together",
    "read_manifest",
    "verify_files",
    "write_manifest",
    "MAX_DOCUMENT_BYTES",
    "MAX_NESTING",
    "MAX_VALUES",
    "NUMBER",
    "JsonObject",
    "JsonValue",
    "document_shape_problem",
    "json_shape_problem",
    "read_document",
    "read_json",
    "read_yaml",
    "parse_yaml",
    "DESCENDANTS_SEARCHED",
    "SHARED_KINDS",
    "check_output",
    "OutputRule",
    "check_name",
    "MAX_NAME_CHARS",
    "repository_results",
    "INPUTS_FOLDER",
    "input_record",
    "prepared_from",
    "record_inputs",
]
