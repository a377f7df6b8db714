"""The names of the schema registries' compatibility modes, without pyarrow: ``config_schemas`` declares the
``schema.compatibility`` topic key from them, and ``ads_spark.config`` (imported by every CLI command) must
not pay for importing pyarrow. What each mode means is ``compatibility.check``."""

from __future__ import annotations

from ads_spark.errors import InvalidConfigError

MODES = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")
DEFAULT_MODE = "BACKWARD"


def check_mode(mode: str) -> str:
    """``mode`` upper-cased, or InvalidConfigError listing the modes."""
    normalised = str(mode).upper()
    if normalised not in MODES:
        raise InvalidConfigError(f"schema.compatibility: {mode!r} is not one of {', '.join(MODES)}")
    return normalised
