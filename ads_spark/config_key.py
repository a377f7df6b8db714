"""One configuration key: its Kafka name, type, default, range and documentation.

Kept apart from ``config.py`` so that the modules declaring keys by feature (``config_security``,
``config_groups``, ``config_compaction``) and ``config.py``, which assembles and validates them, share one
definition without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    kind: str  # "int" | "double" | "bool" | "str" | "list" | "enum"
    default: Any
    doc: str
    min_value: int | None = None
    max_value: int | None = None
    choices: tuple[str, ...] = ()
    required: bool = False
    # Values users will try that are refused with a reason of their own (Kafka has them, ADS cannot); for an
    # int key, ("max", reason) gives the reason a value above max_value is refused.
    refused: tuple[tuple[str, str], ...] = ()
    # Other spellings of an enum choice, with the choice they stand for (stored and compared as the choice).
    aliases: tuple[tuple[str, str], ...] = ()


def _int(name, default, doc, min_value=None, max_value=None, required=False) -> ConfigKey:
    return ConfigKey(name, "int", default, doc, min_value, max_value, required=required)
