"""A safetensors header read without numpy or torch says what safetensors itself reads from the file, and refuses
what safetensors refuses: a file cut anywhere, bytes added, a header that is no JSON object or does not add up."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from vaswani.config import ModelConfig
from vaswani.model.safetensors_header import read_header
from vaswani.model.serialization import WEIGHTS_FILE, save_model, weights_metadata
from vaswani.model.transformer import Transformer


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("checkpoint")
    save_model(Transformer(ModelConfig.preset("tiny", vocab_size=50)), directory)
    return directory / WEIGHTS_FILE


def safetensors_reads(file: Path) -> tuple[dict, dict] | None:
    """(metadata, shapes) as safetensors reads them, or None where it refuses the file."""
    try:
        with safe_open(str(file), framework="pt") as handle:
            shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
            return dict(handle.metadata() or {}), shapes
    except Exception:  # safetensors' own error type
        return None


def test_the_header_is_what_safetensors_reads(weights: Path, tmp_path: Path) -> None:
    header = read_header(weights)
    assert (header.metadata, header.shapes) == safetensors_reads(weights)
    assert weights_metadata(weights) == header.metadata and "vaswani.model" in header.metadata
    plain = tmp_path / "plain.safetensors"  # no metadata; dtypes of every width; a scalar and an empty tensor
    save_file({"a": torch.zeros(3, 2, dtype=torch.bfloat16), "b": torch.ones(5, dtype=torch.int64),
               "c": torch.tensor(1.0), "d": torch.zeros(0, 4), "e": torch.zeros(7, dtype=torch.bool)}, plain)
    assert (read_header(plain).metadata, read_header(plain).shapes) == safetensors_reads(plain)
    assert sum(math.prod(shape) for shape in read_header(plain).shapes.values()) == 6 + 5 + 1 + 0 + 7


def test_a_file_cut_anywhere_or_grown_is_refused_as_safetensors_refuses_it(weights: Path, tmp_path: Path) -> None:
    data = weights.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    damaged = tmp_path / "damaged.safetensors"
    for size in (0, 5, 8, 100, header_end - 1, header_end, header_end + 3, len(data) - 1):
        damaged.write_bytes(data[:size])
        assert safetensors_reads(damaged) is None
        with pytest.raises(ValueError):
            read_header(damaged)
    damaged.write_bytes(data + b"\0")
    assert safetensors_reads(damaged) is None
    with pytest.raises(ValueError, match="the file holds"):
        read_header(damaged)


@pytest.mark.parametrize("header", [
    b"[1, 2]", b"not json", b'{"__metadata__": {"k": 1}}', b'{"t": {"dtype": "F32", "shape": [2], '
    b'"data_offsets": [0, 4]}}', b'{"t": {"dtype": "F99", "shape": [1], "data_offsets": [0, 4]}}',
    b'{"t": {"dtype": ["F32"], "shape": [1], "data_offsets": [0, 4]}}',
    b'{"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}', b'{"t": 3}',
])
def test_a_header_that_does_not_add_up_is_refused(header: bytes, tmp_path: Path) -> None:
    file = tmp_path / "bad.safetensors"
    file.write_bytes(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(ValueError):
        read_header(file)


def test_a_header_length_past_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    file = tmp_path / "huge.safetensors"
    file.write_bytes((10**12).to_bytes(8, "little") + json.dumps({}).encode())
    with pytest.raises(ValueError, match="a header of 1,000,000,000,000 bytes"):
        read_header(file)
