#!/usr/bin/env bash
# Start, stop or query one redis-server on 127.0.0.1, with AOF on, its data and log under DIR.
#
#   redis.sh start  DIR PORT [redis-server options...]   (e.g. --appendfsync always)
#   redis.sh stop   DIR PORT
#   redis.sh status DIR PORT   -> "running PID" (exit 0) or "stopped" (exit 3)
#
# start is idempotent: a server already running from DIR is left alone.
set -euo pipefail

usage() { echo "usage: redis.sh start|stop|status DIR PORT [redis-server options...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
cmd=$1 dir=$2 port=$3
shift 3
pidfile="$dir/redis.pid"
logfile="$dir/redis.log"

# A killed server can linger as a zombie until init reaps it: that one is not alive.
pid_alive() {
  [ -f "$pidfile" ] || return 1
  local state
  state=$(ps -o stat= -p "$(cat "$pidfile")" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}
answers() { [ "$(redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null)" = "PONG" ]; }

start() {
  if pid_alive; then
    echo "running $(cat "$pidfile")"
    return 0
  fi
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "redis-server not found on PATH: install it (Debian: apt-get install -y redis-server)" >&2
    exit 127
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  pidfile="$dir/redis.pid" logfile="$dir/redis.log"
  cat >"$dir/redis.conf" <<EOF
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
pidfile $pidfile
logfile $logfile
dir $dir
save ""
appendonly yes
appendfsync everysec
EOF
  redis-server "$dir/redis.conf" "$@" >/dev/null
  for _ in $(seq 100); do
    if answers; then
      echo "running $(cat "$pidfile")"
      return 0
    fi
    sleep 0.1
  done
  echo "redis on 127.0.0.1:$port did not answer within 10 s; last log lines:" >&2
  tail -n 20 "$logfile" >&2 || true
  exit 1
}

stop() {
  if ! pid_alive; then
    rm -f "$pidfile"
    echo "stopped"
    return 0
  fi
  local pid
  pid=$(cat "$pidfile")
  kill -TERM "$pid"  # redis fsyncs the AOF and exits on SIGTERM
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "stopped"; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "stopped (killed after 10 s)"
}

case "$cmd" in
  start) start "$@" ;;
  stop) stop ;;
  status) if pid_alive && answers; then echo "running $(cat "$pidfile")"; else echo "stopped"; exit 3; fi ;;
  *) usage ;;
esac
