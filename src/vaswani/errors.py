"""User-facing errors: raised for bad input (a file, a line, a setting) and printed by the CLI as one clear line."""


class VaswaniError(Exception):
    """A problem with the user's input; the message names the file/line/field and what to do."""


class ConfigError(VaswaniError, ValueError):
    """A setting that does not exist or has an invalid value."""


class DataError(VaswaniError, ValueError):
    """Bad corpus/CSV/cache data: the message names the file, the line and the problem."""
