#!/usr/bin/env bash
# The Kafka-listener scenarios (tests/integration/test_kafka_clients.py) drive kcat, Kafka's command-line
# client, from the distribution (Debian package `kcat`). Install it when missing and we can; never fail
# the install for it: without it the kcat scenarios skip and say why.
set -u
command -v kcat >/dev/null 2>&1 && exit 0
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "kcat is missing (apt-get install kcat): the kcat scenarios will skip" >&2
  exit 0
fi
echo "Installing kcat for the Kafka client scenarios ..." >&2
(apt-get update -qq && apt-get install -y -qq kcat >/dev/null) || \
  echo "could not install kcat: the kcat scenarios will skip" >&2
exit 0
