"""The consumer's numeric settings: a bad value is an InvalidConfigError naming the key, raised before any
connection is made (no broker needed)."""

import pytest

from ads_spark.client.consumer import Consumer
from ads_spark.errors import InvalidConfigError

BOOTSTRAP = "127.0.0.1:1"  # never dialled: settings are checked when the consumer is built


@pytest.mark.parametrize("key", ["max.poll.records", "fetch.max.bytes", "max.partition.fetch.bytes",
                                 "fetch.max.wait.ms", "default.api.timeout.ms"])
def test_non_numeric_setting_names_the_key(key):
    with pytest.raises(InvalidConfigError, match=f"'{key}'.*must be an integer"):
        Consumer({"bootstrap.servers": BOOTSTRAP, key: "abc"})


@pytest.mark.parametrize("value", [0, "-3"])
def test_max_poll_records_below_one_is_refused(value):
    with pytest.raises(InvalidConfigError, match="'max.poll.records'.*must be >= 1"):
        Consumer({"bootstrap.servers": BOOTSTRAP, "max.poll.records": value})


def test_numeric_text_is_accepted():
    consumer = Consumer({"bootstrap.servers": BOOTSTRAP, "max.poll.records": " 7 ", "fetch.max.wait.ms": "0"})
    try:
        assert consumer.max_poll_records == 7
        assert consumer.fetch_max_wait_ms == 0
    finally:
        consumer.close()
