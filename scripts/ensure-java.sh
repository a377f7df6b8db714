#!/usr/bin/env bash
# ZooKeeper and Spark need Java 17+. Say exactly what to install, and install it when we can.
set -u
if command -v java >/dev/null 2>&1 || [ -n "${JAVA_HOME:-}" ]; then
  exit 0
fi
echo "Java 17+ is required (ZooKeeper and Spark run on it) and was not found." >&2
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing openjdk-17-jre-headless with apt-get ..." >&2
  apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null && exit 0
fi
echo "Install it with: sudo apt-get install -y openjdk-17-jre-headless (Debian/Ubuntu)," >&2
echo "or any JDK 17+, and set JAVA_HOME. Then run the command again." >&2
exit 1
