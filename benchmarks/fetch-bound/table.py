#!/usr/bin/env python3
"""Tables of benchmarks/fetch-bound/run.sh: per run and medians per mode and manager.

usage: table.py results.jsonl iperf3.jsonl

fetch MB/s = remote bytes read by the reduce stage / the reduce stage's time (10^6 bytes per MB);
iperf3 = mean of the measurements just before and just after the run on the same link and direction;
CPU s/GB = process utime + stime of an executor over the reduce job / 10^9 bytes it served or received.
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def cpu_s(run, ex):
    e = run.get("executors", {}).get(ex)
    return None if e is None or e["cpuTicks"] < 0 else e["cpuTicks"] / run["ticksPerSecond"]


def derive(r):
    if r.get("outcome") != "correct":
        return None
    d = {"mode": r["mode"], "manager": r["manager"], "round": r["round"], "cold": r.get("cold", False)}
    gb = r["remoteBytes"] / 1e9
    d["MBps"] = r["remoteBytes"] / 1e6 / (r["reduceStageMs"] / 1000)
    ip = [x for x in (r.get("iperfBeforeMBps"), r.get("iperfAfterMBps")) if x]
    d["iperf"] = sum(ip) / len(ip) if ip else None
    d["frac"] = d["MBps"] / d["iperf"] if d["iperf"] else None
    d["stageS"] = r["reduceStageMs"] / 1000
    d["fetchWaitS"] = r["fetchWaitMs"] / 1000
    if r["mode"] == "oneway":
        s, g = r["servingExecutor"], r["readingExecutor"]
        d["serveCpu"] = cpu_s(r, s) / gb
        d["recvCpu"] = cpu_s(r, g) / gb
        d["recvThreads"] = {k: v / r["ticksPerSecond"] / gb for k, v in r["executors"][g]["threads"].items()}
        d["serveThreads"] = {k: v / r["ticksPerSecond"] / gb for k, v in r["executors"][s]["threads"].items()}
    else:
        total = sum(cpu_s(r, ex) for ex in r["executors"])
        d["serveCpu"] = None
        d["recvCpu"] = total / gb  # both executors' CPU per GB moved (each serves and receives half)
        d["recvThreads"] = {}
        for ex in r["executors"].values():
            for k, v in ex["threads"].items():
                d["recvThreads"][k] = d["recvThreads"].get(k, 0) + v / r["ticksPerSecond"] / gb
        d["serveThreads"] = {}
    d["checksum"] = r["got"]
    return d


def fmt(x, p=2):
    return "–" if x is None else ("%." + str(p) + "f") % x


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    runs = load(sys.argv[1])
    bad = [r for r in runs if r.get("outcome") != "correct"]
    rows = [d for d in (derive(r) for r in runs) if d]
    out = []
    out.append("Per run (reduce stage only; MB = 10^6 bytes; CPU = process utime+stime per 10^9 bytes):\n")
    out.append("| mode | manager | round | reduce stage s | fetch MB/s | iperf3 MB/s | fraction of iperf3 "
               "| serving CPU s/GB | receiving CPU s/GB | fetch wait s |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in rows:
        out.append("| %s%s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            d["mode"], " (cold)" if d["cold"] else "", d["manager"], d["round"], fmt(d["stageS"]), fmt(d["MBps"], 0),
            fmt(d["iperf"], 0), fmt(d["frac"]), fmt(d["serveCpu"]), fmt(d["recvCpu"]), fmt(d["fetchWaitS"])))
    out.append("\n(bothways: \"receiving CPU\" is both executors' CPU per GB moved; each serves and receives half.)\n")
    out.append("Medians:\n")
    out.append("| mode | manager | runs | fetch MB/s | × sort | fraction of iperf3 | serving CPU s/GB | × sort "
               "| receiving CPU s/GB | × sort |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    modes = []
    for d in rows:
        if (d["mode"], d["cold"]) not in modes:
            modes.append((d["mode"], d["cold"]))
    for mode, cold in modes:
        m = {}
        for mgr in ("sort", "rdma"):
            sel = [d for d in rows if d["mode"] == mode and d["cold"] == cold and d["manager"] == mgr]
            if sel:
                m[mgr] = {k: med([d[k] for d in sel]) for k in ("MBps", "frac", "serveCpu", "recvCpu")}
                m[mgr]["n"] = len(sel)
        for mgr, v in m.items():
            base = m.get("sort")
            ratio = (lambda k: fmt(v[k] / base[k]) if base and v[k] and base[k] else "–")
            out.append("| %s%s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
                mode, " (cold)" if cold else "", mgr, v["n"], fmt(v["MBps"], 0), ratio("MBps"), fmt(v["frac"]),
                fmt(v["serveCpu"]), ratio("serveCpu"), fmt(v["recvCpu"]), ratio("recvCpu")))
    out.append("\nReceiving executor's CPU by thread (median s/GB; oneway; threads named as the kernel keeps them):\n")
    for mode, cold in modes:
        if mode != "oneway":
            continue
        for side in ("recvThreads", "serveThreads"):
            out.append("%s%s, %s:\n" % (mode, " (cold)" if cold else "", "receiving" if side == "recvThreads" else "serving"))
            out.append("| thread | sort | rdma |")
            out.append("| --- | --- | --- |")
            names = set()
            for d in rows:
                if d["mode"] == mode and d["cold"] == cold:
                    names.update(d[side])
            meds = {}
            for n in names:
                meds[n] = {mgr: med([d[side].get(n, 0) for d in rows if d["mode"] == mode and d["cold"] == cold
                                     and d["manager"] == mgr]) for mgr in ("sort", "rdma")}
            for n in sorted(names, key=lambda n: -max(x or 0 for x in meds[n].values())):
                if max(x or 0 for x in meds[n].values()) >= 0.01:
                    out.append("| `%s` | %s | %s |" % (n, fmt(meds[n]["sort"]), fmt(meds[n]["rdma"])))
            out.append("")
    sums = sorted(set(d["checksum"] for d in rows))
    out.append("Checksums (records/bytes/index sum/index xor-hash/wrong words) of correct runs: %s" % ", ".join(sums))
    out.append("Runs not correct: %d%s" % (len(bad), "".join(
        "\n- %s/%s round %s: %s %s" % (r.get("mode"), r.get("manager"), r.get("round"), r.get("outcome"),
                                       r.get("misplaced", "")) for r in bad)))
    ip = load(sys.argv[2])
    out.append("\niperf3 (MB/s, each run's before/after): " + ", ".join(
        "%s %s" % (x["label"], fmt(x["MBps"], 0)) for x in ip))
    print("\n".join(out))


if __name__ == "__main__":
    main()
