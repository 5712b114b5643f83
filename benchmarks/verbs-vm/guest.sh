#!/bin/bash
# Runs inside the guest, as root: SoftiWARP (siw) on a dummy interface and Soft-RoCE (rxe) on a veth
# pair, then the checks of benchmarks/verbs-vm/run.sh. Every line starting with RESULT also goes to
# $rs_out/summary.txt. Exit code 0 only when every check passed.
set -u
source "$rs_out/env.sh"   # ROOT LIBDISNI JAVA CP CONSOLE SPARK_ARGS PARTS READ_ITERS
SIW_IP=10.77.0.1
RXE_IP=10.78.0.1
t0=$(date +%s)
failed=0
say() { echo "[guest +$(( $(date +%s) - t0 ))s] $*"; }
result() { echo "RESULT $*"; echo "$*" >> "$rs_out/summary.txt"; }
fail() { result "FAIL $*"; failed=1; }
wants() { [[ " $PARTS " == *" $1 "* ]]; }

ulimit -l unlimited
ip link set lo up
say "loading siw, rdma_rxe and rdma_ucm"
modprobe siw && modprobe rdma_rxe && modprobe rdma_ucm || fail "modprobe of siw, rdma_rxe or rdma_ucm"
modprobe dummy numdummies=0
ip link add dummy0 type dummy && ip addr add $SIW_IP/24 dev dummy0 && ip link set dummy0 up
rdma link add siw0 type siw netdev dummy0 || fail "rdma link add siw0"
ip link add veth0 type veth peer name veth1 && ip addr add $RXE_IP/24 dev veth0
ip link set veth0 up && ip link set veth1 up
rdma link add rxe0 type rxe netdev veth0 || fail "rdma link add rxe0"
rdma link show
ibv_devinfo -v -d siw0 | grep -E 'max_qp_rd_atom|max_qp_wr|max_mr_size|max_cqe:' | sed 's/^/  siw0 /'

JOPTS=(--add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
       "-Djava.library.path=$LIBDISNI" -XX:+UseSerialGC -Xmx1g)

ib_read_bw_mib() {  # $1=device $2=ip $3=size $4=iterations -> prints MiB/s (perftest's MB/sec) or nothing
  local out
  for attempt in 1 2; do
    timeout 300 ib_read_bw -d "$1" -R -s "$3" -n "$4" -F > /tmp/ibrbw-server.log 2>&1 &
    local server=$!
    sleep 2
    out=$(timeout 300 ib_read_bw -d "$1" -R -s "$3" -n "$4" -F "$2" 2>&1)
    wait $server
    local bw
    bw=$(echo "$out" | awk -v s="$3" '$1 == s && NF >= 4 {print $4}' | tail -1)
    if [ -n "$bw" ]; then echo "$bw"; return 0; fi
    echo "$out" | tail -5 >&2
  done
}

# JVMs under emulation occasionally die of SIGSEGV in JIT-compiled code (an emulator fault, seen in
# Kryo and DirectByteBuffer frames); such a JVM is run once more and the retry is reported.
crashed() { grep -q 'A fatal error has been detected by the Java Runtime' "$1"; }

verbs_read_mib() {  # $1=ip $2=size $3=iterations -> prints MiB/s or nothing
  for attempt in 1 2; do
    timeout 900 "$JAVA" "${JOPTS[@]}" -cp "$CP" org.rdmashuffle.transport.verbs.VerbsReadThroughput \
      "$1" "$2" "$3" 128 > /tmp/verbs-read.log 2>&1
    crashed /tmp/verbs-read.log || break
    echo "JVM crashed under emulation (attempt $attempt); hs_err frame:" >&2
    grep -A1 'Problematic frame' /tmp/verbs-read.log >&2
    echo "NOTE read-throughput size=$2 attempt $attempt: the JVM crashed under emulation; running it again" >> "$rs_out/summary.txt"
  done
  grep '^RESULT' /tmp/verbs-read.log | sed 's/.*MiB\/s=//'
}

if wants bench; then
  for size in 65536 1048576; do
    iters=$(( READ_ITERS * 65536 / size )); [ $iters -lt 200 ] && iters=200
    say "READ throughput at $size B: ib_read_bw, then the verbs provider ($iters READs each)"
    ib=$(ib_read_bw_mib siw0 $SIW_IP $size $iters)
    ours=$(verbs_read_mib $SIW_IP $size $iters)
    if [ -z "$ib" ] || [ -z "$ours" ]; then
      tail -20 /tmp/verbs-read.log
      fail "read-throughput size=$size ib_read_bw=${ib:-none} verbs=${ours:-none} MiB/s"
    else
      ratio=$(echo "scale=3; $ours / $ib" | bc)
      ok=$(echo "$ratio >= 0.8" | bc)
      result "read-throughput siw size=$size ib_read_bw=$ib verbs=$ours MiB/s ratio=$ratio $([ "$ok" = 1 ] && echo PASS || echo BELOW-0.8)"
      [ "$ok" = 1 ] || failed=1
    fi
  done
fi

contract() {  # $1=label $2=ip
  say "transport contract suite over $1 ($2)"
  timeout 1500 "$JAVA" "${JOPTS[@]}" -XX:TieredStopAtLevel=1 "-Drdma.test.verbs.host=$2" \
    -Drdma.test.verbs.maxQpReadAtoms=16 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -Dorg.slf4j.simpleLogger.log.org.rdmashuffle.transport.verbs=info -Dorg.slf4j.simpleLogger.showDateTime=true \
    -jar "$CONSOLE" execute --class-path "$CP" \
    --select-class org.rdmashuffle.transport.verbs.VerbsTransportContractTest \
    --disable-banner --details=tree > "/tmp/contract-$1.log" 2>&1
  local rc=$?
  grep -E '✔|✘|↷|tests (successful|failed|skipped|aborted)' "/tmp/contract-$1.log" | sed 's/^/  /'
  local ok skipped
  ok=$(grep -Eo '[0-9]+ tests successful' "/tmp/contract-$1.log" | grep -Eo '^[0-9]+')
  skipped=$(grep -Eo '[0-9]+ tests (skipped|aborted)' "/tmp/contract-$1.log" | grep -Eo '^[0-9]+' | paste -sd+ | bc)
  if [ $rc = 0 ] && [ "${ok:-0}" -gt 0 ] && [ "${skipped:-0}" = 0 ]; then
    result "contract $1 PASS ($ok tests)"
  else
    grep -vE '^\s*$' "/tmp/contract-$1.log" | grep -E 'Exception|expected|Error|assert|timed out' | head -30
    fail "contract $1 rc=$rc successful=${ok:-0} skipped/aborted=${skipped:-0}"
  fi
  cp "/tmp/contract-$1.log" "$rs_out/" 2>/dev/null
}
wants siw && contract siw $SIW_IP
wants rxe && contract rxe $RXE_IP

if wants spark; then
  say "Spark job with provider=verbs over siw, checked against Spark's sort shuffle"
  export SPARK_LOCAL_IP=$SIW_IP RDMA_SKIP_BUILD=1 RDMA_JAVA_OPTS="-Djava.library.path=$LIBDISNI -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
  for attempt in 1 2; do
    timeout 1200 "$ROOT/examples/run-main-job.sh" --master 'local[2]' $SPARK_ARGS \
      --conf spark.shuffle.rdma.provider=verbs --conf spark.shuffle.rdma.fallback=never \
      --conf spark.shuffle.rdma.localBlocksFromDisk=false --out /tmp/spark-out > /tmp/spark.log 2>&1
    rc=$?
    crashed /tmp/spark.log || break
    result "NOTE spark attempt $attempt: the JVM crashed under emulation ($(grep -A1 'Problematic frame' /tmp/spark.log | tail -1)); running it again"
  done
  grep -E 'identical|differ|validated|verbs node .* closed|ratio|sort|rdma' /tmp/spark.log | tail -25
  reads=$(grep -Eo 'verbs node [^ ]+ closed: [0-9]+ READs completed' /tmp/spark.log | grep -Eo '[0-9]+ READs' \
          | grep -Eo '^[0-9]+' | paste -sd+ | bc)
  if [ $rc = 0 ] && [ "${reads:-0}" -gt 0 ]; then
    result "spark siw PASS (job exit 0, results identical to sort shuffle, ${reads} READs over verbs)"
  else
    tail -40 /tmp/spark.log
    fail "spark siw rc=$rc verbs READs=${reads:-0}"
    cp /tmp/spark.log "$rs_out/" 2>/dev/null
  fi
fi
say "done, failed=$failed"
exit $failed
