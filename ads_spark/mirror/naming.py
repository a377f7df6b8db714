"""How mirrored topics are named and which topics (and records) a mirror must leave alone. Pure.

Owns the replication policy of ``jobs/mirror.py``, MirrorMaker 2's in our terms:

* a topic ``orders`` of the cluster aliased ``east`` becomes ``east.orders`` on the target
  (``prefix`` naming, the default), or keeps its name (``identity`` naming, for a one-way
  copy or a migration);
* the offset checkpoints of the flow ``east -> target`` live in ``east.checkpoints.internal``
  on the target;
* no loops when two clusters mirror each other: a topic whose name starts with
  ``<target alias>.`` holds records that came from the target and is never sent back, and
  internal topics (``*.internal``, ``__*``) are never mirrored. Identity naming cannot tell
  a topic's origin from its name, so every mirrored record also carries the header
  ``ads.mirror.path`` (the aliases it was mirrored from, comma separated) and a record whose
  path names the target is dropped.

Everything here is a function of names; nothing opens a connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ads_spark.errors import InvalidConfigError

NAMING_CHOICES = ("prefix", "identity")
SEPARATOR = "."
CHECKPOINTS_SUFFIX = "checkpoints.internal"
PATH_HEADER = "ads.mirror.path"  # provenance: aliases a record was mirrored from, in order
PATH_DELIMITER = ","
_ALIAS = re.compile(r"[A-Za-z0-9_-]+")  # no '.', so '<alias>.' is an unambiguous prefix
_INTERNAL = re.compile(r"(__.*)|(.*\.internal)")


def check_alias(alias: str, option: str) -> str:
    """``alias`` when it is a usable cluster alias; InvalidConfigError naming ``option`` otherwise."""
    if not isinstance(alias, str) or not _ALIAS.fullmatch(alias):
        raise InvalidConfigError(f"{option} must be a cluster alias of letters, digits, '_' or '-' "
                                 f"(no '.'), got {alias!r}")
    return alias


@dataclass(frozen=True)
class MirrorPolicy:
    """One replication flow ``source_alias -> target_alias``: naming and what is mirrored."""

    source_alias: str
    target_alias: str
    naming: str = "prefix"
    pattern: str = ".*"  # regular expression matched against the whole source topic name
    exclude: str = ""  # regular expression; matching topics are never mirrored

    def __post_init__(self) -> None:
        check_alias(self.source_alias, "source alias")
        check_alias(self.target_alias, "target alias")
        if self.source_alias == self.target_alias:
            raise InvalidConfigError(f"source and target aliases are both {self.source_alias!r}; "
                                     f"a flow needs two different clusters")
        if self.naming not in NAMING_CHOICES:
            raise InvalidConfigError(f"naming must be one of {', '.join(NAMING_CHOICES)}, got {self.naming!r}")
        for name, value in (("pattern", self.pattern), ("exclude", self.exclude)):
            try:
                re.compile(value)
            except re.error as exc:
                raise InvalidConfigError(f"{name} {value!r} is not a valid regular expression: {exc}") from None

    def remote_topic(self, topic: str) -> str:
        """The target's name for the source topic ``topic``."""
        return topic if self.naming == "identity" else f"{self.source_alias}{SEPARATOR}{topic}"

    def source_topic(self, remote: str) -> str:
        """The source topic a target topic mirrors (inverse of ``remote_topic``)."""
        if self.naming == "identity":
            return remote
        prefix = self.source_alias + SEPARATOR
        if not remote.startswith(prefix):
            raise InvalidConfigError(f"topic {remote!r} is not a mirror of cluster {self.source_alias!r} "
                                     f"(its name does not start with {prefix!r})")
        return remote[len(prefix):]

    @property
    def checkpoint_topic(self) -> str:
        """The target topic holding this flow's source -> target offset checkpoints."""
        return checkpoint_topic(self.source_alias)

    def should_mirror(self, topic: str) -> bool:
        """Whether the source topic ``topic`` is mirrored: matched, not excluded, not internal, no loop."""
        if _INTERNAL.fullmatch(topic):
            return False
        if topic.startswith(self.target_alias + SEPARATOR):  # came from the target: sending it back loops
            return False
        if self.exclude and re.fullmatch(self.exclude, topic):
            return False
        return re.fullmatch(self.pattern, topic) is not None

    def mirrored_topics(self, source_topics: list[str]) -> list[str]:
        return sorted(t for t in source_topics if self.should_mirror(t))

    def subscribe_pattern(self) -> str:
        """A ``subscribePattern`` for the source that matches exactly the names ``should_mirror`` accepts
        (the source applies it to the topics that exist at every micro-batch)."""
        parts = [f"(?!{re.escape(self.target_alias + SEPARATOR)})", "(?!__)", "(?!.*\\.internal$)"]
        if self.exclude:
            parts.append(f"(?!(?:{self.exclude})$)")
        return "".join(parts) + f"(?:{self.pattern})"


def checkpoint_topic(source_alias: str) -> str:
    return f"{source_alias}{SEPARATOR}{CHECKPOINTS_SUFFIX}"


def path_after_mirror(path: str | None, source_alias: str) -> str:
    """The ``ads.mirror.path`` value of a record after it is mirrored from ``source_alias``."""
    return f"{path}{PATH_DELIMITER}{source_alias}" if path else source_alias


def loops_back(path: str | None, target_alias: str) -> bool:
    """Whether a record with this path already passed through the target (mirroring it again loops)."""
    return bool(path) and target_alias in path.split(PATH_DELIMITER)
