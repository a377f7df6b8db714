"""Topic keys of typed topics (issue #26): ``schema.type``, ``schema.compatibility`` and
``schema.statistics.columns``, and the rules that tie them to each other, to a topic's schema and to compaction.

Declared here and spliced into ``config.TOPIC_KEYS``; ``config.validate_topic_config`` calls
``check_topic_schema_config`` on every create and alter, the admin handlers call ``creation_config`` when a
topic is created and ``check_unchanged_type`` when its configs are altered. Each rule refuses with
InvalidConfigError naming the key, before anything is written:

* ``schema.type`` is ``kafka`` (the default: key/value records, every topic made before typed topics) or
  ``arrow`` (the topic's columns are a registered Arrow schema); it is fixed at creation, since the records
  already stored are of one kind or the other;
* ``schema.compatibility`` (the schema registries' modes, ``schemas.modes.MODES``) is the rule a new
  schema version must pass; on a Kafka-shaped topic it would do nothing, so it is refused there;
* compaction keeps the latest record per key, and typed records have no key yet: ``cleanup.policy`` with
  ``compact`` on a typed topic is refused, the broker's default ``log.cleanup.policy`` included;
* ``schema.statistics.columns`` (comma-separated user columns, default none) are the columns whose
  min/max/null count the leader keeps in each batch's header (``broker/log/partition_log.py``), for readers'
  filters to skip batches; refused on a Kafka-shaped topic, past ``STATISTICS_COLUMNS_MAX`` or naming a
  column twice, and, when set at create or alter, naming a column the latest schema does not have
  (``check_statistics_columns``; the admin handlers pass the schema). A column a later version drops simply
  gets no statistics;
* a typed topic is created with its schema (the ``schema`` field of create_topics), so
  ``schema.type=arrow`` without one is refused, and a schema with ``schema.type=kafka`` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from ads_spark.config_key import ConfigKey
from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import modes

if TYPE_CHECKING:  # every CLI command imports config (and this module): no pyarrow at import
    import pyarrow as pa

SCHEMA_TYPE = "schema.type"
SCHEMA_COMPATIBILITY = "schema.compatibility"
SCHEMA_STATISTICS_COLUMNS = "schema.statistics.columns"
# Each column adds ~100 bytes of JSON to every batch header and ~0.04 ms to every append; a handful is the use.
STATISTICS_COLUMNS_MAX = 32
KAFKA, ARROW = "kafka", "arrow"
SCHEMA_TYPES = (KAFKA, ARROW)

SCHEMA_TOPIC_KEYS: list[ConfigKey] = [
    ConfigKey(SCHEMA_TYPE, "enum", KAFKA, "kafka: key/value records; arrow: typed columns under a registered Arrow "
              "schema (given when the topic is created; fixed after)", choices=SCHEMA_TYPES),
    ConfigKey(SCHEMA_COMPATIBILITY, "enum", modes.DEFAULT_MODE, "the rule a new schema version of a typed "
              "topic must pass against the registered ones (the schema registries' modes)",
              choices=modes.MODES, aliases=tuple((mode.lower(), mode) for mode in modes.MODES)),
    ConfigKey(SCHEMA_STATISTICS_COLUMNS, "list", "", "comma-separated columns of a typed topic whose min, max and "
              f"null count each batch keeps, so fetches with filters skip batches (at most {STATISTICS_COLUMNS_MAX})"),
]


def schema_type(overrides: Mapping[str, Any]) -> str:
    return str(overrides.get(SCHEMA_TYPE) or KAFKA)


def check_topic_schema_config(parsed: Mapping[str, Any], defaults: Mapping[str, Any] | None = None) -> None:
    """The rules between keys, on a topic's parsed overrides (``defaults``: the broker's topic defaults, for a
    ``cleanup.policy`` the topic leaves to ``log.cleanup.policy``)."""
    typed = schema_type(parsed) == ARROW
    if SCHEMA_COMPATIBILITY in parsed and not typed:
        raise InvalidConfigError(f"'{SCHEMA_COMPATIBILITY}' applies to typed topics only ({SCHEMA_TYPE}={ARROW}); "
                                 f"a Kafka-shaped topic has no schema for it to check")
    columns = parsed.get(SCHEMA_STATISTICS_COLUMNS)
    if columns is not None and not typed:
        raise InvalidConfigError(f"'{SCHEMA_STATISTICS_COLUMNS}' applies to typed topics only ({SCHEMA_TYPE}={ARROW}): "
                                 f"a Kafka-shaped topic has no columns to keep statistics of")
    if columns and len(columns) > STATISTICS_COLUMNS_MAX:
        raise InvalidConfigError(f"'{SCHEMA_STATISTICS_COLUMNS}' names {len(columns)} columns, at most "
                                 f"{STATISTICS_COLUMNS_MAX} are allowed")
    if columns and len(set(columns)) != len(columns):
        raise InvalidConfigError(f"'{SCHEMA_STATISTICS_COLUMNS}'={','.join(columns)} names a column twice")
    policy = parsed.get("cleanup.policy", (defaults or {}).get("cleanup.policy"))
    if typed and policy and "compact" in str(policy):
        source = ("'cleanup.policy'" if "cleanup.policy" in parsed
                  else "'cleanup.policy' (the broker's log.cleanup.policy)")
        raise InvalidConfigError(f"{source}={policy} with {SCHEMA_TYPE}={ARROW}: compaction of typed topics is not "
                                 f"supported yet")


def check_statistics_columns(topic: str, overrides: Mapping[str, str], user_schema: pa.Schema) -> None:
    """Refuse ``schema.statistics.columns`` (as stored: comma-separated) naming columns ``user_schema`` (the
    topic's latest version, or the one it is created with) does not have; absent or empty: nothing to check."""
    columns = [name.strip() for name in str(overrides.get(SCHEMA_STATISTICS_COLUMNS) or "").split(",") if name.strip()]
    unknown = [name for name in columns if name not in user_schema.names]
    if unknown:
        raise InvalidConfigError(f"'{SCHEMA_STATISTICS_COLUMNS}' of topic '{topic}' names column(s) {unknown} that "
                                 f"its schema does not have (columns: {user_schema.names})")


def creation_config(config: Mapping[str, str], has_schema: bool) -> dict[str, str]:
    """A new topic's overrides: given a schema, ``schema.type`` is ``arrow`` (stated, refused when it says
    ``kafka``); ``schema.type=arrow`` without a schema is refused."""
    declared = config.get(SCHEMA_TYPE)
    if has_schema:
        if declared is not None and str(declared).strip() == KAFKA:  # another value: refused by its validation
            raise InvalidConfigError(f"'{SCHEMA_TYPE}'={declared} takes no schema: a topic created with a schema is "
                                     f"{SCHEMA_TYPE}={ARROW}")
        return dict(config) if declared is not None else {**config, SCHEMA_TYPE: ARROW}
    if declared is not None and str(declared).strip() == ARROW:
        raise InvalidConfigError(f"'{SCHEMA_TYPE}'={ARROW}: a typed topic needs a schema (create it with one)")
    return dict(config)


def check_unchanged_type(topic: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """Refuse an alteration that changes ``schema.type`` (set to another value, or deleted back to the default)."""
    if schema_type(before) != schema_type(after):
        raise InvalidConfigError(f"'{SCHEMA_TYPE}' of topic '{topic}' cannot change after creation "
                                 f"({schema_type(before)} -> {schema_type(after)})")
