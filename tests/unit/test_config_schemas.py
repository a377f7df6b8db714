"""The topic keys of typed topics and their rules (config_schemas.py), as config.validate_topic_config and the
admin handlers apply them: values named with the allowed ones, schema.compatibility only on typed topics,
no compaction of typed topics (the broker's default policy included), schema.type fixed after creation and
implied by a schema at creation."""

from __future__ import annotations

import sys

import pytest

from ads_spark.config import TOPIC_KEYS, BrokerConfig, effective_topic_config, validate_topic_config
from ads_spark.config_schemas import check_unchanged_type, creation_config
from ads_spark.errors import InvalidConfigError
from ads_spark.schemas import compatibility


def test_defaults_leave_every_topic_kafka_shaped_with_backward_compatibility():
    defaults = BrokerConfig({"broker.id": 1, "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/nonexistent"}
                            ).topic_defaults()
    effective = effective_topic_config(defaults, {})
    assert effective["schema.type"] == "kafka" and effective["schema.compatibility"] == compatibility.DEFAULT_MODE
    assert TOPIC_KEYS["schema.compatibility"].choices == compatibility.MODES


def test_values_are_checked_and_stored_in_one_spelling():
    assert validate_topic_config({"schema.type": "arrow", "schema.compatibility": "full_transitive"}, 1) == {
        "schema.type": "arrow", "schema.compatibility": "FULL_TRANSITIVE"}
    with pytest.raises(InvalidConfigError, match="invalid value 'avro' for 'schema.type': must be one of kafka, arrow"):
        validate_topic_config({"schema.type": "avro"}, 1)
    with pytest.raises(InvalidConfigError, match="'schema.compatibility': must be one of BACKWARD, .*NONE"):
        validate_topic_config({"schema.type": "arrow", "schema.compatibility": "LATEST"}, 1)


def test_schema_compatibility_on_a_kafka_shaped_topic_is_refused_naming_the_key():
    for overrides in ({"schema.compatibility": "FULL"}, {"schema.type": "kafka", "schema.compatibility": "NONE"}):
        with pytest.raises(InvalidConfigError, match="'schema.compatibility' applies to typed topics only"):
            validate_topic_config(overrides, 1)


@pytest.mark.parametrize("policy", ["compact", "compact,delete", "delete,compact"])
def test_compaction_of_a_typed_topic_is_refused_the_brokers_default_policy_included(policy):
    with pytest.raises(InvalidConfigError, match="'cleanup.policy'=compact.* compaction of typed topics is not"):
        validate_topic_config({"schema.type": "arrow", "cleanup.policy": policy}, 1)
    with pytest.raises(InvalidConfigError, match="the broker's log.cleanup.policy"):
        validate_topic_config({"schema.type": "arrow"}, 1, {"cleanup.policy": policy})
    assert validate_topic_config({"cleanup.policy": policy}, 1)  # a Kafka-shaped topic compacts as before
    assert validate_topic_config({"schema.type": "arrow"}, 1, {"cleanup.policy": "delete"}) == {"schema.type": "arrow"}


def test_creation_implies_arrow_with_a_schema_and_needs_one_for_arrow():
    assert creation_config({"retention.ms": "5"}, has_schema=True) == {"retention.ms": "5", "schema.type": "arrow"}
    assert creation_config({"schema.type": "arrow"}, has_schema=True) == {"schema.type": "arrow"}
    assert creation_config({}, has_schema=False) == {}
    with pytest.raises(InvalidConfigError, match="'schema.type'=kafka takes no schema"):
        creation_config({"schema.type": "kafka"}, has_schema=True)
    with pytest.raises(InvalidConfigError, match="'schema.type'=arrow: a typed topic needs a schema"):
        creation_config({"schema.type": "arrow"}, has_schema=False)
    # a value that is neither is left to the key's own check, which names the allowed values
    with pytest.raises(InvalidConfigError, match="must be one of kafka, arrow"):
        validate_topic_config(creation_config({"schema.type": "json"}, has_schema=True), 1)


def test_schema_type_cannot_change_after_creation():
    check_unchanged_type("t", {"schema.type": "arrow"}, {"schema.type": "arrow", "retention.ms": "5"})
    check_unchanged_type("t", {}, {"schema.type": "kafka"})  # stating the default changes nothing
    for before, after in (({"schema.type": "arrow"}, {}), ({}, {"schema.type": "arrow"}),
                          ({"schema.type": "arrow"}, {"schema.type": "kafka"})):
        with pytest.raises(InvalidConfigError, match="'schema.type' of topic 't' cannot change after creation"):
            check_unchanged_type("t", before, after)


def test_config_does_not_import_pyarrow():
    """Every CLI command imports ads_spark.config; the modes it declares come from schemas/modes.py."""
    import subprocess
    found = subprocess.run([sys.executable, "-c", "import sys, ads_spark.config; print('pyarrow' in sys.modules)"],
                           capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "False"
