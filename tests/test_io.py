"""vaswani.io, the one way to write a file or folder whole: installing an assembled folder (replacing, keeping a
whole one another process wrote, or setting the old one aside under a name a reader still finds), the fsync rule,
links swapped by a rename, durable moves and the hashes."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import pytest

from vaswani import io


def _folder(path: Path, **files: str) -> Path:
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_an_installed_folder_replaces_the_old_one_and_leaves_nothing_beside_it(tmp_path) -> None:
    destination = _folder(tmp_path / "out", old="old")
    staging = io.staging_directory(destination)
    (staging / "new").write_text("new")
    assert staging.parent == tmp_path and staging.name.startswith(".out.")
    assert staging.stat().st_mode & 0o777 == io.default_directory_mode()  # not mkdtemp's private 0700

    assert io.install_directory(staging, destination) is True
    assert _contents(destination) == {"new": "new"}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_whole_folder_another_process_wrote_is_kept_and_a_damaged_one_replaced(tmp_path) -> None:
    destination = _folder(tmp_path / "out", marker="theirs")
    staging = io.staging_directory(destination)
    (staging / "marker").write_text("ours")
    assert io.install_directory(staging, destination, keep=lambda p: (p / "marker").is_file()) is False
    assert _contents(destination) == {"marker": "theirs"} and not staging.exists()

    (destination / "marker").unlink()  # damaged: keep() says no
    staging = io.staging_directory(destination)
    (staging / "marker").write_text("ours")
    assert io.install_directory(staging, destination, keep=lambda p: (p / "marker").is_file()) is True
    assert _contents(destination) == {"marker": "ours"}
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_named_aside_holds_the_old_folder_until_the_new_one_is_in_place(tmp_path, monkeypatch) -> None:
    destination = _folder(tmp_path / "step_2", version="1")
    aside = tmp_path / ".replaced-step_2"
    staging = io.staging_directory(destination, name=".tmp-step_2")
    (staging / "version").write_text("2")
    real_replace = os.replace

    def killed_after_the_first_rename(source, target):
        real_replace(source, target)
        raise KeyboardInterrupt  # stands in for a kill between the two renames

    monkeypatch.setattr(os, "replace", killed_after_the_first_rename)
    with pytest.raises(KeyboardInterrupt):
        io.install_directory(staging, destination, aside=aside)
    monkeypatch.setattr(os, "replace", real_replace)
    assert not destination.exists() and _contents(aside) == {"version": "1"}  # found by its name, whole

    staging = io.staging_directory(destination, name=".tmp-step_2")  # the next save: the leftover is cleared
    (staging / "version").write_text("2")
    io.install_directory(staging, destination, aside=aside)
    assert _contents(destination) == {"version": "2"} and sorted(p.name for p in tmp_path.iterdir()) == ["step_2"]


def test_every_file_is_fsynced_before_the_rename_and_the_directory_after(tmp_path, monkeypatch) -> None:
    order: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (order.append(f"fsync {os.readlink(f'/proc/self/fd/{fd}')}"),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (order.append(f"rename {b}"), real_replace(a, b))[1])
    destination = tmp_path / "out"
    staging = io.staging_directory(destination)
    (staging / "a").write_text("a")
    io.install_directory(staging, destination)
    assert order == [f"fsync {staging}/a", f"fsync {staging}", f"rename {destination}", f"fsync {tmp_path}"]

    order.clear()
    io.atomic_write_text(tmp_path / "file.txt", "text")
    assert [entry.split()[0] for entry in order] == ["fsync", "rename", "fsync"]
    assert order[1] == f"rename {tmp_path / 'file.txt'}" and order[2] == f"fsync {tmp_path}"


@pytest.mark.parametrize("number,raised", [(errno.EINVAL, False), (errno.EIO, True)], ids=["EINVAL", "EIO"])
def test_a_directory_that_cannot_be_fsynced_is_skipped_and_any_other_failure_raised(tmp_path, monkeypatch,
                                                                                     number: int,
                                                                                     raised: bool) -> None:
    def failing(fd):
        raise OSError(number, os.strerror(number))

    monkeypatch.setattr(os, "fsync", failing)
    if raised:
        with pytest.raises(OSError):
            io.fsync_directory(tmp_path)
    else:
        io.fsync_directory(tmp_path)


def test_a_link_is_swapped_by_one_rename(tmp_path) -> None:
    for name in ("step_1", "step_2"):
        (tmp_path / name).mkdir()
    io.atomic_symlink(tmp_path / "last", "step_1")
    io.atomic_symlink(tmp_path / "last", "step_2")
    assert os.readlink(tmp_path / "last") == "step_2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last", "step_1", "step_2"]


def test_a_move_takes_a_folder_whole(tmp_path) -> None:
    source = _folder(tmp_path / "run", config="yaml")
    (tmp_path / "aside").mkdir()
    io.move(source, tmp_path / "aside" / "run")
    assert not source.exists() and _contents(tmp_path / "aside" / "run") == {"config": "yaml"}


def test_the_hashes_are_sha256_of_the_bytes(tmp_path) -> None:
    (tmp_path / "a").write_bytes(b"alpha" * 300_000)  # past one read chunk
    (tmp_path / "b").write_bytes(b"beta")
    assert io.file_sha256(tmp_path / "a") == hashlib.sha256(b"alpha" * 300_000).hexdigest()
    assert io.bytes_sha256(b"beta") == hashlib.sha256(b"beta").hexdigest()
    key = io.files_sha256(tmp_path, ["a", "b"])
    (tmp_path / "b").write_bytes(b"betb")
    assert io.files_sha256(tmp_path, ["a", "b"]) != key
    (tmp_path / "b").write_bytes(b"beta")
    assert io.files_sha256(tmp_path, ["a", "b"]) == key and io.files_sha256(tmp_path, ["b", "a"]) != key


def test_a_recorded_corpus_file_counts_while_a_folder_made_from_it_holds_its_manifest(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "train.en"
    corpus.write_text("a\n")
    older, newer = tmp_path / "older", tmp_path / "newer"
    for folder in (older, newer):
        folder.mkdir()
        io.record_inputs([corpus], folder)
    assert io.prepared_from(corpus) is None  # neither holds a manifest yet: a prepare that never finished
    io.write_manifest(older, "prepared data", files=[])
    assert io.prepared_from(corpus) == older.resolve()
    io.write_manifest(newer, "prepared data", files=[])
    assert io.prepared_from(corpus) == newer.resolve()  # the most recent first
    assert io.prepared_from(tmp_path / "other.en") is None
    io.input_record(corpus.resolve()).write_text("{damaged")
    assert io.prepared_from(corpus) is None  # a damaged record protects nothing, and is no error


def test_a_cache_that_cannot_be_written_costs_the_record_not_the_work(tmp_path, monkeypatch, caplog) -> None:
    (tmp_path / "cache").write_text("a file where the cache folder would be")
    monkeypatch.setenv("VASWANI_CACHE", str(tmp_path / "cache"))
    io.record_inputs([tmp_path / "train.en"], tmp_path)
    assert "cannot record" in caplog.text and io.prepared_from(tmp_path / "train.en") is None
