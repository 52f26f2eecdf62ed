"""User-facing errors: raised for bad input (a file, a line, a setting) and printed by the CLI as one clear line.

The command line exits with ``exit_code``: 2 for a problem with what the user gave (a setting, a file's content),
1 for an environment fault the input cannot be blamed for (no CUDA device, a read-only directory, a full disk).
Any other exception is a bug and keeps its traceback.
"""

import re
from typing import Mapping

# How an allocation that failed reads: torch.OutOfMemoryError's "out of memory" on a GPU; on a CPU torch's
# allocator raises a RuntimeError naming itself or the system call's error.
_ALLOCATION_FAILED = re.compile(r"out of memory|can't allocate memory|DefaultCPUAllocator|not enough memory|"
                                r"Cannot allocate memory", re.IGNORECASE)


def is_out_of_memory(error: BaseException) -> bool:
    """Did ``error`` come from an allocation that failed (GPU or host), rather than from a bug?"""
    return isinstance(error, MemoryError) or _on_the_device(error) or (
        isinstance(error, RuntimeError) and bool(_ALLOCATION_FAILED.search(str(error))))


def _on_the_device(error: BaseException) -> bool:
    return type(error).__name__ == "OutOfMemoryError"  # torch.OutOfMemoryError: CUDA's (or another accelerator's)


# A setting named in a message, in backquotes: `engine`, `search.length_norm`.
_MARKED_SETTING = re.compile(r"`([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)?)`")


def name_settings(message: str, names: Mapping[str, str]) -> str:
    """``message`` with each setting it names in backquotes spelled as ``names`` spells it (the command line: the
    flag that sets it); a setting ``names`` lacks keeps its backquotes."""
    return _MARKED_SETTING.sub(lambda match: names.get(match.group(1), match.group(0)), message)


class VaswaniError(Exception):
    """A problem with the user's input; the message names the file/line/field and what to do. It names a setting
    by its field in backquotes (`` `engine` ``), which a front end may spell its own way (:func:`name_settings`)."""

    exit_code = 2


class ConfigError(VaswaniError, ValueError):
    """A setting that does not exist or has an invalid value. ``field`` is ``section.name`` when one is to blame."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class VaswaniWarning(UserWarning):
    """What a user should know that does not stop the work, e.g. which engine ``auto`` took and why; it names
    settings as errors do."""


class DataError(VaswaniError, ValueError):
    """Bad corpus/CSV/cache data: the message names the file, the line and the problem."""


class EnvironmentFault(VaswaniError):
    """The machine, not the input: a missing device, a directory that cannot be written, a full disk."""

    exit_code = 1


def out_of_memory(error: BaseException, lower: str) -> EnvironmentFault:
    """The one line an allocation that failed (:func:`is_out_of_memory`) is reported with: which memory ran out,
    how much was asked for when the allocator said, and ``lower``, the settings that size what was allocated."""
    where = "GPU" if _on_the_device(error) else "host"
    match = re.search(r"allocate (?:memory: you tried to allocate )?(\d+) bytes", str(error)) or \
        re.search(r"Tried to allocate ([\d.]+ [GMK]iB)", str(error))
    amount = match.group(1) if match else None
    requested = "" if amount is None else (f" ({int(amount) / 1e9:,.1f} GB requested)" if amount.isdigit()
                                           else f" ({amount} requested)")
    return EnvironmentFault(f"out of {where} memory{requested}; lower {lower}")
