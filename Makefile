# The two commands of the README. Both create .venv, install ADS with its
# dependencies (pyspark 4.3 brings the ZooKeeper jars; Java 17 must be present,
# scripts/ensure-java.sh installs it where it can), then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Three pytest-xdist workers, whole modules per worker; the Spark modules and the chaos modules are one lane
# each, run in turn on one worker (tests/conftest.py). PYTEST_WORKERS= runs serially.
PYTEST_WORKERS ?= -n 3

.PHONY: demo test install clean

# the C sources too: pip install -e compiles them, so an edit of one must reinstall
$(STAMP): pyproject.toml $(wildcard ads_spark/*/*.c)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,bench]'
	@bash scripts/ensure-java.sh
	@bash scripts/ensure-netns-tools.sh
	@bash scripts/ensure-kafka-tools.sh
	@# The Kafka clients' own suites (tests/integration/test_kafka_suites.py): kafka-python's source archive
	@# and venv (~20 s), librdkafka's tests from Debian's source package (~75 s). Not fatal: without them
	@# those two tests skip, saying which command prepares them.
	@bash scripts/kafka-suites/kafka_python_suite.sh prepare || echo "kafka-python's suite was not prepared" >&2
	@bash scripts/kafka-suites/librdkafka_suite.sh build || echo "librdkafka's test suite was not built" >&2
	@touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) $(PY) jobs/quickstart.py

test: $(STAMP)
	PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider $(PYTEST_WORKERS) $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
