"""What a safetensors file says of itself, read from its header alone: no tensor is loaded and neither numpy nor
torch is imported (safetensors' own reader imports one of them, a tenth of a second of a translation's start-up).

The format: 8 bytes, the header's length N (little-endian); N bytes of JSON, an object naming each tensor's
dtype, shape and ``data_offsets`` [begin, end) in the data after the header, and an optional ``__metadata__``
object of strings; then the data. A header is checked as safetensors checks it: bounded in size, the tensors'
bytes laid end to end from the first byte of the data to the file's last, each as many as its dtype and shape
take. A file cut short or not safetensors at all is a ValueError saying which rule it breaks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

HEADER_LIMIT_BYTES = 100_000_000  # safetensors' own bound on a header
LENGTH_BYTES = 8
METADATA_KEY = "__metadata__"
DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
               "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8}


@dataclass(frozen=True)
class SafetensorsHeader:
    """A safetensors file's metadata (strings) and each tensor's shape, by name."""

    metadata: dict[str, str]
    shapes: dict[str, tuple[int, ...]]


def read_header(file: str | Path) -> SafetensorsHeader:
    """The header of safetensors ``file``; a file that is not one, or is cut short, is a ValueError (a missing or
    unreadable one the OSError of opening it)."""
    with open(file, "rb") as handle:
        size = handle.seek(0, 2)
        handle.seek(0)
        length = int.from_bytes(handle.read(LENGTH_BYTES), "little")
        if size < LENGTH_BYTES or length > min(HEADER_LIMIT_BYTES, size - LENGTH_BYTES):
            raise ValueError(f"a header of {length:,} bytes in a file of {size:,}")
        raw = handle.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise ValueError("its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not a JSON object")
    metadata = header.pop(METADATA_KEY, None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"its {METADATA_KEY} is not an object of strings")
    spans = sorted((_span(name, entry), name) for name, entry in header.items())
    end = 0
    for (begin, stop), name in spans:
        if begin != end:
            raise ValueError(f"tensor {name!r} starts at byte {begin:,} of the data, not {end:,}")
        end = stop
    if end != size - LENGTH_BYTES - length:
        raise ValueError(f"its tensors take {end:,} bytes, the file holds {size - LENGTH_BYTES - length:,}")
    return SafetensorsHeader(metadata, {name: tuple(entry["shape"]) for name, entry in header.items()})


def _span(name: str, entry: object) -> tuple[int, int]:
    """Tensor ``name``'s [begin, end) in the data, once its entry is found whole and consistent."""
    if not isinstance(entry, dict):
        raise ValueError(f"tensor {name!r} is described by no object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in DTYPE_BYTES:
        raise ValueError(f"tensor {name!r} has no known dtype ({dtype!r})")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise ValueError(f"tensor {name!r} has no valid shape ({shape!r})")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(type(n) is int and n >= 0 for n in offsets)):
        raise ValueError(f"tensor {name!r} has no valid data_offsets ({offsets!r})")
    begin, end = offsets
    if end - begin != math.prod(shape) * DTYPE_BYTES[dtype]:
        raise ValueError(f"tensor {name!r} of shape {shape} in {dtype} does not take bytes {begin:,} to {end:,}")
    return begin, end


__all__ = ["HEADER_LIMIT_BYTES", "SafetensorsHeader", "read_header"]
