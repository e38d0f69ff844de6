#!/usr/bin/env bash
# Start, stop or query one standalone ZooKeeper on 127.0.0.1, its data and log under DIR.
#
#   zookeeper.sh start  DIR PORT [TICK_MS [MYID PEERS]]
#       TICK_MS default 2000 (sessions may last 2-20 ticks). With MYID and PEERS the server is
#       node MYID of an ensemble on loopback: PEERS lists every node as ID:QUORUM_PORT:ELECTION_PORT
#       separated by commas (e.g. 1:2888:3888,2:2889:3889,3:2890:3890); each node gets its own
#       DIR and client PORT. It answers ``ruok`` before a quorum forms, so start returns at once.
#   zookeeper.sh stop   DIR PORT
#   zookeeper.sh status DIR PORT   -> "running PID" (exit 0) or "stopped" (exit 3)
#
# Runs the server's jars directly (no systemd, no root needed once installed): EMQ_ZK_JAR if set,
# else the Debian package's /usr/share/java/zookeeper.jar, else a ZooKeeper distribution named by
# ZOOKEEPER_HOME or found through zkServer.sh on PATH. The admin HTTP server is off so it never
# takes port 8080 from the EMQ API.
set -euo pipefail

usage() { echo "usage: zookeeper.sh start|stop|status DIR PORT [TICK_MS [MYID PEERS]]" >&2; exit 2; }
[ $# -ge 3 ] || usage
cmd=$1 dir=$2 port=$3 tick=${4:-2000} myid=${5:-} peers=${6:-}
{ [ -z "$myid" ] || [ -n "$peers" ]; } || usage
pidfile="$dir/zookeeper.pid"
logfile="$dir/zookeeper.log"
DEBIAN_JAR=/usr/share/java/zookeeper.jar
LOG_JAR=/usr/share/java/slf4j-simple.jar

# The java class path of the ZooKeeper server, or nothing when none is installed.
zk_classpath() {
  if [ -n "${EMQ_ZK_JAR:-}" ]; then
    [ -f "$EMQ_ZK_JAR" ] && echo "$EMQ_ZK_JAR"
    return 0
  fi
  if [ -f "$DEBIAN_JAR" ]; then
    if [ -f "$LOG_JAR" ]; then echo "$DEBIAN_JAR:$LOG_JAR"; else echo "$DEBIAN_JAR"; fi
    return 0
  fi
  local home=${ZOOKEEPER_HOME:-} server
  if [ -z "$home" ] && server=$(command -v zkServer.sh 2>/dev/null); then
    home=$(dirname "$(dirname "$(readlink -f "$server")")")
  fi
  if [ -n "$home" ] && compgen -G "$home/lib/*.jar" >/dev/null; then
    echo "$home/lib/*"
  fi
}

pid_alive() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
answers() {
  local reply
  reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" && printf ruok >&3 && timeout 2 cat <&3) 2>/dev/null || true)
  [ "$reply" = "imok" ]
}

start() {
  if pid_alive; then
    echo "running $(cat "$pidfile")"
    return 0
  fi
  local cp
  cp=$(zk_classpath)
  if [ -z "$cp" ]; then
    echo "zookeeper not found: install it (Debian: apt-get install -y zookeeper) or set ZOOKEEPER_HOME" >&2
    exit 127
  fi
  if ! command -v java >/dev/null 2>&1; then
    echo "java not found (ZooKeeper needs it): install it (Debian: apt-get install -y default-jre-headless)" >&2
    exit 127
  fi
  mkdir -p "$dir/data"
  dir=$(cd "$dir" && pwd)
  pidfile="$dir/zookeeper.pid" logfile="$dir/zookeeper.log"
  cat >"$dir/zoo.cfg" <<EOF
tickTime=$tick
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,mntr,cons
autopurge.snapRetainCount=3
autopurge.purgeInterval=1
EOF
  if [ -n "$myid" ]; then
    echo "$myid" >"$dir/data/myid"
    # Followers get initLimit ticks to join and sync with the leader, syncLimit to stay in step.
    printf 'initLimit=10\nsyncLimit=5\n' >>"$dir/zoo.cfg"
    local peer id quorum election
    for peer in ${peers//,/ }; do
      IFS=: read -r id quorum election <<<"$peer"
      echo "server.$id=127.0.0.1:$quorum:$election" >>"$dir/zoo.cfg"
    done
  fi
  nohup setsid java -Xmx256m -XX:+UseSerialGC -Dorg.slf4j.simpleLogger.showDateTime=true \
    -cp "$cp" org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >>"$logfile" 2>&1 </dev/null &
  echo $! >"$pidfile"
  for _ in $(seq 150); do
    if answers; then
      echo "running $(cat "$pidfile")"
      return 0
    fi
    pid_alive || break
    sleep 0.1
  done
  echo "zookeeper on 127.0.0.1:$port did not answer within 15 s; last log lines:" >&2
  tail -n 20 "$logfile" >&2 || true
  stop >/dev/null
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
  kill -TERM "$pid"
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; echo "stopped"; return 0; }
    sleep 0.1
  done
  kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidfile"
  echo "stopped (killed after 10 s)"
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) if pid_alive && answers; then echo "running $(cat "$pidfile")"; else echo "stopped"; exit 3; fi ;;
  *) usage ;;
esac
