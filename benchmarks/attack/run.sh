#!/usr/bin/env bash
# Attack harness for the tcp responder (issue 24, items 8-11): three "hosts" — network namespaces
# atS (10.204.0.1: the serving tcp node, default limits), atA (10.204.0.2 and 10.204.0.10-17: the
# attacker) and atH (10.204.0.3: the honest peer), their veths joined by a bridge — so the attacker
# and the honest peer have different source addresses. For each scenario: start the node, start the
# attack and wait until it holds, then the honest peer (a tcp node with the default connect settings:
# 10 s per attempt, 3 retries, 1 s apart) connects and READs 1 MiB five times, byte for byte. PASS when
# it connects within its retries, every READ is byte-exact and none takes more than 2 s.
#
#   benchmarks/attack/run.sh [--scenarios "8 9 10 11"]
#
#   8  auth on; 300 sockets without the secret, from 9 addresses, refused (wrong proof or not a HELLO)
#      and held open; every 5 s they are closed and opened again at once
#   9  auth off; 4 senders on 2 addresses refused at HELLO, then sending as fast as they can
#      (connecting again when reset), and one trickling a byte every 50 ms after its refusal
#   10 auth on; an insider with the secret: 2 connections sending keep-alives as fast as they can
#   11 auth off; 1,100 handshaken idle connections from one address (more than maxConnections, 1,024)
#
# Needs root, iproute2, java 17+ and mvn. RDMA_SKIP_BUILD=1 skips the build; RDMA_MVN_FLAGS (e.g. -o)
# goes to mvn. ATTACK_SERVER_CLASSPATH_PREFIX puts classes before the serving node's class path (to run
# the same attacks against another build of the responder). Everything it starts is stopped by PID,
# and the namespaces and the bridge are deleted when it ends, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
scenarios="8 9 10 11"
while [ $# -gt 0 ]; do
  case $1 in
    --scenarios) scenarios=$2; shift 2 ;;
    *) sed -n '2,24p' "$0" >&2; exit 2 ;;
  esac
done
for s in $scenarios; do
  case $s in 8|9|10|11) ;; *) echo "unknown scenario $s" >&2; exit 2 ;; esac
done
if [ "$(id -u)" != 0 ]; then echo "needs root (ip netns)" >&2; exit 1; fi
for tool in ip java mvn; do
  command -v $tool >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
ns=(atS atA atH)
ips=(10.204.0.1 10.204.0.2 10.204.0.3)
extra=(10.204.0.10 10.204.0.11 10.204.0.12 10.204.0.13 10.204.0.14 10.204.0.15 10.204.0.16 10.204.0.17)
bridge=atbr0
for n in "${ns[@]}"; do
  if ip netns list | grep -qw "$n"; then echo "namespace $n exists already; delete it first (ip netns del $n)" >&2; exit 1; fi
done
if ip link show $bridge >/dev/null 2>&1; then echo "bridge $bridge exists already; delete it first" >&2; exit 1; fi

scratch="$root/benchmarks/target/attack"
mkdir -p "$scratch"; rm -rf "$scratch"/s[0-9]*
if [ "${RDMA_SKIP_BUILD:-0}" != 1 ]; then
  echo "building (rdma-transport and its test classes)..."
  # shellcheck disable=SC2086
  mvn -B -ntp -q ${RDMA_MVN_FLAGS:-} -pl rdma-transport -am test-compile dependency:build-classpath \
    -Dmdep.outputFile="$scratch/deps.txt" -Dmdep.includeScope=test
fi
[ -f "$scratch/deps.txt" ] || { echo "no class path: run once without RDMA_SKIP_BUILD" >&2; exit 1; }
cp="$root/rdma-transport/target/classes:$root/rdma-transport/target/test-classes:$(cat "$scratch/deps.txt")"
server_cp="${ATTACK_SERVER_CLASSPATH_PREFIX:+$ATTACK_SERVER_CLASSPATH_PREFIX:}$cp"
main=org.rdmashuffle.transport.tcp.AttackHarness

pids=()
log() { echo "[attack $(date +%H:%M:%S)] $*" >&2; }
cleanup() {
  set +e
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  sleep 1
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for n in "${ns[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
    ip netns del "$n" 2>/dev/null
  done
  ip link del $bridge 2>/dev/null
  log "namespaces and bridge deleted; logs in $scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link add $bridge type bridge
ip link set $bridge up
for i in 0 1 2; do
  n=${ns[$i]}
  ip netns add "$n"
  ip link add "veth-$n" type veth peer name "br-$n"
  ip link set "veth-$n" netns "$n"
  ip link set "br-$n" master $bridge
  ip link set "br-$n" up
  ip -n "$n" addr add "${ips[$i]}/24" dev "veth-$n"
  ip -n "$n" link set lo up
  ip -n "$n" link set "veth-$n" up
done
for a in "${extra[@]}"; do ip -n atA addr add "$a/24" dev veth-atA; done
sysctl -qw net.bridge.bridge-nf-call-iptables=0 2>/dev/null || true
# Reachability over the bridge (bash's /dev/tcp): a refused connect proves the path.
for src in atA atH; do
  ok=0
  for _ in $(seq 20); do
    said=$(ip netns exec $src timeout 2 bash -c 'exec 3<>/dev/tcp/10.204.0.1/9' 2>&1 || true)
    if [[ $said == *refused* ]]; then ok=1; break; fi
    sleep 0.5
  done
  [ $ok = 1 ] || { echo "$src cannot reach atS over the bridge" >&2; exit 1; }
done

kill_pid() { # stops one of our processes and forgets its PID (so cleanup never signals a reused PID)
  local p keep=()
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}

rows=()
failed=0
run_scenario() {
  local s=$1 auth sources shown what linger=0 dir spid apid port hrc honest stats attack
  case $s in
    8) auth=yes; sources="10.204.0.2,$(IFS=,; echo "${extra[*]}")"; shown="10.204.0.2, .10-.17"
       what="300 refused handshakes held open, closed and opened again every 5 s (auth on)" ;;
    # 12 s after the honest peer: the trickler's longest life then shows the drain's time bound (10 s).
    9) auth=no; sources="10.204.0.2,10.204.0.10"; shown="10.204.0.2, .10"; linger=12
       what="4 refused senders flooding, 1 trickling (auth off)" ;;
    10) auth=yes; sources="10.204.0.2"; shown="10.204.0.2"; what="insider keep-alive flood, 2 connections (auth on)" ;;
    11) auth=no; sources="10.204.0.2"; shown="10.204.0.2"; what="1,100 idle handshaken connections (auth off)" ;;
  esac
  dir="$scratch/s$s"; mkdir -p "$dir"
  ip netns exec atS java -Xmx512m -cp "$server_cp" $main server bind=10.204.0.1 auth=$auth dir="$dir" \
    > "$dir/server.log" 2>&1 &
  spid=$!; pids+=($spid)
  for _ in $(seq 300); do [ -f "$dir/server.desc" ] && break; sleep 0.1; done
  [ -f "$dir/server.desc" ] || { log "item $s: the node did not start (see $dir/server.log)"; return 1; }
  port=$(cut -d' ' -f1 "$dir/server.desc")
  ip netns exec atA java -Xmx512m -cp "$cp" $main attack scenario=$s target=10.204.0.1:$port sources=$sources \
    > "$dir/attack.log" 2>&1 &
  apid=$!; pids+=($apid)
  for _ in $(seq 300); do grep -q "^ATTACK ready" "$dir/attack.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "^ATTACK ready" "$dir/attack.log" || log "item $s: the attack did not report ready (see $dir/attack.log)"
  sleep 2
  log "item $s: attack holds ($(grep '^ATTACK' "$dir/attack.log" | tail -1 | cut -c8-)); honest peer connects"
  hrc=0
  timeout 180 ip netns exec atH java -Xmx512m -cp "$cp" $main honest bind=10.204.0.3 target=10.204.0.1:$port \
    auth=$auth dir="$dir" > "$dir/honest.log" 2>&1 || hrc=$?
  sleep 0.6
  stats=$(cat "$dir/server.stats" 2>/dev/null || echo "?")
  if [ "$linger" -gt 0 ]; then log "item $s: the attack goes on for $linger s more"; sleep "$linger"; fi
  attack=$(grep '^ATTACK' "$dir/attack.log" | tail -1 | cut -c8-)
  kill_pid "$apid"; kill_pid "$spid"
  honest=$(grep '^HONEST' "$dir/honest.log" | tail -1 | cut -c8-)
  [ -n "$honest" ] || honest="FAIL (no result, rc $hrc; see $dir/honest.log)"
  local verdict=PASS
  [ $hrc = 0 ] && [[ $honest == PASS* ]] || { verdict=FAIL; failed=$((failed + 1)); }
  rows+=("| $s | $what | $shown | $honest | $stats | $attack |")
  echo "$verdict item $s: honest peer $honest; node $stats; attacker: $attack"
}

log "namespaces up: node 10.204.0.1 (atS), attacker 10.204.0.2 + ${extra[0]}-${extra[7]} (atA), honest 10.204.0.3 (atH)"
for s in $scenarios; do
  run_scenario "$s" || { failed=$((failed + 1)); echo "FAIL item $s: did not run"; }
done
echo
echo "| item | attack | attacker's addresses | honest peer (10.204.0.3) | serving node after the honest peer | attacker at the end |"
echo "| --- | --- | --- | --- | --- | --- |"
for r in "${rows[@]}"; do echo "$r"; done
echo
if [ $failed = 0 ]; then echo "ALL PASS"; else echo "$failed FAILED"; exit 1; fi
