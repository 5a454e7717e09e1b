#!/usr/bin/env bash
# ZooKeeper from Debian's jars (package `zookeeper`; scripts/install-deps.sh): the one way
# shardcar starts it, for development and for every test harness (Rust, Python, Java).
#
# Usage: scripts/zk.sh start|stop|status|restart [DIR] [PORT]
#        scripts/zk.sh run DIR PORT [SERVERS]
#   DIR      data, config, log and pid file (default: $SHARDCAR_ZK_DIR, else ${TMPDIR:-/tmp}/shardcar-zk)
#   PORT     client port on 127.0.0.1       (default: $SHARDCAR_ZK_PORT, else 2181)
#   SERVERS  for a node of an ensemble: 1=127.0.0.1:PEER:ELECTION,2=...; with ZK_MYID=N
#
# `start` returns once the server serves (`srvr` reports a Mode) and prints its connect string;
# starting a running server, or stopping a stopped one, is not an error. `status` exits 0 when
# the server serves, 3 when it is not running, 1 when it runs but does not serve.
# `run` writes DIR/zoo.cfg and replaces itself with the server in the foreground (its pid is the
# server's, so a harness can signal it; output goes to the caller's stdout and stderr).
# Overrides: JAVA (java binary), ZK_CLASSPATH, ZK_HEAP (default 256m), ZK_TICK (ms, default
# 2000), ZK_FORCE_SYNC (yes|no, default yes), ZK_MYID (ensemble node id), ZK_JVM_FLAGS
# (default "-XX:+UseSerialGC -XX:TieredStopAtLevel=1": quick to start, small, slower under
# load; set it empty for the JVM's own defaults, as a production server runs).
set -euo pipefail

usage() { sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; }

ACTION="${1:-}"
DIR="${2:-${SHARDCAR_ZK_DIR:-${TMPDIR:-/tmp}/shardcar-zk}}"
PORT="${3:-${SHARDCAR_ZK_PORT:-2181}}"
JAVA="${JAVA:-java}"
ZK_CLASSPATH="${ZK_CLASSPATH:-/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar}"
ZK_HEAP="${ZK_HEAP:-256m}"
ZK_TICK="${ZK_TICK:-2000}"
ZK_FORCE_SYNC="${ZK_FORCE_SYNC:-yes}"
ZK_JVM_FLAGS="${ZK_JVM_FLAGS--XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
SERVERS="${4:-}"
CFG="$DIR/zoo.cfg"
PIDFILE="$DIR/zookeeper.pid"
LOG="$DIR/zookeeper.log"

log() { printf '[zk] %s\n' "$*"; }
die() { printf '[zk] error: %s\n' "$*" >&2; exit 1; }

case "$PORT" in
    ''|*[!0-9]*) die "PORT must be a number, got '$PORT'" ;;
esac

# srvr reply of the server on PORT, empty when it does not answer (bash's /dev/tcp, no netcat).
srvr() {
    (
        exec 3<>"/dev/tcp/127.0.0.1/$PORT" || exit 0
        printf 'srvr' >&3
        timeout 2 cat <&3 || true
    ) 2>/dev/null || true
}

serving_mode() {
    srvr | sed -n 's/^Mode: //p'
}

# The pid from the pid file if that process is our ZooKeeper (same zoo.cfg), else nothing.
running_pid() {
    [ -f "$PIDFILE" ] || return 0
    local pid
    pid="$(cat "$PIDFILE")"
    case "$pid" in ''|*[!0-9]*) return 0 ;; esac
    if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$CFG"; then
        echo "$pid"
    fi
}

write_config() {
    mkdir -p "$DIR/data"
    case "$ZK_TICK" in ''|*[!0-9]*) die "ZK_TICK must be a number of ms, got '$ZK_TICK'" ;; esac
    cat >"$CFG" <<CFG
# written by scripts/zk.sh
tickTime=$ZK_TICK
initLimit=20
syncLimit=10
minSessionTimeout=$((ZK_TICK * 2))
maxSessionTimeout=60000
dataDir=$DIR/data
clientPort=$PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=srvr,stat,mntr,ruok,cons,conf
extendedTypesEnabled=true
forceSync=$ZK_FORCE_SYNC
CFG
    if [ -n "$SERVERS" ]; then
        [ -n "${ZK_MYID:-}" ] || die "an ensemble node needs ZK_MYID"
        echo "$ZK_MYID" >"$DIR/data/myid"
        local entry
        IFS=',' read -r -a entries <<<"$SERVERS"
        for entry in "${entries[@]}"; do
            echo "server.$entry" >>"$CFG"
        done
    fi
}

java_args() {
    local flags=()
    read -r -a flags <<<"$ZK_JVM_FLAGS"
    printf '%s\n' "-Xmx$ZK_HEAP" ${flags[@]+"${flags[@]}"} \
        -Djava.net.preferIPv4Stack=true "-Dzookeeper.log.dir=$DIR" \
        -Dzookeeper.root.logger=INFO,CONSOLE -cp "$ZK_CLASSPATH" \
        org.apache.zookeeper.server.quorum.QuorumPeerMain "$CFG"
}

# Foreground: the server replaces this script (same pid).
run() {
    [ -r /usr/share/java/zookeeper.jar ] ||
        die "/usr/share/java/zookeeper.jar not found: run scripts/install-deps.sh"
    write_config
    local args=()
    mapfile -t args < <(java_args)
    exec "$JAVA" "${args[@]}"
}

start() {
    local pid
    pid="$(running_pid)"
    if [ -n "$pid" ]; then
        log "already running (pid $pid), connect string 127.0.0.1:$PORT"
        return 0
    fi
    [ -r /usr/share/java/zookeeper.jar ] ||
        die "/usr/share/java/zookeeper.jar not found: run scripts/install-deps.sh"
    if [ -n "$(srvr)" ]; then
        die "something else already answers on 127.0.0.1:$PORT; pick another PORT"
    fi
    write_config
    log "starting ZooKeeper on 127.0.0.1:$PORT (data in $DIR, log $LOG)"
    local args=()
    mapfile -t args < <(java_args)
    nohup "$JAVA" "${args[@]}" >>"$LOG" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$PIDFILE"
    local waited=0 mode=""
    while [ "$waited" -lt 300 ]; do
        mode="$(serving_mode)"
        if [ -n "$mode" ]; then
            log "serving ($mode), pid $pid, connect string 127.0.0.1:$PORT"
            return 0
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PIDFILE"
            tail -n 30 "$LOG" >&2 || true
            die "ZooKeeper exited during start-up (log above, full log in $LOG)"
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
    tail -n 30 "$LOG" >&2 || true
    die "ZooKeeper (pid $pid) did not serve within 30 s; see $LOG"
}

stop() {
    local pid
    pid="$(running_pid)"
    if [ -z "$pid" ]; then
        log "not running"
        rm -f "$PIDFILE"
        return 0
    fi
    log "stopping pid $pid"
    kill -CONT "$pid" 2>/dev/null || true
    kill -TERM "$pid" 2>/dev/null || true
    local waited=0
    while kill -0 "$pid" 2>/dev/null && [ "$waited" -lt 100 ]; do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "no exit after 10 s, SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
    log "stopped"
}

status() {
    local pid mode
    pid="$(running_pid)"
    mode="$(serving_mode)"
    if [ -z "$pid" ]; then
        if [ -n "$mode" ]; then
            log "not started by this script, but 127.0.0.1:$PORT serves ($mode)"
            return 0
        fi
        log "not running (dir $DIR, port $PORT)"
        return 3
    fi
    if [ -n "$mode" ]; then
        log "running (pid $pid), serving ($mode), connect string 127.0.0.1:$PORT"
        return 0
    fi
    log "running (pid $pid) but not serving on 127.0.0.1:$PORT; see $LOG"
    return 1
}

case "$ACTION" in
    run)
        [ $# -ge 3 ] || die "run needs DIR and PORT (try --help)"
        run
        ;;
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status) status ;;
    -h|--help|help) usage ;;
    *) usage >&2; exit 64 ;;
esac
