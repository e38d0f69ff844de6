#!/usr/bin/env bash
# Install what EMQ needs from the OS packages when it is missing: redis-server (with redis-cli),
# ZooKeeper, a Java runtime for it, Python's venv module, chromium (the console's browser
# tests drive it headless) and PostgreSQL's server (the transactions' database test starts a
# throwaway one: tests/postgres.py). Does nothing when all are present.
# Debian/Ubuntu only; anywhere else it names what to install and fails.
set -euo pipefail

need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || need+=(redis-tools)
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need+=(postgresql)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "missing: ${need[*]}; install them with your OS package manager" >&2
  exit 1
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing: ${need[*]}; install them with: sudo apt-get install -y ${need[*]}" >&2
  exit 1
fi
echo "installing from the OS packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
