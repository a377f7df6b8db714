#!/usr/bin/env bash
# Installs the peer systems that `python -m benchmarks.compare` measures ADS against:
# the Debian packages nats-server and rabbitmq-server, and their Python clients
# (nats-py, rstream, the `peers` extra) into the project venv.
#
#     sudo bash benchmarks/peers/install.sh        # from the project root, as root
#
# The packages' own services are kept from starting (policy-rc.d answers 101):
# the benchmark starts its own 3-node clusters on 127.0.0.1 and removes them after.
set -euo pipefail

cd "$(dirname "$0")/../.."
PYTHON="${PYTHON:-.venv/bin/python}"

created_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    created_policy=1
fi
cleanup() {
    if [ "$created_policy" = 1 ]; then rm -f /usr/sbin/policy-rc.d; fi
}
trap cleanup EXIT

apt-get update -q
DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nats-server rabbitmq-server

"$PYTHON" -m pip install -q nats-py rstream

# A package's post-install may still have launched epmd (it is socket-activated on some systems).
if command -v epmd >/dev/null && pgrep -x epmd >/dev/null; then
    echo "note: an epmd is running; benchmarks/peers/rabbitmq.py starts and stops its own on another port" >&2
fi
echo "peers installed: $(command -v nats-server) $(command -v rabbitmq-server)"
