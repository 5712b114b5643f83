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
for d in siw0 rxe0; do
  ibv_devinfo -v -d $d | grep -E 'max_qp_rd_atom|max_qp_init_rd_atom|max_qp_wr|max_mr_size|max_cqe:' | sed "s/^/  $d /"
done

# The kernel's view of the queue pairs' connection parameters: kprobes on the functions that apply them
# (siw: the ORD/IRD it is connected or accepted with and the ORQ/IRQ sizes after MPA negotiation; rxe: the
# IB CM REQ/REP parameters and the QP attributes at RTR and RTS). Offsets from run.sh (qp-offsets.c).
TR=/sys/kernel/tracing
kprobes=""
setup_kprobes() {
  source "$rs_out/qp-offsets.env" || { kprobes="no offsets from run.sh"; return; }
  mountpoint -q $TR || mount -t tracefs nodev $TR || { kprobes="cannot mount tracefs"; return; }
  local iw="qpn=+$IWPARAM_QPN(%si):u32 ord=+$IWPARAM_ORD(%si):u32 ird=+$IWPARAM_IRD(%si):u32"
  local qpn="qpn=+$IBQP_QP_NUM(%di):u32 mask=%dx:u32"
  {
    echo "p:rdmaqp/siw_connect siw:siw_connect $iw"
    echo "p:rdmaqp/siw_accept siw:siw_accept $iw"
    echo "p:rdmaqp/siw_qp_ord_ird siw:siw_qp_modify qpn=+$SIWQP_QP_NUM(%di):u32 mask=%dx:u32" \
         "orq_size=+$SIWATTR_ORQ_SIZE(%si):u32 irq_size=+$SIWATTR_IRQ_SIZE(%si):u32"
    echo "p:rdmaqp/ib_cm_req ib_cm:ib_send_cm_req qpn=+$CMREQ_QP_NUM(%si):u32" \
         "responder_resources=+$CMREQ_RESPONDER_RESOURCES(%si):u8 initiator_depth=+$CMREQ_INITIATOR_DEPTH(%si):u8" \
         "retry_count=+$CMREQ_RETRY_COUNT(%si):u8 rnr_retry_count=+$CMREQ_RNR_RETRY_COUNT(%si):u8"
    echo "p:rdmaqp/ib_cm_rep ib_cm:ib_send_cm_rep qpn=+$CMREP_QP_NUM(%si):u32" \
         "responder_resources=+$CMREP_RESPONDER_RESOURCES(%si):u8 initiator_depth=+$CMREP_INITIATOR_DEPTH(%si):u8" \
         "rnr_retry_count=+$CMREP_RNR_RETRY_COUNT(%si):u8"
    echo "p:rdmaqp/rxe_rtr rdma_rxe:rxe_modify_qp $qpn max_dest_rd_atomic=+$QPATTR_MAX_DEST_RD_ATOMIC(%si):u8"
    echo "p:rdmaqp/rxe_rts rdma_rxe:rxe_modify_qp $qpn max_rd_atomic=+$QPATTR_MAX_RD_ATOMIC(%si):u8" \
         "retry_cnt=+$QPATTR_RETRY_CNT(%si):u8 rnr_retry=+$QPATTR_RNR_RETRY(%si):u8 timeout=+$QPATTR_TIMEOUT(%si):u8"
  } >> $TR/kprobe_events || { kprobes="kprobe_events refused the probes"; return; }
  echo "mask & $SIW_QP_ATTR_ORD" > $TR/events/rdmaqp/siw_qp_ord_ird/filter &&
  echo "mask & $IB_QP_MAX_DEST_RD_ATOMIC" > $TR/events/rdmaqp/rxe_rtr/filter &&
  echo "mask & $IB_QP_MAX_QP_RD_ATOMIC" > $TR/events/rdmaqp/rxe_rts/filter || { kprobes="cannot set the filters"; return; }
  kprobes=ready
}
trace_start() {
  [ "$kprobes" = ready ] || return 0
  echo > $TR/trace
  echo 1 > $TR/events/rdmaqp/enable
}
trace_stop() {  # $1=label -> /tmp/kprobes-$1.txt, one "event field=value ..." line per hit
  [ "$kprobes" = ready ] || { : > "/tmp/kprobes-$1.txt"; return 0; }
  echo 0 > $TR/events/rdmaqp/enable
  sed -n 's/.* \([a-z_]*\): ([^)]*) \(.*\)/\1 \2/p' $TR/trace > "/tmp/kprobes-$1.txt"
  cp "/tmp/kprobes-$1.txt" "$rs_out/" 2>/dev/null
}
# qp_params LABEL DEVICE RETRY RNR LOG: the provider's line for a queue pair (from LOG) and the kernel's
# values for every queue pair of the run, each distinct set once with how many queue pairs showed it.
# Passes when the provider logged the configured counts and the kernel applied them with non-zero depths.
qp_params() {
  local label=$1 dev=$2 retry=$3 rnr=$4 log=$5 k=/tmp/kprobes-$1.txt bad=""
  local line
  line=$(grep -m1 -o 'queue pair to .*' "$log")
  [ -n "$line" ] && result "qp-params $label provider: $line" || bad="no 'queue pair to' line in $log; "
  echo "$line" | grep -q "retry_count=$retry, rnr_retry_count=$rnr" || bad+="provider counts are not $retry/$rnr; "
  [ "$kprobes" = ready ] || bad+="no kernel view ($kprobes); "
  sed 's/ qpn=[0-9]*//; s/ mask=[0-9]*//' "$k" | sort | uniq -c | while read -r n what; do
    result "qp-params $label kernel: $what (${n} times)"
  done
  if [ "$dev" = siw ]; then
    grep -q '^siw_connect ' "$k" && grep -q '^siw_accept ' "$k" && grep -q '^siw_qp_ord_ird ' "$k" \
      || bad+="missing siw events; "
    ! grep -Eq ' (ord|ird|orq_size|irq_size)=0( |$)' "$k" || bad+="a zero READ depth; "
  else
    grep -q '^ib_cm_req ' "$k" && grep -q '^rxe_rtr ' "$k" && grep -q '^rxe_rts ' "$k" || bad+="missing rxe events; "
    ! grep -Eq ' (responder_resources|initiator_depth|max_rd_atomic|max_dest_rd_atomic)=0( |$)' "$k" \
      || bad+="a zero READ depth; "
    ! grep '^ib_cm_req ' "$k" | grep -vq "retry_count=$retry rnr_retry_count=$rnr" || bad+="CM REQ counts differ; "
    ! grep '^ib_cm_rep ' "$k" | grep -vq "rnr_retry_count=$rnr" || bad+="CM REP count differs; "
    ! grep '^rxe_rts ' "$k" | grep -vq "retry_cnt=$retry rnr_retry=$rnr" || bad+="QP counts differ; "
  fi
  if [ -z "$bad" ]; then result "qp-params $label PASS"; else fail "qp-params $label: $bad"; fi
}
setup_kprobes
say "kernel view of queue pair parameters (kprobes): $kprobes"

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
  trace_start
  timeout 1500 "$JAVA" "${JOPTS[@]}" -XX:TieredStopAtLevel=1 "-Drdma.test.verbs.host=$2" \
    -Drdma.test.verbs.maxQpReadAtoms=16 -Drdma.test.verbs.queuedReads=2000 -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -Dorg.slf4j.simpleLogger.log.org.rdmashuffle.transport.verbs=info -Dorg.slf4j.simpleLogger.showDateTime=true \
    -jar "$CONSOLE" execute --class-path "$CP" \
    --select-class org.rdmashuffle.transport.verbs.VerbsTransportContractTest \
    --select-class org.rdmashuffle.transport.verbs.VerbsQueuePairAuthenticationTest \
    --disable-banner --details=tree > "/tmp/contract-$1.log" 2>&1
  local rc=$?
  trace_stop "$1"
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
  qp_params "$1" "$1" 7 7 "/tmp/contract-$1.log"   # the defaults of verbs.retryCount and verbs.rnrRetryCount
}
wants siw && contract siw $SIW_IP
wants rxe && contract rxe $RXE_IP

if wants rxe; then
  # Control: other counts in the configuration must show up in the kernel (and not swapped).
  say "queue pair parameters over rxe with verbs.retryCount=2 and verbs.rnrRetryCount=5"
  trace_start
  timeout 600 "$JAVA" "${JOPTS[@]}" -XX:TieredStopAtLevel=1 -Dspark.shuffle.rdma.verbs.retryCount=2 \
    -Dspark.shuffle.rdma.verbs.rnrRetryCount=5 -cp "$CP" org.rdmashuffle.transport.verbs.VerbsReadThroughput \
    $RXE_IP 65536 256 16 > /tmp/qp-control.log 2>&1
  trace_stop rxe-control
  grep '^RESULT' /tmp/qp-control.log | sed 's/^/  /'
  qp_params rxe-control rxe 2 5 /tmp/qp-control.log
fi

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
if wants limits; then
  # A host limit, for real: the JVM's locked memory capped (siw checks it even for root), so that most
  # map outputs and receive buffers cannot be registered. They must go to Spark's own path (WARN lines),
  # and the job's results must still equal the sort shuffle's.
  say "Spark job with provider=verbs over siw under ulimit -l $LIMIT_KB KiB, checked against Spark's sort shuffle"
  export SPARK_LOCAL_IP=$SIW_IP RDMA_SKIP_BUILD=1 RDMA_JAVA_OPTS="-Djava.library.path=$LIBDISNI -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
  for attempt in 1 2; do
    ( ulimit -l $LIMIT_KB && timeout 1200 "$ROOT/examples/run-main-job.sh" --master 'local[2]' $SPARK_ARGS \
      --conf spark.shuffle.rdma.provider=verbs --conf spark.shuffle.rdma.fallback=auto \
      --conf spark.shuffle.rdma.localBlocksFromDisk=false --conf spark.shuffle.rdma.pool.chunkSize=512k \
      --conf spark.shuffle.rdma.pool.maxBufferSize=256k --out /tmp/limits-out ) > /tmp/limits.log 2>&1
    rc=$?
    crashed /tmp/limits.log || break
    result "NOTE limits attempt $attempt: the JVM crashed under emulation; running it again"
  done
  outputs=$(grep -c "left to Spark's own shuffle path" /tmp/limits.log)
  receive=$(grep -c "cannot get memory for receive buffers" /tmp/limits.log)
  left=$((outputs + receive))
  reads=$(grep -Eo 'verbs node [^ ]+ closed: [0-9]+ READs completed' /tmp/limits.log | grep -Eo '[0-9]+ READs' \
          | grep -Eo '^[0-9]+' | paste -sd+ | bc)
  grep -m3 "left to Spark's own shuffle path\|cannot get memory for receive buffers" /tmp/limits.log | cut -c1-400
  grep -E 'identical|differ|verbs node .* closed' /tmp/limits.log | tail -5
  if [ $rc = 0 ] && grep -q 'results identical' /tmp/limits.log && [ "$left" -gt 0 ]; then
    result "limits siw PASS (ulimit -l $LIMIT_KB KiB: job exit 0, results identical to sort shuffle; WARN lines: $outputs map outputs left to Spark's path, $receive receive memory refused; ${reads:-0} READs over verbs)"
  else
    tail -40 /tmp/limits.log
    fail "limits siw rc=$rc, WARN lines $left"
    cp /tmp/limits.log "$rs_out/" 2>/dev/null
  fi
fi
say "done, failed=$failed"
exit $failed
