#!/usr/bin/env bash
# The fault-injection tests build their own test hosts (network namespaces, nftables rules): they need
# root, `ip` (iproute2) and `nft` (nftables). Install what is missing when we can; never fail the install
# for it: without them those tests skip and say why.
set -u
if [ "$(id -u)" != "0" ]; then
  exit 0
fi
missing=""
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
if [ -n "$missing" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing$missing for the fault-injection test hosts ..." >&2
  (apt-get update -qq && apt-get install -y -qq $missing >/dev/null) || \
    echo "could not install$missing: the network fault-injection tests will skip" >&2
fi
exit 0
