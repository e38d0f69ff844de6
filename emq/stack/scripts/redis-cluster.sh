#!/usr/bin/env bash
# Start, stop or query a 3-master Redis Cluster on 127.0.0.1 (AOF on), data under DIR.
#
#   redis-cluster.sh start  DIR BASEPORT [REPLICAS]   nodes on BASEPORT, BASEPORT+1, ...
#   redis-cluster.sh stop   DIR BASEPORT   kills the nodes and removes their data (DIR/node-*)
#   redis-cluster.sh status DIR BASEPORT   -> "running PID PID PID" (exit 0) or "stopped" (exit 3)
#
# REPLICAS (0 or 1, default 0; remembered in DIR for stop and status): with 1, each master has a
# replica (6 nodes, BASEPORT..BASEPORT+5), so killing a master fails over to its replica.
#
# Each node's cluster bus listens on its port + 10000, so BASEPORT+2+10000 must stay below 65536.
# start is idempotent: nodes already running from DIR are left alone, a cluster that was created
# already is not created again, and it returns once every node reports cluster_state:ok.
set -euo pipefail

usage() { echo "usage: redis-cluster.sh start|stop|status DIR BASEPORT [REPLICAS]" >&2; exit 2; }
[ $# -eq 3 ] || [ $# -eq 4 ] || usage
cmd=$1 dir=$2 base=$3 replicas=${4:-}
[[ "$base" =~ ^[0-9]+$ ]] || usage
if [ -z "$replicas" ] && [ -f "$dir/replicas" ]; then replicas=$(cat "$dir/replicas"); fi
replicas=${replicas:-0}
[[ "$replicas" =~ ^[01]$ ]] || usage
nodes=$((3 * (replicas + 1)))
if [ "$base" -lt 1024 ] || [ $((base + nodes - 1 + 10000)) -ge 65536 ]; then
  echo "BASEPORT must be 1024-$((65535 - 10000 - nodes + 1)): the cluster bus uses port+10000" >&2
  exit 2
fi
ports=()
for ((i = 0; i < nodes; i++)); do ports+=($((base + i))); done

node_dir() { echo "$dir/node-$1"; }
pidfile() { echo "$(node_dir "$1")/redis.pid"; }
# A node killed a moment ago may linger as a zombie until reaped: that is not alive.
pid_alive() {
  local f pid
  f=$(pidfile "$1")
  [ -f "$f" ] && pid=$(cat "$f") && kill -0 "$pid" 2>/dev/null &&
    [[ "$(ps -o stat= -p "$pid" 2>/dev/null)" != Z* ]]
}
answers() { [ "$(redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null)" = "PONG" ]; }
cluster_ok() { redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | grep -q '^cluster_state:ok'; }
known_nodes() {
  redis-cli -h 127.0.0.1 -p "$1" cluster info 2>/dev/null | sed -n 's/^cluster_known_nodes:\([0-9]*\).*/\1/p'
}
pids() { local p out=""; for p in "${ports[@]}"; do out="$out $(cat "$(pidfile "$p")")"; done; echo "$out"; }
# A replica counts once it is in sync (else killing its master right away has nothing to fail
# over to); a master says "role:master".
in_sync() {
  redis-cli -h 127.0.0.1 -p "$1" info replication 2>/dev/null |
    grep -qE '^(role:master|master_link_status:up)'
}
all_ok() {
  local p
  for p in "${ports[@]}"; do pid_alive "$p" && cluster_ok "$p" && in_sync "$p" || return 1; done
}

start_node() {
  local port=$1 ndir
  pid_alive "$port" && return 0
  ndir=$(node_dir "$port")
  mkdir -p "$ndir"
  ndir=$(cd "$ndir" && pwd)
  cat >"$ndir/redis.conf" <<EOF
bind 127.0.0.1
port $port
protected-mode yes
daemonize yes
pidfile $ndir/redis.pid
logfile $ndir/redis.log
dir $ndir
save ""
appendonly yes
appendfsync everysec
cluster-enabled yes
cluster-config-file $ndir/nodes.conf
cluster-node-timeout 5000
# A replica may take over however long it was cut off: availability first (REPLICAS=1).
cluster-replica-validity-factor 0
# A shard without a master stops only its own slots: with the default (yes) every node refuses
# every command (CLUSTERDOWN) from the master's failure until its replica takes over.
cluster-require-full-coverage no
EOF
  redis-server "$ndir/redis.conf" >/dev/null
  for _ in $(seq 100); do
    # Our own process must answer, not whatever else may hold the port.
    pid_alive "$port" && answers "$port" && return 0
    sleep 0.1
  done
  echo "redis cluster node 127.0.0.1:$port did not answer within 10 s; last log lines:" >&2
  tail -n 20 "$ndir/redis.log" >&2 || true
  exit 1
}

create_cluster() {
  # A node that knows only itself was never joined: create the cluster. Nodes restarted from their
  # nodes.conf know each other already and only need time to agree (waited for below).
  [ "$(known_nodes "$base")" = "1" ] || return 0
  local addrs=() p
  for p in "${ports[@]}"; do addrs+=("127.0.0.1:$p"); done
  if ! redis-cli --cluster create "${addrs[@]}" --cluster-replicas "$replicas" --cluster-yes >"$dir/create.log" 2>&1; then
    echo "redis-cli --cluster create failed:" >&2
    tail -n 20 "$dir/create.log" >&2 || true
    exit 1
  fi
}

start() {
  if ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1; then
    echo "redis-server not found on PATH: install it (Debian: apt-get install -y redis-server)" >&2
    exit 127
  fi
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  echo "$replicas" >"$dir/replicas"
  local p
  for p in "${ports[@]}"; do start_node "$p"; done
  create_cluster
  for _ in $(seq 200); do
    if all_ok; then
      echo "running$(pids)"
      return 0
    fi
    sleep 0.1
  done
  echo "redis cluster on 127.0.0.1:$base-$((base + nodes - 1)) did not reach cluster_state:ok within 20 s" >&2
  for p in "${ports[@]}"; do tail -n 5 "$(node_dir "$p")/redis.log" >&2 || true; done
  exit 1
}

stop() {
  # TERM every node first (each fsyncs its AOF and exits), then wait for them together.
  local p pid pids_left=()
  for p in "${ports[@]}"; do
    if pid_alive "$p"; then
      pid=$(cat "$(pidfile "$p")")
      kill -TERM "$pid" 2>/dev/null || true
      pids_left+=("$pid")
    fi
  done
  for pid in "${pids_left[@]}"; do
    for _ in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  done
  for p in "${ports[@]}"; do rm -rf "$(node_dir "$p")"; done
  rm -f "$dir/create.log" "$dir/replicas"
  echo "stopped"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) if all_ok; then echo "running$(pids)"; else echo "stopped"; exit 3; fi ;;
  *) usage ;;
esac
