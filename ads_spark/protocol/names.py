"""Kafka's rule for topic names, in the one place every layer takes it from.

A topic name becomes a directory name under ``log.dirs`` (``<topic>-<partition>``),
a znode path component (``/brokers/topics/<topic>``) and a word in the
checkpoint files (``topic partition offset``). Kafka's rule -- 1 to 249
characters from ``[a-zA-Z0-9._-]``, and not ``.`` or ``..`` -- keeps a name
safe in all three: no separator, no whitespace, no traversal, nothing that
cannot be encoded. The request validation, the log manager, the checkpoint
writer and the ZooKeeper adapter all check names with this module, so the rule
cannot drift between them.
"""

from __future__ import annotations

import re
from typing import Any

from ads_spark.errors import InvalidTopicError

TOPIC_NAME_CHARS_MAX = 249
# \A and \Z, not ^ and $: "$" also matches before a final newline, which would let "orders\n" through.
TOPIC_NAME_RE = re.compile(r"\A[a-zA-Z0-9._-]{1,%d}\Z" % TOPIC_NAME_CHARS_MAX)
TOPIC_NAME_RULE = (f"1-{TOPIC_NAME_CHARS_MAX} characters from [a-zA-Z0-9._-], and not '.' or '..'")
# A refused name is quoted this far: a 1 MiB name must not make a 1 MiB error message or log line.
SHOWN_CHARS_MAX = 80


def shown(value: Any, limit_chars: int = SHOWN_CHARS_MAX) -> str:
    """``repr(value)`` cut to about ``limit_chars``, saying how long it was when cut."""
    text = repr(value)
    if len(text) <= limit_chars:
        return text
    return f"{text[:limit_chars]}... ({len(text)} chars)"


def is_valid_topic_name(name: Any) -> bool:
    """True when ``name`` is a str that follows Kafka's topic-name rule."""
    return isinstance(name, str) and name not in (".", "..") and TOPIC_NAME_RE.match(name) is not None


def validate_topic_name(name: Any, where: str | None = None) -> str:
    """``name`` if it is a valid topic name; otherwise ``InvalidTopicError`` naming it and the rule.

    ``where`` names the field the name came from (``partitions[3].topic``) for the message.
    """
    if is_valid_topic_name(name):
        return name
    prefix = f"{where}: " if where else ""
    if not isinstance(name, str):
        raise InvalidTopicError(f"{prefix}a topic name must be a string, not {type(name).__name__} {shown(name)}")
    raise InvalidTopicError(f"{prefix}invalid topic name {shown(name)}: use {TOPIC_NAME_RULE}")
