#!/bin/bash
# Runs inside the guest, as root: SoftiWARP (siw) on a dummy interface and Soft-RoCE (rxe) on a veth
# pair (part fabric: a second siw, siw1, on the dummy interface rdma1), then the checks of
# benchmarks/verbs-vm/run.sh. Every line starting with RESULT also goes to
# $rs_out/summary.txt. Exit code 0 only when every check passed.
set -u
export LC_ALL=C           # a dot in $EPOCHREALTIME and in every number the tools print
source "$rs_out/env.sh"   # ROOT API LIBDISNI JAVA CP CONSOLE SPARK_ARGS PARTS READ_ITERS BENCH_ROUNDS BENCH_TARGET FETCH_JAR FETCH_ARGS FABRIC_* MR_ARGS MR_PROVIDER MR_CP
SIW_IP=10.77.0.1
RXE_IP=10.78.0.1
SIW2_NET=10.77.1      # part fabric: siw1 on a second interface, rdma1, with its own /24
SIW2_IP=$SIW2_NET.1
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
devices="siw0 rxe0"
if wants fabric; then
  ip link add rdma1 type dummy && ip addr add $SIW2_IP/24 dev rdma1 && ip link set rdma1 up
  rdma link add siw1 type siw netdev rdma1 || fail "rdma link add siw1 (second interface rdma1)"
  devices+=" siw1"
fi
rdma link show
for d in $devices; do
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

# A crashed JVM's full report (signal, faulting address, registers, threads) is kept in the out directory.
# API (run.sh's VERBS_VM_API): ffm, libibverbs and librdmacm through java.lang.foreign with no libdisni
# on any path (LIBDISNI, when set, serves only the bench part's DiSNI comparison); or disni.
API_OPTS=("-Dspark.shuffle.rdma.verbs.api=$API" "-Drdma.test.verbs.api=$API")
[ "$API" = ffm ] && API_OPTS+=(--enable-native-access=ALL-UNNAMED)
NATIVE_ACCESS=""   # executors' JVM option (Spark options go through --rdma-conf)
[ "$API" = ffm ] && NATIVE_ACCESS=--enable-native-access=ALL-UNNAMED
LIBPATH=""
[ "$API" = disni ] && LIBPATH=$LIBDISNI
export JAVA_HOME=$(dirname "$(dirname "$JAVA")") PATH="$(dirname "$JAVA"):$PATH"   # run-main-job.sh's and Spark's java
say "JVMs: $("$JAVA" -version 2>&1 | head -1); verbs through $API; java.library.path '${LIBPATH}'"
JOPTS=(--add-exports java.base/sun.nio.ch=ALL-UNNAMED --add-opens java.base/sun.nio.ch=ALL-UNNAMED
       "-Djava.library.path=$LIBPATH" "${API_OPTS[@]}" -XX:+UseSerialGC -Xmx1g "-XX:ErrorFile=$rs_out/hs_err_pid%p.log")
# What a Spark driver started with plain java needs (parts spark and fabric), and the plugin jar.
RJ=$(ls "$ROOT"/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-*-plugin.jar)
SPARK_HOME_G=$ROOT/examples/target/spark-home
opens=(--add-opens=java.base/java.lang=ALL-UNNAMED --add-opens=java.base/java.lang.invoke=ALL-UNNAMED
  --add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED
  --add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/jdk.internal.ref=ALL-UNNAMED
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/sun.nio.cs=ALL-UNNAMED
  --add-opens=java.base/sun.security.action=ALL-UNNAMED --add-opens=java.base/sun.util.calendar=ALL-UNNAMED
  -Dio.netty.tryReflectionSetAccessible=true)
# The provider's own line names the API it runs through; a run through another fails its part.
api_used() { local want=java.lang.foreign; [ "$API" = disni ] && want=DiSNI
  grep -q "through $want" "$1" || { fail "$2: the verbs provider did not run through $want ($(grep -m1 -o 'through [^ ]*' "$1"))"; return 1; }; }

# Bytes on the wire, the yardstick both tools share: siw's TCP connection to a local address runs over
# lo (dummy0 is only siw's anchor), so the rx_bytes of lo and dummy0 are sampled every 0.5 s while a tool
# runs (bash builtins but sleep). wire_rate prints the whole run's total and the median rate over the
# intervals in which data flowed (rate above a tenth of the run's highest), which leaves out start-up
# and connection set-up; for the provider, only the intervals inside its timed READs count (its
# RESULT line's timed= bounds), which leaves out its JVM's warm-up READs too.
wire_sample() { local a b; read -r a < /sys/class/net/lo/statistics/rx_bytes; read -r b < /sys/class/net/dummy0/statistics/rx_bytes
  echo "$EPOCHREALTIME $((a + b))"; }
wire_start() {  # $1=file; the first sample is taken before the tool starts
  wire_file=$1
  wire_sample > "$1"
  ( while sleep 0.5; do wire_sample; done ) >> "$1" &
  wire_pid=$!
}
wire_stop() { kill "$wire_pid" 2>/dev/null; wait "$wire_pid" 2>/dev/null; wire_sample >> "$wire_file"; }
wire_rate() {  # $1=file [$2=from $3=to, wall-clock seconds: only intervals inside them] -> "bytes=N mibps=X"
  local total rate
  total=$(awk 'NR == 1 {b0 = $2} {b = $2} END {printf "%.0f\n", b - b0}' "$1")
  rate=$(wire_median "$1" "${2:-0}" "${3:-1e12}")
  if [ "$rate" = none ] && [ -n "${2:-}" ]; then
    # not one sample interval inside the timed READs (a short run): the whole run's, and it says so
    echo "bytes=$total (whole run) whole-run mibps=$(wire_median "$1" 0 1e12)"
  else
    echo "bytes=$total (whole run) mibps=$rate"
  fi
}
wire_median() {  # $1=file $2=from $3=to -> the median MiB/s of the flowing intervals inside [from, to], or none
  awk -v from="$2" -v to="$3" \
      'NR > 1 && $1 > pt && pt >= from && $1 <= to {print ($2 - pb) / ($1 - pt) / 1048576} {pt = $1; pb = $2}' "$1" \
    | awk '{r[NR] = $1; if ($1 > max) max = $1} END {for (i = 1; i <= NR; i++) if (r[i] > max / 10) print r[i]}' \
    | median
}
wire_keep() {  # $1=wire result $2=median file: appends its rate when there is one
  local r=${1##*mibps=}
  [ "$r" != none ] && [ -n "$r" ] && echo "$r" >> "$2"
  return 0
}
median() { sort -g | awk '{v[NR] = $1} END {if (NR == 0) print "none"; else if (NR % 2) printf "%.2f\n", v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# ib_read_bw without busy polling: the client sleeps on CQ events (-e), as the provider's DiSNI
# completion thread does; the server (passive in a READ test: it only waits on its TCP sync socket) runs
# with -e too and under nice -n 19, so that neither can take a vCPU from SoftiWARP's kernel threads on
# this 2-vCPU guest. A run whose clock check failed ("Correlation coefficient r^2 < 0.9": perftest then
# divides by a 0 MHz clock), that printed a 0, inf or nan bandwidth, or that failed, is a failed
# measurement: repeated, at most IB_ATTEMPTS times, never used.
IB_ATTEMPTS=4
ib_read_bw_run() {  # $1=size $2=iterations $3=label -> sets IB_BW (MiB/s) and IB_WIRE; 1 when no valid run
  IB_BW=""; IB_WIRE=""
  local attempt out rc server bw why
  for attempt in $(seq 1 $IB_ATTEMPTS); do
    nice -n 19 timeout 300 ib_read_bw -d siw0 -R -e -s "$1" -n "$2" -F > /tmp/ibrbw-server.log 2>&1 &
    server=$!
    sleep 2
    wire_start "/tmp/wire-$3.txt"
    out=$(timeout 300 ib_read_bw -d siw0 -R -e -s "$1" -n "$2" -F $IB_OPTS $SIW_IP 2>&1)
    rc=$?
    wire_stop
    kill $server 2>/dev/null; wait $server 2>/dev/null
    echo "$out" > "/tmp/ibrbw-$3-$attempt.log"
    bw=$(echo "$out" | awk -v s="$1" '$1 == s && NF >= 4 {print $4}' | tail -1)
    why=""
    [ $rc = 0 ] || why="exit code $rc; "
    [ -n "$bw" ] || why+="no bandwidth line; "
    echo "$out" | grep -q 'Correlation coefficient' && why+="clock check failed ($(echo "$out" | grep -m1 -o 'Correlation coefficient.*')); "
    [ -n "$bw" ] && ! echo "$bw" | awk '{exit !($1 + 0 > 0 && $1 !~ /inf|nan/)}' && why+="bandwidth $bw; "
    if [ -z "$why" ]; then
      IB_BW=$bw; IB_WIRE=$(wire_rate "/tmp/wire-$3.txt")
      echo "$out" | grep -q 'differs from nominal' && result "NOTE $3: ib_read_bw's measured clock differs from nominal ($(echo "$out" | grep -m1 -o 'measured timestamp.*'))"
      return 0
    fi
    result "NOTE $3: ib_read_bw attempt $attempt failed: $why(a failed measurement, repeated)"
    echo "$out" | tail -5 >&2
  done
  return 1
}

# JVMs under emulation occasionally die of SIGSEGV in JIT-compiled code (an emulator fault, seen in
# Kryo and DirectByteBuffer frames, in Java code that touches no RDMA memory); such a JVM is run again,
# at most CRASH_ATTEMPTS times in all, each retry reported and each crash's hs_err report kept in the
# out directory. A run that keeps crashing fails the part.
CRASH_ATTEMPTS=3
# A crash whose faulting frame is in rdma-core's libraries, a verbs provider library or our own code is
# not the emulator's: it fails the part instead of being run again.
crashed() {
  grep -q 'A fatal error has been detected by the Java Runtime' "$1" || return 1
  local frame; frame=$(grep -A1 'Problematic frame' "$1" | tail -1)
  if echo "$frame" | grep -Eq 'libibverbs|librdmacm|libsiw|librxe|libdisni|rdmashuffle'; then
    fail "a JVM crashed in verbs code, not the emulator's fault: $frame (log $1, hs_err in $rs_out)"
    cp "$1" "$rs_out/" 2>/dev/null
    return 1   # not retried: the part fails
  fi
  return 0
}

bench_jopts() { local o=${BENCH_JOPTS//%l/$1}; echo "${o//%o/$rs_out}"; }  # %l: the run's label, %o: the out directory
verbs_read_run() {  # $1=size $2=iterations $3=label [$4=JVM option] -> sets VB_BW (MiB/s), VB_CHECKED and VB_WIRE; 1 on failure
  VB_BW=""; VB_WIRE=""; VB_CHECKED=""
  local attempt
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
    wire_start "/tmp/wire-$3.txt"
    timeout 900 "$JAVA" "${JOPTS[@]}" ${4:-} $(bench_jopts "$3") -cp "$CP" org.rdmashuffle.transport.verbs.VerbsReadThroughput \
      $SIW_IP "$1" "$2" 128 > "/tmp/verbs-read-$3.log" 2>&1
    wire_stop
    crashed "/tmp/verbs-read-$3.log" || break
    echo "JVM crashed under emulation (attempt $attempt); hs_err frame:" >&2
    grep -A1 'Problematic frame' "/tmp/verbs-read-$3.log" >&2
    result "NOTE $3 attempt $attempt: the JVM crashed under emulation; running it again"
  done
  VB_BW=$(grep '^RESULT' "/tmp/verbs-read-$3.log" | sed 's/.*MiB\/s=//')
  VB_CHECKED=$(grep '^RESULT' "/tmp/verbs-read-$3.log" | grep -o 'checked=[0-9]*')
  [ -n "$VB_BW" ] || return 1
  # the wire's rate while the timed READs ran: the JVM's warm-up READs (a quarter as many, JIT still
  # compiling under emulation) are on the wire too, and ib_read_bw has no warm-up to leave out
  local timed; timed=$(grep '^RESULT' "/tmp/verbs-read-$3.log" | grep -o 'timed=[0-9.]*-[0-9.]*' | sed 's/timed=//')
  VB_WIRE=$(wire_rate "/tmp/wire-$3.txt" "${timed%-*}" "${timed#*-}")
}

if wants bench; then
  # Alternating rounds (ib_read_bw first in odd rounds, the provider first in even ones), both tools
  # keeping 128 READs outstanding on one queue pair; the target is the provider at >= BENCH_TARGET x
  # ib_read_bw (medians). A missing measurement or a READ with wrong bytes fails the part; the target
  # is reported, not enforced (emulation swings between boots).
  for size in 65536 1048576; do
    iters=$(( READ_ITERS * 65536 / size )); [ $iters -lt 200 ] && iters=200
    : > /tmp/bench-ib.txt; : > /tmp/bench-vb.txt; : > /tmp/bench-vn.txt; : > /tmp/bench-ibw.txt; : > /tmp/bench-vbw.txt; : > /tmp/bench-vd.txt
    for round in $(seq 1 "$BENCH_ROUNDS"); do
      tools=$BENCH_TOOLS
      [ $((round % 2)) = 1 ] || tools=$(echo $BENCH_TOOLS | tr ' ' '\n' | tac | tr '\n' ' ')
      for tool in $tools; do
        label=bench-$size-$round-$tool
        say "READ throughput at $size B, round $round: $tool ($iters READs)"
        if [ $tool = ib ]; then
          if ib_read_bw_run $size $iters $label; then
            result "bench siw size=$size round=$round ib_read_bw -e MiB/s=$IB_BW wire: $IB_WIRE"
            echo "$IB_BW" >> /tmp/bench-ib.txt; wire_keep "$IB_WIRE" /tmp/bench-ibw.txt
          else
            fail "bench siw size=$size round=$round: no valid ib_read_bw measurement in $IB_ATTEMPTS attempts"
          fi
        elif [ $tool = verbs-disni ]; then
          # The DiSNI provider on the same JVM, for the ratio between the two APIs (LIBDISNI set).
          if verbs_read_run $size $iters $label "-Dspark.shuffle.rdma.verbs.api=disni -Djava.library.path=$LIBDISNI"; then
            result "bench siw size=$size round=$round verbs-disni MiB/s=$VB_BW ($VB_CHECKED READs checked byte for byte) wire: $VB_WIRE"
            echo "$VB_BW" >> /tmp/bench-vd.txt
          else
            fail "bench siw size=$size round=$round: the DiSNI provider's run failed ($(grep -m1 -E 'Exception|Error' "/tmp/verbs-read-$label.log" | cut -c1-300))"
          fi
        elif [ $tool = verbs-nocheck ]; then
          # Diagnosis only (VERBS_VM_BENCH_TOOLS): the same run without the byte check, to show its cost.
          if verbs_read_run $size $iters $label -Drdma.bench.check=false; then
            result "bench siw size=$size round=$round verbs-nocheck MiB/s=$VB_BW (bytes NOT checked) wire: $VB_WIRE"
            echo "$VB_BW" >> /tmp/bench-vn.txt
          else
            fail "bench siw size=$size round=$round: the verbs-nocheck run failed"
          fi
        else
          if verbs_read_run $size $iters $label; then
            result "bench siw size=$size round=$round verbs MiB/s=$VB_BW ($VB_CHECKED READs checked byte for byte) wire: $VB_WIRE"
            echo "$VB_BW" >> /tmp/bench-vb.txt; wire_keep "$VB_WIRE" /tmp/bench-vbw.txt
          else
            tail -20 "/tmp/verbs-read-$label.log"
            fail "bench siw size=$size round=$round: the verbs provider's run failed ($(grep -m1 -E 'Exception|Error' "/tmp/verbs-read-$label.log" | cut -c1-300))"
          fi
        fi
      done
    done
    ib=$(median < /tmp/bench-ib.txt); vb=$(median < /tmp/bench-vb.txt)
    ibw=$(median < /tmp/bench-ibw.txt); vbw=$(median < /tmp/bench-vbw.txt)
    if [ "$ib" != none ] && [ "$vb" != none ]; then
      ratio=$(echo "scale=3; $vb / $ib" | bc)
      if [ "$ibw" != none ] && [ "$vbw" != none ]; then
        wratio=$(echo "scale=3; $vbw / $ibw" | bc)
        met=$(echo "$ratio >= $BENCH_TARGET && $wratio >= $BENCH_TARGET" | bc)
      else
        wratio=none; met=0   # no wire rate for one of the tools: the target is not shown met
      fi
      result "read-throughput siw size=$size medians of $(wc -l < /tmp/bench-ib.txt)+$(wc -l < /tmp/bench-vb.txt) runs: ib_read_bw -e $ib, verbs $vb MiB/s, ratio $ratio; wire $ibw vs $vbw MiB/s, ratio $wratio; target >= $BENCH_TARGET $([ "$met" = 1 ] && echo met || echo NOT met)"
      if [ -s /tmp/bench-vd.txt ]; then
        vd=$(median < /tmp/bench-vd.txt)
        result "read-throughput siw size=$size $API vs DiSNI on the same JVM: $vb vs $vd MiB/s, ratio $(echo "scale=3; $vb / $vd" | bc) (medians of $(wc -l < /tmp/bench-vb.txt)+$(wc -l < /tmp/bench-vd.txt) runs)"
      fi
      [ -s /tmp/bench-vn.txt ] && result "read-throughput siw size=$size diagnosis: verbs without the byte check, median $(median < /tmp/bench-vn.txt) MiB/s ($(wc -l < /tmp/bench-vn.txt) runs)"
    else
      fail "read-throughput siw size=$size: no medians (ib_read_bw: $ib, verbs: $vb)"
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
  api_used "/tmp/contract-$1.log" "contract $1"
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
  api_used /tmp/qp-control.log "qp-params rxe-control"
  trace_stop rxe-control
  grep '^RESULT' /tmp/qp-control.log | sed 's/^/  /'
  qp_params rxe-control rxe 2 5 /tmp/qp-control.log
fi

if wants spark; then
  say "Spark job with provider=verbs over siw, checked against Spark's sort shuffle"
  export SPARK_LOCAL_IP=$SIW_IP RDMA_SKIP_BUILD=1 RDMA_JAVA_OPTS="-Djava.library.path=$LIBPATH ${API_OPTS[*]} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ErrorFile=$rs_out/hs_err_pid%p.log"
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
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
  api_used /tmp/spark.log "spark siw" || rc=1
  if [ $rc = 0 ] && [ "${reads:-0}" -gt 0 ]; then
    result "spark siw PASS (job exit 0, results identical to sort shuffle, ${reads} READs over verbs)"
  else
    tail -40 /tmp/spark.log
    fail "spark siw rc=$rc verbs READs=${reads:-0}"
    cp /tmp/spark.log "$rs_out/" 2>/dev/null
  fi
fi
if wants spark; then
  # The seed's claim, measured: two executor JVMs (local-cluster[2,1,MB]), one serving and one reading,
  # under Spark's sort shuffle and under provider=verbs over siw in the same boot, alternating
  # applications (GuestFetchJob: placement, identical results, READs crossing executors, CPU per GB).
  say "fetch-bound job: two executor JVMs over siw, Spark's sort shuffle vs provider=verbs ($FETCH_ARGS)"
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
    rm -rf "$ROOT"/examples/target/spark-home/work   # the guest's overlay: executors' logs of this attempt only
    SPARK_HOME="$ROOT/examples/target/spark-home" SPARK_SCALA_VERSION=2.13 SPARK_LOCAL_IP=$SIW_IP \
      timeout 1800 "$JAVA" -Xmx768m -XX:+UseSerialGC "-XX:ErrorFile=$rs_out/hs_err_pid%p.log" "${opens[@]}" "-Djava.library.path=$LIBPATH" "${API_OPTS[@]}" \
      -Dspark.driver.host=$SIW_IP -Dspark.driver.bindAddress=$SIW_IP -cp "$FETCH_JAR:$RJ:$ROOT/examples/target/spark-home/jars/*" \
      org.rdmashuffle.vmbench.GuestFetchJob $FETCH_ARGS --jars "$FETCH_JAR,$RJ" \
      --conf "spark.executor.extraLibraryPath=$LIBPATH" --conf "spark.executor.extraJavaOptions=-XX:+UseSerialGC $NATIVE_ACCESS" \
      --rdma-conf spark.shuffle.rdma.provider=verbs --rdma-conf spark.shuffle.rdma.fallback=never \
      --rdma-conf spark.shuffle.rdma.verbs.api=$API > /tmp/fetch.log 2>&1
    rc=$?
    if crashed /tmp/fetch.log || ls "$ROOT"/examples/target/spark-home/work/*/*/hs_err* >/dev/null 2>&1; then
      result "NOTE fetch attempt $attempt: a JVM crashed under emulation; running it again"
      cp "$ROOT"/examples/target/spark-home/work/*/*/hs_err* "$rs_out/" 2>/dev/null
      continue
    fi
    break
  done
  cp /tmp/fetch.log "$rs_out/" 2>/dev/null
  grep -E '^(fetch job|FETCH|IDLE|results identical)|serving executor' /tmp/fetch.log | sed 's/^/  /'
  # (no process substitution: the guest has no /dev/fd, and the lines were silently lost)
  grep -E '^(FETCH|IDLE)' /tmp/fetch.log > /tmp/fetch-lines.txt
  while read -r line; do result "fetch siw $line"; done < /tmp/fetch-lines.txt
  if [ $rc = 0 ] && grep -q '^results identical' /tmp/fetch.log; then
    result "fetch siw PASS (two executor JVMs, every map on one and every reduce on the other, results identical under sort and verbs, READs only by the receiving executor)"
  else
    grep -E 'Exception|Error' /tmp/fetch.log | head -10
    tail -30 /tmp/fetch.log
    fail "fetch siw rc=$rc"
  fi
fi
if wants limits; then
  # A host limit, for real: the JVM's locked memory capped (siw checks it even for root), so that most
  # map outputs and receive buffers cannot be registered. They must go to Spark's own path (WARN lines),
  # and the job's results must still equal the sort shuffle's.
  say "Spark job with provider=verbs over siw under ulimit -l $LIMIT_KB KiB, checked against Spark's sort shuffle"
  export SPARK_LOCAL_IP=$SIW_IP RDMA_SKIP_BUILD=1 RDMA_JAVA_OPTS="-Djava.library.path=$LIBPATH ${API_OPTS[*]} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ErrorFile=$rs_out/hs_err_pid%p.log"
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
    ( ulimit -l $LIMIT_KB && timeout 1200 "$ROOT/examples/run-main-job.sh" --master 'local[2]' $SPARK_ARGS \
      --conf spark.shuffle.rdma.provider=verbs --conf spark.shuffle.rdma.fallback=auto \
      --conf spark.shuffle.rdma.localBlocksFromDisk=false --conf spark.shuffle.rdma.pool.chunkSize=512k \
      --conf spark.shuffle.rdma.pool.maxBufferSize=256k --out /tmp/limits-out ) > /tmp/limits.log 2>&1
    rc=$?
    crashed /tmp/limits.log || break
    result "NOTE limits attempt $attempt: the JVM crashed under emulation; running it again"
  done
  outputs=$(grep -c "left to the engine's own shuffle path" /tmp/limits.log)
  receive=$(grep -c "cannot get memory for receive buffers" /tmp/limits.log)
  left=$((outputs + receive))
  reads=$(grep -Eo 'verbs node [^ ]+ closed: [0-9]+ READs completed' /tmp/limits.log | grep -Eo '[0-9]+ READs' \
          | grep -Eo '^[0-9]+' | paste -sd+ | bc)
  grep -m3 "left to the engine's own shuffle path\|cannot get memory for receive buffers" /tmp/limits.log | cut -c1-400
  grep -E 'identical|differ|verbs node .* closed' /tmp/limits.log | tail -5
  if [ $rc = 0 ] && grep -q 'results identical' /tmp/limits.log && [ "$left" -gt 0 ]; then
    result "limits siw PASS (ulimit -l $LIMIT_KB KiB: job exit 0, results identical to sort shuffle; WARN lines: $outputs map outputs left to Spark's path, $receive receive memory refused; ${reads:-0} READs over verbs)"
  else
    tail -40 /tmp/limits.log
    fail "limits siw rc=$rc, WARN lines $left"
    cp /tmp/limits.log "$rs_out/" 2>/dev/null
  fi
fi
if wants fabric; then
  # Issue 34 on a fabric the guest builds itself. (a) The shuffle bound to a second interface: siw1 on
  # rdma1 ($SIW2_NET.0/24) while the block managers stay on dummy0 ($SIW_IP): the fetch-bound job with two
  # executor JVMs (GuestFetchJob, small) under Spark's sort shuffle and under provider=verbs,
  # fallback=never and bindAddress=rdma1; every executor's "serving on" address must be on rdma1's subnet
  # and its verbs node on siw1. (b) doctor over siw and over rxe: the device check and the READ self-test
  # between a --serve and a --peer JVM. (c) the readiness job (SparkSubmit with plain java,
  # local-cluster[2,1,MB]) over siw and rxe. (b) and (c) say "not in this build" when the plugin jar
  # lacks their class.
  if [ -x "$(dirname "$JAVA")/jar" ]; then "$(dirname "$JAVA")/jar" tf "$RJ"; else unzip -Z1 "$RJ"; fi > /tmp/plugin-entries.txt
  in_jar() { grep -qx "${1//.//}.class" /tmp/plugin-entries.txt; }
  DOCTOR=org.rdmashuffle.transport.doctor.Doctor
  READINESS=org.rdmashuffle.shuffle.ReadinessCheck
  SMALL=(-XX:+UseSerialGC -XX:TieredStopAtLevel=1 "-XX:ErrorFile=$rs_out/hs_err_pid%p.log" "-Djava.library.path=$LIBPATH")
  EXEC_JOPTS="-XX:+UseSerialGC -XX:TieredStopAtLevel=1 $NATIVE_ACCESS"

  say "fabric (a): the fetch-bound job with bindAddress=rdma1 (siw1, $SIW2_IP), block managers on dummy0 ($SIW_IP): $FABRIC_FETCH_ARGS"
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
    rm -rf "$SPARK_HOME_G/work"   # the guest's overlay: executors' logs of this attempt only
    SPARK_HOME=$SPARK_HOME_G SPARK_SCALA_VERSION=2.13 SPARK_LOCAL_IP=$SIW_IP \
      timeout 1200 "$JAVA" -Xmx512m "${SMALL[@]}" "${opens[@]}" "${API_OPTS[@]}" \
      -Dspark.driver.host=$SIW_IP -Dspark.driver.bindAddress=$SIW_IP -cp "$FETCH_JAR:$RJ:$SPARK_HOME_G/jars/*" \
      org.rdmashuffle.vmbench.GuestFetchJob $FABRIC_FETCH_ARGS --jars "$FETCH_JAR,$RJ" \
      --conf "spark.executor.extraLibraryPath=$LIBPATH" --conf "spark.executor.extraJavaOptions=$EXEC_JOPTS" \
      --rdma-conf spark.shuffle.rdma.provider=verbs --rdma-conf spark.shuffle.rdma.fallback=never \
      --rdma-conf spark.shuffle.rdma.verbs.api=$API --rdma-conf spark.shuffle.rdma.bindAddress=rdma1 > /tmp/fabric-bind.log 2>&1
    rc=$?
    if crashed /tmp/fabric-bind.log || ls "$SPARK_HOME_G"/work/*/*/hs_err* >/dev/null 2>&1; then
      result "NOTE fabric bind attempt $attempt: a JVM crashed under emulation; running it again"
      cp "$SPARK_HOME_G"/work/*/*/hs_err* "$rs_out/" 2>/dev/null
      continue
    fi
    break
  done
  cat "$SPARK_HOME_G"/work/*/*/stderr > /tmp/fabric-bind-executors.log 2>/dev/null
  cp /tmp/fabric-bind.log /tmp/fabric-bind-executors.log "$rs_out/" 2>/dev/null
  grep -E '^(FETCH |results identical)' /tmp/fabric-bind.log | sed 's/^/  /'
  grep -Eo 'rdma-shuffle executor [^ ]+ serving on [a-z]+://[^ :]+:[0-9]+' /tmp/fabric-bind-executors.log > /tmp/fabric-serving.txt
  grep -o 'verbs node listening on [^ ]* ([^ ]*' /tmp/fabric-bind-executors.log > /tmp/fabric-nodes.txt
  grep -o 'BlockManagerId([^)]*)' /tmp/fabric-bind-executors.log | sort -u > /tmp/fabric-bms.txt
  while read -r line; do result "fabric bind siw: $line"; done < /tmp/fabric-serving.txt
  while read -r line; do result "fabric bind siw: $line"; done < /tmp/fabric-nodes.txt
  bad=""
  [ $rc = 0 ] && grep -q '^results identical' /tmp/fabric-bind.log || bad+="job rc=$rc or results not identical to sort; "
  [ "$(wc -l < /tmp/fabric-serving.txt)" -ge 2 ] || bad+="$(wc -l < /tmp/fabric-serving.txt) executors logged their serving address (2 expected); "
  while read -r line; do   # the serving host, an address or a name (resolved in the guest), on rdma1's subnet
    host=${line##*://}; host=${host%:*}
    addr=$host
    [[ $host =~ ^[0-9.]+$ ]] || addr=$(getent ahostsv4 "$host" | awk 'NR == 1 {print $1}')
    [[ $addr == "$SIW2_NET".* ]] || bad+="'$line' is not on rdma1's $SIW2_NET.0/24 (host $host is ${addr:-unresolved}); "
  done < /tmp/fabric-serving.txt
  [ -s /tmp/fabric-nodes.txt ] && ! grep -vq '(siw1$' /tmp/fabric-nodes.txt || bad+="a verbs node is not on siw1 ($(tr '\n' ' ' < /tmp/fabric-nodes.txt)); "
  want=java.lang.foreign; [ "$API" = disni ] && want=DiSNI
  grep -q "through $want" /tmp/fabric-bind-executors.log || bad+="the executors' verbs nodes did not log 'through $want'; "
  if [ -z "$bad" ]; then
    result "fabric bind siw PASS (shuffle on rdma1/siw1 $SIW2_NET.0/24, block managers on $SIW_IP: $(tr '\n' ' ' < /tmp/fabric-bms.txt); results identical to sort; $(grep '^FETCH manager=rdma' /tmp/fabric-bind.log | grep -m1 -o 'reads_receiver=[0-9]*') in the rdma round)"
  else
    grep -E 'Exception|Error' /tmp/fabric-bind.log /tmp/fabric-bind-executors.log | head -10
    tail -20 /tmp/fabric-bind.log
    fail "fabric bind siw: $bad"
  fi

  # doctor_run LABEL IFACE ADDR: the device check bound to IFACE, then the READ self-test served on ADDR.
  DOCTOR_CP=$RJ${DOCTOR_CP_EXTRA:+:$DOCTOR_CP_EXTRA}
  # SPARK_HOME set as on a Spark host: doctor takes SLF4J from $SPARK_HOME/jars (the plugin jar has none)
  doctor=(env "SPARK_HOME=$SPARK_HOME_G" timeout 300 "$JAVA" -Xmx256m "${SMALL[@]}" "${API_OPTS[@]}" -cp "$DOCTOR_CP" $DOCTOR --conf spark.shuffle.rdma.verbs.api=$API)
  doctor_lines() {  # $1=label $2=stdout file: every line of doctor's output into the summary (at most 40)
    grep -v '^[[:space:]]*$' "$2" | head -40 > /tmp/doctor-lines.txt
    while read -r line; do result "fabric doctor $1: $line"; done < /tmp/doctor-lines.txt
  }
  doctor_run() {
    local label=$1 iface=$2 addr=$3 rc attempt spid serving port bad
    say "fabric (b): doctor over $label (--bind $iface), then the READ self-test on $addr"
    for attempt in $(seq 1 $CRASH_ATTEMPTS); do
      "${doctor[@]}" --provider verbs --bind "$iface" > "/tmp/doctor-$label.out" 2> "/tmp/doctor-$label.err"
      rc=$?
      crashed "/tmp/doctor-$label.out" || break
      result "NOTE fabric doctor $label attempt $attempt: the JVM crashed under emulation; running it again"
    done
    doctor_lines "$label" "/tmp/doctor-$label.out"
    cp "/tmp/doctor-$label.out" "/tmp/doctor-$label.err" "$rs_out/" 2>/dev/null
    if [ $rc = 0 ] && grep -q PASS "/tmp/doctor-$label.out"; then
      result "fabric doctor $label PASS (--provider verbs --bind $iface: exit 0, devices found)"
    else
      tail -15 "/tmp/doctor-$label.err"
      fail "fabric doctor $label: exit $rc ($(grep -m1 -E 'FAIL|Exception|Error|doctor:' "/tmp/doctor-$label.out" "/tmp/doctor-$label.err" | cut -c1-300))"
    fi
    for attempt in $(seq 1 $CRASH_ATTEMPTS); do
      "${doctor[@]}" --serve --bind "$addr" --provider verbs --serve-seconds 120 > "/tmp/doctor-serve-$label.out" 2>&1 &
      spid=$!
      serving=""
      for _ in $(seq 1 240); do   # JVM start under emulation: up to 120 s
        serving=$(grep -m1 -o 'doctor: serving READ self-test at verbs://[^ ]*' "/tmp/doctor-serve-$label.out")
        [ -n "$serving" ] || ! kill -0 $spid 2>/dev/null && break
        sleep 0.5
      done
      rc=99
      if [ -n "$serving" ]; then
        port=${serving##*:}
        "${doctor[@]}" --peer "$addr:$port" --bind "$addr" --provider verbs --reads 64 > "/tmp/doctor-peer-$label.out" 2> "/tmp/doctor-peer-$label.err"
        rc=$?
      else
        : > "/tmp/doctor-peer-$label.out"; : > "/tmp/doctor-peer-$label.err"
      fi
      kill $spid 2>/dev/null; wait $spid 2>/dev/null
      crashed "/tmp/doctor-serve-$label.out" || crashed "/tmp/doctor-peer-$label.out" || break
      result "NOTE fabric doctor self-test $label attempt $attempt: a JVM crashed under emulation; running it again"
    done
    cp "/tmp/doctor-serve-$label.out" "/tmp/doctor-peer-$label.out" "/tmp/doctor-peer-$label.err" "$rs_out/" 2>/dev/null
    [ -n "$serving" ] && result "fabric doctor self-test $label: $serving"
    doctor_lines "self-test $label" "/tmp/doctor-peer-$label.out"
    bad=""
    [ -n "$serving" ] || bad+="no 'doctor: serving READ self-test at verbs://' line from --serve; "
    [ $rc = 0 ] || bad+="--peer exit $rc; "
    grep -q PASS "/tmp/doctor-peer-$label.out" || bad+="no PASS line from --peer; "
    ! grep -q "^FAIL" "/tmp/doctor-peer-$label.out" || bad+="a FAIL line; "
    if [ -z "$bad" ]; then
      result "fabric doctor self-test $label PASS (--serve on $addr, --peer --reads 64)"
    else
      tail -n 15 "/tmp/doctor-serve-$label.out" "/tmp/doctor-peer-$label.out" "/tmp/doctor-peer-$label.err"
      fail "fabric doctor self-test $label: $bad"
    fi
  }
  if in_jar $DOCTOR; then
    doctor_run siw dummy0 $SIW_IP
    doctor_run rxe veth0 $RXE_IP
  else
    result "fabric doctor SKIP: not in this build ($DOCTOR is not in $(basename "$RJ"))"
  fi

  # readiness_run LABEL IP: ReadinessCheck through SparkSubmit's main (what spark-submit runs), two
  # executors on local-cluster, block managers and the shuffle on IP (SPARK_LOCAL_IP), strict posture.
  readiness_run() {
    local label=$1 ip=$2 rc attempt
    say "fabric (c): the readiness job over $label ($ip): $READINESS_ARGS"
    for attempt in $(seq 1 $CRASH_ATTEMPTS); do
      rm -rf "$SPARK_HOME_G/work"
      SPARK_HOME=$SPARK_HOME_G SPARK_SCALA_VERSION=2.13 SPARK_LOCAL_IP=$ip \
        timeout 1200 "$JAVA" -Xmx512m "${SMALL[@]}" "${opens[@]}" "${API_OPTS[@]}" -cp "$RJ:$SPARK_HOME_G/jars/*" \
        org.apache.spark.deploy.SparkSubmit --master "local-cluster[2,1,$FABRIC_EXECUTOR_MB]" \
        --conf spark.executor.memory=${FABRIC_EXECUTOR_MB}m --conf spark.driver.host=$ip --conf spark.driver.bindAddress=$ip \
        --conf spark.ui.enabled=false --conf spark.shuffle.manager=org.rdmashuffle.shuffle.RdmaShuffleManager \
        --conf spark.shuffle.rdma.provider=verbs --conf spark.shuffle.rdma.fallback=never \
        --conf spark.shuffle.rdma.verbs.api=$API --conf "spark.executor.extraLibraryPath=$LIBPATH" \
        --conf "spark.executor.extraJavaOptions=$EXEC_JOPTS" \
        --class $READINESS "$RJ" $READINESS_ARGS > "/tmp/readiness-$label.log" 2>&1
      rc=$?
      if crashed "/tmp/readiness-$label.log" || ls "$SPARK_HOME_G"/work/*/*/hs_err* >/dev/null 2>&1; then
        result "NOTE fabric readiness $label attempt $attempt: a JVM crashed under emulation; running it again"
        cp "$SPARK_HOME_G"/work/*/*/hs_err* "$rs_out/" 2>/dev/null
        continue
      fi
      break
    done
    cat "$SPARK_HOME_G"/work/*/*/stderr > "/tmp/readiness-$label-executors.log" 2>/dev/null
    cp "/tmp/readiness-$label.log" "/tmp/readiness-$label-executors.log" "$rs_out/" 2>/dev/null
    grep '^readiness:' "/tmp/readiness-$label.log" | head -40 > /tmp/readiness-lines.txt
    while read -r line; do result "fabric readiness $label: $line"; done < /tmp/readiness-lines.txt
    if [ $rc = 0 ] && [ -s /tmp/readiness-lines.txt ] && ! grep -qw -E 'FAIL|FAILED' /tmp/readiness-lines.txt; then
      result "fabric readiness $label PASS (exit 0, every pair OK, provider=verbs fallback=never)"
    else
      grep -E 'Exception|Error' "/tmp/readiness-$label.log" | head -10
      tail -20 "/tmp/readiness-$label.log"
      fail "fabric readiness $label: exit $rc, $(wc -l < /tmp/readiness-lines.txt) readiness lines, $(grep -cw -E 'FAIL|FAILED' /tmp/readiness-lines.txt) failing"
    fi
  }
  if in_jar $READINESS; then
    for d in $FABRIC_READINESS_ON; do
      case $d in
        siw) readiness_run siw $SIW_IP ;;
        rxe) readiness_run rxe $RXE_IP ;;
        *) fail "fabric readiness: unknown device '$d' in VERBS_VM_FABRIC_READINESS_ON (siw, rxe)" ;;
      esac
    done
  else
    result "fabric readiness SKIP: not in this build ($READINESS is not in $(basename "$RJ"))"
  fi
fi
if wants mapreduce; then
  # Issue 36: MapReduce over verbs. GuestMapReduceJob starts a MiniMRYarnCluster (two NodeManagers in one
  # JVM, rdma-shuffle's drop-in service as mapreduce_shuffle with provider=verbs, fallback=never, bound to
  # $SIW_IP: siw0) and runs one TeraSort under Hadoop's HTTP shuffle and once under rdma-shuffle (reducers
  # with the same settings). Task JVMs are this JDK with --enable-native-access. MiniYARNCluster names
  # every NodeManager "localhost", and reducers reach a map's service by that name: for this part the
  # name is dummy0's address (siw has no device on lo), restored afterwards.
  say "mapreduce: TeraSort on a MiniMRYarnCluster, the NodeManagers' rdma-shuffle service on $MR_PROVIDER over siw0's address ($SIW_IP), Hadoop's HTTP shuffle and rdma-shuffle: $MR_ARGS"
  cp /etc/hosts /tmp/hosts.saved
  printf '%s localhost verbs-vm\n::1 ip6-localhost ip6-loopback\n' $SIW_IP > /etc/hosts
  mr_crashed() {  # 0: a JVM crashed under emulation (run again); 1: none, or one in verbs code (the part fails)
    local f frame any=1
    for f in /tmp/mr-hs/hs_err*.log; do
      [ -e "$f" ] || continue
      cp "$f" "$rs_out/" 2>/dev/null
      frame=$(grep -A1 'Problematic frame' "$f" | tail -1)
      if echo "$frame" | grep -Eq 'libibverbs|librdmacm|libsiw|librxe|libdisni|rdmashuffle'; then
        fail "mapreduce siw: a JVM crashed in verbs code, not the emulator's fault: $frame ($(basename "$f") in $rs_out)"
        return 1
      fi
      any=0
    done
    return $any
  }
  for attempt in $(seq 1 $CRASH_ATTEMPTS); do
    rm -rf /tmp/mr-run /tmp/mr-hs && mkdir -p /tmp/mr-run /tmp/mr-hs
    mr_start=$(date +%s)
    ( cd /tmp/mr-run && timeout 2400 "$JAVA" -Xmx1g -XX:+UseSerialGC -XX:TieredStopAtLevel=1 --enable-native-access=ALL-UNNAMED \
        "-XX:ErrorFile=/tmp/mr-hs/hs_err_pid%p.log" -cp "$MR_CP" org.rdmashuffle.mapreduce.vm.GuestMapReduceJob \
        --provider "$MR_PROVIDER" --api "$API" --bind $SIW_IP $MR_ARGS --task-opts "-XX:ErrorFile=/tmp/mr-hs/hs_err_pid%p.log" ) > "$rs_out/mapreduce.log" 2>&1   # there while it runs
    rc=$?
    cp "$rs_out/mapreduce.log" /tmp/mapreduce.log
    mr_secs=$(( $(date +%s) - mr_start ))
    mr_crashed || break
    result "NOTE mapreduce attempt $attempt: a JVM crashed under emulation ($(grep -h -A1 'Problematic frame' /tmp/mr-hs/hs_err*.log | grep -v Problematic | head -1)); running it again"
  done
  cp /tmp/hosts.saved /etc/hosts
  # every container's syslog (AM, maps, reduces of both jobs), each under its path
  mr_dir=$(grep -m1 -o '^MRCLUSTER dir=[^ ]*' /tmp/mapreduce.log | cut -d= -f2)
  : > /tmp/mapreduce-containers.log
  if [ -n "$mr_dir" ]; then
    find "$mr_dir" -name syslog | sort > /tmp/mr-syslogs.txt
    while read -r f; do echo "==== $f"; cat "$f"; done < /tmp/mr-syslogs.txt >> /tmp/mapreduce-containers.log
  fi
  cp /tmp/mapreduce-containers.log "$rs_out/" 2>/dev/null
  grep -E '^MR' /tmp/mapreduce.log | cut -c1-400 | sed 's/^/  /'
  mr_field() { echo "$1" | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2; }   # LINE KEY -> value
  http_line=$(grep -m1 '^MRJOB shuffle=http' /tmp/mapreduce.log)
  rdma_line=$(grep -m1 '^MRJOB shuffle=rdma' /tmp/mapreduce.log)
  for s in http rdma; do
    l=$(grep -m1 "^MRJOB shuffle=$s" /tmp/mapreduce.log); v=$(grep -m1 "^MRSERVICE shuffle=$s" /tmp/mapreduce.log)
    [ -n "$l" ] && result "mapreduce siw $s: job_ms=$(mr_field "$l" job_ms) SHUFFLED_MAPS=$(mr_field "$l" SHUFFLED_MAPS) REDUCE_SHUFFLE_BYTES=$(mr_field "$l" REDUCE_SHUFFLE_BYTES) MAPS_READ=$(mr_field "$l" MAPS_READ) BYTES_READ=$(mr_field "$l" BYTES_READ) MAPS_VIA_HTTP=$(mr_field "$l" MAPS_VIA_HTTP) HOSTS_VIA_HTTP=$(mr_field "$l" HOSTS_VIA_HTTP) SERVICE_BUSY=$(mr_field "$l" SERVICE_BUSY) SERVICE_UNREACHABLE=$(mr_field "$l" SERVICE_UNREACHABLE) READ_FAILURES=$(mr_field "$l" READ_FAILURES) FAILED_SHUFFLE=$(mr_field "$l" FAILED_SHUFFLE)"
    [ -n "$v" ] && result "mapreduce siw $s cpu: services' threads $(mr_field "$v" http_threads_ms) ms (HTTP) + $(mr_field "$v" rdma_threads_ms) ms (rdma-*) for $(mr_field "$v" served_bytes) bytes served: $(mr_field "$v" service_cpu_s_per_gb) s per GB; whole cluster JVM $(mr_field "$l" cluster_cpu_ms) ms, $(mr_field "$l" cluster_cpu_s_per_gb) s per GB"
  done
  grep -o 'verbs node [^ ]* closed: [0-9]* READs completed ([0-9]* bytes), [0-9]* failed' /tmp/mapreduce-containers.log > /tmp/mr-closed.txt
  while read -r line; do result "mapreduce siw reducer: $line"; done < /tmp/mr-closed.txt
  grep -o 'verbs node listening on [^ ]* ([^,]*' /tmp/mapreduce.log | sort -u > /tmp/mr-service-nodes.txt
  while read -r line; do result "mapreduce siw service: $line"; done < /tmp/mr-service-nodes.txt
  reads=$(grep -Eo 'closed: [0-9]+ READs' /tmp/mr-closed.txt | grep -Eo '[0-9]+' | paste -sd+ | bc)
  # A verbs node carries its control path on a tcp node at the same address and port: a tcp node with
  # no verbs node there is the tcp provider.
  cat /tmp/mapreduce.log /tmp/mapreduce-containers.log | grep -o 'tcp node listening on tcp://[^ ]*' \
    | sed 's#.*tcp://##' | sort -u > /tmp/mr-tcp-at.txt
  cat /tmp/mapreduce.log /tmp/mapreduce-containers.log | grep -o 'verbs node listening on verbs://[^ ]*' \
    | sed 's#.*verbs://##' | sort -u > /tmp/mr-verbs-at.txt
  tcp_nodes=$(grep -vxF -f /tmp/mr-verbs-at.txt /tmp/mr-tcp-at.txt | tr '\n' ' ')
  reducers=$(grep -c 'Using ShuffleConsumerPlugin: org.rdmashuffle.mapreduce.RdmaShuffle' /tmp/mapreduce-containers.log)
  reducer_nodes=$(grep -c 'VerbsNode: verbs node listening on' /tmp/mapreduce-containers.log)
  want=java.lang.foreign; [ "$API" = disni ] && want=DiSNI
  bad=""
  [ $rc = 0 ] && grep -q '^MRCHECK outputs identical' /tmp/mapreduce.log \
    || bad+="exit $rc, $(grep -m1 '^MRCHECK' /tmp/mapreduce.log || echo 'no MRCHECK line'); "
  [ -n "$rdma_line" ] || bad+="no rdma-shuffle job; "
  if [ -n "$rdma_line" ]; then
    [ "$(mr_field "$rdma_line" MAPS_READ)" -gt 0 ] 2>/dev/null || bad+="MAPS_READ=$(mr_field "$rdma_line" MAPS_READ); "
    [ "$(mr_field "$rdma_line" BYTES_READ)" -gt 0 ] 2>/dev/null || bad+="BYTES_READ=$(mr_field "$rdma_line" BYTES_READ); "
    [ -n "$http_line" ] && [ "$(mr_field "$rdma_line" BYTES_READ)" = "$(mr_field "$http_line" REDUCE_SHUFFLE_BYTES)" ] \
      || bad+="BYTES_READ=$(mr_field "$rdma_line" BYTES_READ) is not Hadoop's REDUCE_SHUFFLE_BYTES=$(mr_field "$http_line" REDUCE_SHUFFLE_BYTES); "
    for k in MAPS_VIA_HTTP HOSTS_VIA_HTTP READ_FAILURES; do
      [ "$(mr_field "$rdma_line" $k)" = 0 ] || bad+="$k=$(mr_field "$rdma_line" $k); "
    done
  fi
  [ "${reads:-0}" -gt 0 ] || bad+="no reducer's verbs node completed a READ ($(wc -l < /tmp/mr-closed.txt) close lines); "
  [ -z "$tcp_nodes" ] || bad+="tcp nodes without a verbs node (the tcp provider) at $tcp_nodes; "
  [ "$reducers" -gt 0 ] && [ "$reducer_nodes" = "$reducers" ] || bad+="$reducer_nodes verbs nodes for $reducers rdma-shuffle reducers; "
  [ -s /tmp/mr-service-nodes.txt ] || bad+="no service verbs node listening; "
  grep -q "through $want" /tmp/mapreduce-containers.log || bad+="the reducers' verbs nodes did not log 'through $want'; "
  if [ -z "$bad" ]; then
    result "mapreduce siw PASS (TeraSort $MR_ARGS in ${mr_secs}s: outputs identical under Hadoop's HTTP shuffle and rdma-shuffle; MAPS_READ=$(mr_field "$rdma_line" MAPS_READ) BYTES_READ=$(mr_field "$rdma_line" BYTES_READ) = Hadoop's shuffle bytes, nothing over HTTP; ${reads} READs completed by the reducers' verbs nodes)"
  else
    # why: the service's or reducers' refusals, fallbacks and errors
    cat /tmp/mapreduce.log /tmp/mapreduce-containers.log | grep -E 'tcp provider only|refus|fell back|fallback|rdma-shuffle:.*(WARN|HTTP)|Exception|errno|failed' \
      | grep -v -e '^\s*at ' -e 'READs completed' -e '^MR' -e 'Interrupted' | cut -c1-400 | sort | uniq -c | sort -rn | head -25 > /tmp/mr-why.txt
    cat /tmp/mr-why.txt
    while read -r line; do result "mapreduce siw log: $line"; done < /tmp/mr-why.txt
    tail -30 /tmp/mapreduce.log
    fail "mapreduce siw (${mr_secs}s): $bad"
  fi
fi
say "done, failed=$failed"
exit $failed
