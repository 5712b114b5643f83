#!/usr/bin/env bash
# The verbs provider on a real iWARP stack (SoftiWARP) and on Soft-RoCE, on a machine whose kernel has
# no RDMA: boots Debian's own kernel in QEMU (software emulation), with siw and rxe loaded, and runs
# there the transport contract suite over siw and over rxe (parts siw, rxe), READ throughput next to
# ib_read_bw run without busy polling, every READ's bytes checked and the bytes on the wire counted for
# both tools (bench), a small Spark job with provider=verbs checked against Spark's sort shuffle and a
# fetch-bound job with two executor JVMs, one serving and one reading, under both managers, with
# each executor's and the guest's CPU per GB (spark), and the Spark job under a small locked-memory
# limit, ulimit -l VERBS_VM_LIMIT_KB, 1024 (limits). Around the contract runs kprobes show the
# connection parameters the kernel applied to the provider's queue pairs (qp-params lines). Part fabric
# (issue 34): a second siw device, siw1, on its own interface rdma1 (10.77.1.1/24) and the two-executor
# job with spark.shuffle.rdma.bindAddress=rdma1 (every executor serving on rdma1's subnet, verbs node on
# siw1, results equal to the sort shuffle's); doctor (device check, and the READ self-test between a
# --serve and a --peer JVM) over siw and rxe; the readiness job (ReadinessCheck through SparkSubmit on
# local-cluster) over siw and rxe, strict posture. Doctor and the readiness job are skipped, saying
# "not in this build", when the plugin jar lacks their class. Part mapreduce (issue 36): a TeraSort
# (GuestMapReduceJob, VERBS_VM_MR_ARGS) on a two-NodeManager MiniMRYarnCluster whose NodeManagers run
# rdma-shuffle's drop-in service with provider=verbs, fallback=never, bound to dummy0 (siw0), once under
# Hadoop's HTTP shuffle and once under rdma-shuffle: outputs identical, the job's READ counters > 0 with
# BYTES_READ equal to Hadoop's shuffle bytes, nothing over HTTP, and the reducers' verbs nodes' READs;
# with the services' CPU per GB served under both shuffles. Not in the default parts (it needs the
# verbs provider to serve realms, a protection domain per job).
#
#   benchmarks/verbs-vm/run.sh [--parts "bench siw rxe spark limits fabric mapreduce"]
#
# The provider reaches rdma-core through java.lang.foreign (VERBS_VM_API=ffm, the default): every JVM
# in the guest is a JDK 22+ (VERBS_VM_JAVA, default the newest under /usr/lib/jvm) with nothing but the
# rdma-core libraries, and no libdisni anywhere. With LIBDISNI_DIR=/dir/with/libdisni.so the bench part
# also measures the DiSNI provider on the same JVM, for the ratio between the two. VERBS_VM_API=disni
# runs every part through DiSNI instead (LIBDISNI_DIR required). libdisni is in no package registry:
# build it from DiSNI's source (docs/verbs.md says how) outside this repository. Needs root (apt-get, QEMU). Everything it downloads or builds is cached under
# target/verbs-vm (VERBS_VM_WORK), so a second run only builds the project and boots. Settings:
# VERBS_VM_KERNEL (Debian kernel ABI, default: the one matching linux-source-6.1), VERBS_VM_MEM (6G),
# VERBS_VM_TIMEOUT (seconds, 3600), VERBS_VM_SPARK_ARGS, VERBS_VM_READ_ITERS (64 KiB READs per size and
# run, 60000), VERBS_VM_BENCH_ROUNDS (alternating rounds per size, 3), VERBS_VM_BENCH_TARGET (the
# provider/ib_read_bw ratio reported as met or not, 0.9), VERBS_VM_BENCH_TOOLS ("ib verbs", and verbs-disni
# with ffm and LIBDISNI_DIR; add
# verbs-nocheck for a diagnosis run without the byte check), VERBS_VM_FETCH_ARGS (GuestFetchJob's
# options, "--mb 128 --warmups 1 --rounds 3 --order sort,rdma"), VERBS_VM_LIMIT_KB, VERBS_VM_BENCH_JOPTS
# (extra JVM options for the provider's bench runs, to profile them; %l is replaced by the
# run's label and %o by the out directory: -XX:StartFlightRecording=filename=%o/%l.jfr,settings=profile), VERBS_VM_TCG (QEMU's TCG threading: multi, one host thread per vCPU, or single),
# VERBS_VM_IB_OPTS (extra options of the ib_read_bw client, e.g. "-Q 1" for a completion per READ).
# Part fabric: VERBS_VM_FABRIC_FETCH_ARGS (GuestFetchJob's options for the bound job, "--mb 16 --maps 4
# --reducers 4 --warmups 0 --rounds 1 --order sort,rdma --executor-mb 768"), VERBS_VM_FABRIC_EXECUTOR_MB
# (the readiness job's executors, 768), VERBS_VM_READINESS_ARGS ("--mib 8 --reads 32"),
# VERBS_VM_FABRIC_READINESS_ON ("siw rxe"), VERBS_VM_DOCTOR_CP_EXTRA (class path entries after the
# plugin jar for doctor's JVMs; empty: the plugin jar alone, as docs tell users). Part mapreduce:
# VERBS_VM_MR_ARGS (GuestMapReduceJob's options, "--rows 40000 --maps 2 --reduces 2 --order http,rdma"),
# VERBS_VM_MR_PROVIDER (verbs; tcp runs the same jobs in the guest to check the harness itself, and fails
# the part: no READ over verbs).
# Measuring parts (bench, spark) load the machine: on a shared machine run under flock /tmp/bench.lock.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
parts="bench siw rxe spark limits fabric"
while [ $# -gt 0 ]; do
  case $1 in
    --parts) parts=$2; shift 2 ;;
    *) echo "usage: [VERBS_VM_API=ffm|disni] [LIBDISNI_DIR=<dir>] $0 [--parts \"bench siw rxe spark limits fabric mapreduce\"]" >&2; exit 2 ;;
  esac
done
api=${VERBS_VM_API:-ffm}
tcg=${VERBS_VM_TCG:-multi}
case $tcg in multi|single) ;; *) echo "VERBS_VM_TCG must be multi or single (got '$tcg')" >&2; exit 2 ;; esac
case $api in ffm|disni) ;; *) echo "VERBS_VM_API must be ffm or disni (got '$api')" >&2; exit 2 ;; esac
if [ -n "${LIBDISNI_DIR:-}" ] && [ ! -f "$LIBDISNI_DIR/libdisni.so" ]; then
  echo "LIBDISNI_DIR must name the folder holding libdisni.so (got '$LIBDISNI_DIR')." >&2
  exit 2
fi
if [ $api = disni ] && [ -z "${LIBDISNI_DIR:-}" ]; then
  echo "VERBS_VM_API=disni needs LIBDISNI_DIR, the folder holding libdisni.so. libdisni is not in any package" >&2
  echo "registry; build it from DiSNI's source as docs/verbs.md describes (or run the default, VERBS_VM_API=ffm)." >&2
  exit 2
fi
# The JDK the guest runs (ffm: 22+, which also compiles the provider's Java 22 classes).
ffm_jdk=${VERBS_VM_JAVA:-}
if [ -z "$ffm_jdk" ]; then
  best=0
  for j in /usr/lib/jvm/*/; do
    [ -x "$j/bin/javac" ] || continue
    v=$("$j/bin/java" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p' || true)
    if [ -n "$v" ] && [ "$v" -ge 22 ] 2>/dev/null && [ "$v" -gt "$best" ]; then best=$v; ffm_jdk=${j%/}; fi
  done
fi
if [ $api = ffm ] && { [ -z "$ffm_jdk" ] || [ ! -x "$ffm_jdk/bin/javac" ]; }; then
  echo "VERBS_VM_API=ffm needs a JDK 22+ (none under /usr/lib/jvm; set VERBS_VM_JAVA=<its home>)" >&2
  exit 2
fi
work=${VERBS_VM_WORK:-$root/target/verbs-vm}
mkdir -p "$work"
log() { echo "[verbs-vm $(date +%H:%M:%S)] $*"; }

# 1. Host tools (only what is missing).
need=()
for pair in qemu-system-x86_64:qemu-system-x86 busybox:busybox-static modprobe:kmod cpio:cpio bc:bc \
            ib_read_bw:perftest rdma:iproute2 ibv_devinfo:ibverbs-utils make:make gcc:gcc xz:xz-utils; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/libsiw-rdmav34.so ] || need+=(ibverbs-providers rdma-core)
dpkg -s librdmacm1 >/dev/null 2>&1 || need+=(librdmacm1)
if [ ${#need[@]} -gt 0 ]; then
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
[ -x /bin/busybox ] || { echo "busybox-static is needed at /bin/busybox" >&2; exit 1; }

# 2. Debian's kernel, unpacked (never installed), and siw.ko built from its source.
if [ -z "${VERBS_VM_KERNEL:-}" ]; then
  srcver=$(apt-cache policy linux-source-6.1 | awk '/Candidate:/ {print $2}')
  for img in $(apt-cache search --names-only '^linux-image-6\.1\.0-[0-9]+-amd64$' | awk '{print $1}' | sort -V -r); do
    if [ "$(apt-cache policy "$img" | awk '/Candidate:/ {print $2}')" = "$srcver" ]; then
      VERBS_VM_KERNEL=${img#linux-image-}; break
    fi
  done
fi
kv=${VERBS_VM_KERNEL:?no linux-image-6.1.0-*-amd64 matches linux-source-6.1; set VERBS_VM_KERNEL}
kdir=$work/kernel-$kv
if [ ! -f "$kdir/.unpacked" ]; then
  log "downloading Debian kernel $kv and its source (apt-get download)"
  rm -rf "$kdir" && mkdir -p "$kdir/debs" "$kdir/root" "$kdir/hdr"
  (cd "$kdir/debs" && apt-get download -q "linux-image-$kv" "linux-headers-$kv" "linux-headers-${kv%-amd64}-common" \
     linux-kbuild-6.1 linux-source-6.1 >/dev/null)
  dpkg -x "$kdir"/debs/linux-image-"$kv"_*.deb "$kdir/root"
  for d in "$kdir"/debs/linux-headers-*.deb "$kdir"/debs/linux-kbuild-*.deb "$kdir"/debs/linux-source-*.deb; do
    dpkg -x "$d" "$kdir/hdr"
  done
  touch "$kdir/.unpacked"
fi
siw=$kdir/root/lib/modules/$kv/extra/siw.ko
if [ ! -f "$siw" ]; then
  log "building siw.ko out of tree (Debian ships rdma_rxe but not siw)"
  h=$kdir/hdr/usr/src
  sed -i "s#^include /usr/src/#include $h/#" "$h/linux-headers-$kv/Makefile"
  tar -C "$kdir/hdr" -xJf "$h"/linux-source-6.1.tar.xz linux-source-6.1/drivers/infiniband/sw/siw
  rm -rf "$kdir/siw" && mkdir "$kdir/siw" && cp "$kdir"/hdr/linux-source-6.1/drivers/infiniband/sw/siw/* "$kdir/siw/"
  make -s -C "$h/linux-headers-$kv" M="$kdir/siw" CONFIG_RDMA_SIW=m modules
  mkdir -p "$(dirname "$siw")" && cp "$kdir/siw/siw.ko" "$siw"
  depmod -b "$kdir/root" "$kv"
fi

# The field offsets and constants guest.sh's kprobes read, from this kernel's own headers: qp-offsets.c
# compiled to assembly only (kbuild's asm-offsets technique); rebuilt when qp-offsets.c changes.
offsets=$work/qp-offsets-$kv.env
if [ ! -f "$offsets" ] || [ "$here/qp-offsets.c" -nt "$offsets" ]; then
  log "reading queue pair field offsets from the kernel's headers (qp-offsets.c)"
  h=$kdir/hdr/usr/src
  grep -q "^include $h/" "$h/linux-headers-$kv/Makefile" || sed -i "s#^include /usr/src/#include $h/#" "$h/linux-headers-$kv/Makefile"
  rm -rf "$kdir/qp-offsets" && mkdir "$kdir/qp-offsets" && cp "$here/qp-offsets.c" "$kdir/qp-offsets/"
  printf 'obj-m := qp-offsets.o\nccflags-y := -I%s\n' "$kdir/siw" > "$kdir/qp-offsets/Makefile"
  make -s -C "$h/linux-headers-$kv" M="$kdir/qp-offsets" qp-offsets.s
  sed -n 's/^[[:space:]]*\.ascii[[:space:]]*"->\([A-Z_]*\) \$\{0,1\}\([0-9]*\) .*/\1=\2/p' \
    "$kdir/qp-offsets/qp-offsets.s" > "$offsets.tmp"
  [ "$(grep -c = "$offsets.tmp")" -ge 20 ] || { echo "qp-offsets.s holds too few values" >&2; exit 1; }
  mv "$offsets.tmp" "$offsets"
fi

# 3. The initramfs (rebuilt when init changes).
initrd=$work/initramfs-$kv.cpio.gz
if [ ! -f "$initrd" ] || [ "$here/init" -nt "$initrd" ]; then
  log "building the initramfs"
  ir=$work/initramfs-root && rm -rf "$ir" && mkdir -p "$ir"/{bin,dev,proc,sys,lower,upper,newroot,mods}
  cp /bin/busybox "$ir/bin/busybox"
  for a in sh mount insmod mkdir switch_root echo poweroff; do ln -s busybox "$ir/bin/$a"; done
  : > "$ir/mods/order"
  for m in virtio_pci 9pnet_virtio 9p overlay; do
    modprobe -d "$kdir/root" -S "$kv" --show-depends "$m" | awk '$1 == "insmod" {print $2}' | while read -r f; do
      b=$(basename "$f")
      grep -qx "$b" "$ir/mods/order" || { cp "$f" "$ir/mods/$b"; echo "$b" >> "$ir/mods/order"; }
    done
  done
  cp "$here/init" "$ir/init" && chmod +x "$ir/init"
  (cd "$ir" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd"
fi

# 4. The project, and what the guest runs it with.
log "building the project (mvn package, tests skipped)"
ffm_build=()
[ -n "$ffm_jdk" ] && ffm_build=("-Dffm.jdk=$ffm_jdk")
modules=examples,rdma-transport,shuffle-manager/spark
[[ " $parts " == *" mapreduce "* ]] && modules+=,shuffle-manager/mapreduce   # GuestMapReduceJob, its test class path
(cd "$root" && mvn -B -ntp -q -DskipTests "${ffm_build[@]}" -pl "$modules" -am package \
   dependency:build-classpath -Dmdep.includeScope=test -Dmdep.outputFile=target/test.classpath)
# The fetch-bound Spark job of part spark (GuestFetchJob.java), compiled against Spark and the plugin.
fetch_jar=$work/guest-fetch-job.jar
rm -rf "$work/fetch-classes" && mkdir -p "$work/fetch-classes"
javac -nowarn -d "$work/fetch-classes" \
  -cp "$(ls "$root"/shuffle-manager/spark/target/rdma-shuffle-spark-4.2_2.13-*-plugin.jar):$root/examples/target/spark-home/jars/*" \
  "$here/GuestFetchJob.java"
(cd "$work/fetch-classes" && jar cf "$fetch_jar" .)
junit_platform=$(sed -n 's:.*<junit.version>5\.\([0-9.]*\)</junit.version>.*:1.\1:p' "$root/pom.xml")
console=$work/lib/junit-platform-console-standalone-$junit_platform.jar
if [ ! -f "$console" ]; then
  (cd "$root" && mvn -B -ntp -q dependency:copy \
     -Dartifact="org.junit.platform:junit-platform-console-standalone:$junit_platform" -DoutputDirectory="$work/lib")
fi
out=$work/out && rm -rf "$out" && mkdir -p "$out"
bench_tools="ib verbs"
[ $api = ffm ] && [ -n "${LIBDISNI_DIR:-}" ] && bench_tools="ib verbs verbs-disni"   # the two APIs, same JVM
cp_all="$root/rdma-transport/target/test-classes:$root/rdma-transport/target/classes:$(cat "$root/rdma-transport/target/test.classpath")"
if [ $api = ffm ]; then
  # Class directories are not multi-release: the Java 22 classes go first on the path themselves.
  cp_all="$root/rdma-transport/target/classes/META-INF/versions/22:$cp_all"
  java_home=$ffm_jdk
else
  java_home=$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")
fi
cat > "$out/env.sh" <<ENV
ROOT='$root'
API='$api'
LIBDISNI='${LIBDISNI_DIR:-}'
JAVA='$java_home/bin/java'
CP='$cp_all'
CONSOLE='$console'
PARTS='$parts'
SPARK_ARGS='${VERBS_VM_SPARK_ARGS:---records 200000 --partitions 4 --rounds 1}'
READ_ITERS='${VERBS_VM_READ_ITERS:-60000}'
BENCH_TOOLS='${VERBS_VM_BENCH_TOOLS:-$bench_tools}'
BENCH_ROUNDS='${VERBS_VM_BENCH_ROUNDS:-3}'
BENCH_TARGET='${VERBS_VM_BENCH_TARGET:-0.9}'
FETCH_JAR='$fetch_jar'
FETCH_ARGS='${VERBS_VM_FETCH_ARGS:---mb 128 --warmups 1 --rounds 3 --order sort,rdma}'
LIMIT_KB='${VERBS_VM_LIMIT_KB:-1024}'
BENCH_JOPTS='${VERBS_VM_BENCH_JOPTS:-}'
IB_OPTS='${VERBS_VM_IB_OPTS:-}'
FABRIC_FETCH_ARGS='${VERBS_VM_FABRIC_FETCH_ARGS:---mb 16 --maps 4 --reducers 4 --warmups 0 --rounds 1 --order sort,rdma --executor-mb 768}'
FABRIC_EXECUTOR_MB='${VERBS_VM_FABRIC_EXECUTOR_MB:-768}'
READINESS_ARGS='${VERBS_VM_READINESS_ARGS:---mib 8 --reads 32}'
FABRIC_READINESS_ON='${VERBS_VM_FABRIC_READINESS_ON:-siw rxe}'
DOCTOR_CP_EXTRA='${VERBS_VM_DOCTOR_CP_EXTRA:-}'
MR_ARGS='${VERBS_VM_MR_ARGS:---rows 40000 --maps 2 --reduces 2 --order http,rdma}'
MR_PROVIDER='${VERBS_VM_MR_PROVIDER:-verbs}'
ENV
if [[ " $parts " == *" mapreduce "* ]]; then
  # Absolute paths: task containers get this class path (a mini cluster hands them java.class.path), and
  # the reactor's rdma-transport jar is multi-release (its Java 22 classes for java.lang.foreign).
  mr=$root/shuffle-manager/mapreduce/target
  echo "MR_CP='$mr/test-classes:$mr/classes:$(cat "$mr/test.classpath")'" >> "$out/env.sh"
fi
: > "$out/summary.txt"
cp "$offsets" "$out/qp-offsets.env"

# 5. Boot (software emulation: this kernel cannot be booted under KVM here) and run guest.sh.
log "booting the guest (parts: $parts; verbs through $api on $("$java_home/bin/java" -version 2>&1 | head -1)); console in $out/console.log"
start=$(date +%s)
set +e
timeout "${VERBS_VM_TIMEOUT:-3600}" qemu-system-x86_64 -accel "tcg,thread=$tcg" -cpu qemu64 -machine q35 -smp 2 \
  -m "${VERBS_VM_MEM:-6G}" -nographic -no-reboot -nodefaults -serial stdio -monitor none \
  -kernel "$kdir/root/boot/vmlinuz-$kv" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=4 panic=-1 rs_out=$out rs_stage2=$here/stage2.sh rs_guest=$here/guest.sh rs_modules=$kdir/root/lib/modules" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$out,mount_tag=out,security_model=none,multidevs=remap" \
  -device virtio-rng-pci < /dev/null 2>&1 | tee "$out/console.log"
set -e
rc=$(cat "$out/guest-rc" 2>/dev/null || echo 99)
log "guest finished in $(( $(date +%s) - start )) s with exit code $rc (99: it never reported)"
echo "---- summary ($out/summary.txt)"
cat "$out/summary.txt"
exit "$rc"
