#!/usr/bin/env python3
"""Table of benchmarks/scaling/run.sh: per size and manager, medians over rounds, ratio rdma/sort.

usage: table.py results.jsonl
"""
import json
import statistics
import sys


def med(xs):
    return statistics.median(xs) if xs else None


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    wrong = [r for r in rows if not r["correct"]]
    sizes = []
    for r in rows:
        if r["size"] not in sizes:
            sizes.append(r["size"])
    sizes.sort(key=lambda s: [int(x) for x in s.split("x")])
    out = ["| maps × reducers | blocks | manager | runs | reduce stage s (per run) | reduce stage µs/block "
           "| executor CPU µs/block (per run) | transport threads µs/block | task CPU µs/block | rdma/sort stage | rdma/sort CPU |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s in sizes:
        m = {}
        for mgr in ("sort", "rdma"):
            sel = [r for r in rows if r["size"] == s and r["manager"] == mgr and r["correct"]]
            if not sel:
                continue
            b = sel[0]["blocks"]
            m[mgr] = {
                "n": len(sel), "b": b,
                "stage": med([r["reduceStageMs"] / 1000 for r in sel]),
                "stages": [r["reduceStageMs"] / 1000 for r in sel],
                "cpu": med([r["executorCpuMs"] * 1000 / b for r in sel]),
                "cpus": [r["executorCpuMs"] * 1000 / b for r in sel],
                "transport": med([r["transportThreadCpuMs"] * 1000 / b for r in sel]),
                "task": med([r["taskCpuMs"] * 1000 / b for r in sel]),
            }
        for mgr, v in m.items():
            ratio_stage = ratio_cpu = "–"
            if mgr == "rdma" and "sort" in m:
                ratio_stage = "%.2f" % (v["stage"] / m["sort"]["stage"])
                ratio_cpu = "%.2f" % (v["cpu"] / m["sort"]["cpu"]) if m["sort"]["cpu"] else "–"
            out.append("| %s | %d | %s | %d | %.2f (%s) | %.1f | %.1f (%s) | %.1f | %.1f | %s | %s |" % (
                s.replace("x", " × "), v["b"], mgr, v["n"], v["stage"], ", ".join("%.2f" % x for x in v["stages"]),
                v["stage"] * 1e6 / v["b"], v["cpu"], ", ".join("%.1f" % x for x in v["cpus"]), v["transport"],
                v["task"], ratio_stage, ratio_cpu))
    out.append("\nexecutor CPU = utime+stime of both executor processes over the reduce job; transport threads ="
               " rdma-tcp-* (rdma) or shuffle-* Netty threads (sort); task CPU = Spark's executorCpuTime.")
    out.append("Wrong results: %d" % len(wrong))
    print("\n".join(out))


if __name__ == "__main__":
    main()
