"""Tabulates the fault harness's results (one JSON object per run) as Markdown.

    python3 benchmarks/faults/table.py results.jsonl [results.md]

Per fault and shuffle manager: runs, correct results, wrong ones, failed jobs, median job time, median
stage retries, fetch failures and lost executors, and the time from the fault's injection to the
job's end (median and range); for rdma-shuffle also its median over the sort shuffle's under the
same fault; and the runs in which a fetch failure named a healthy host (any host but rfC, 10.202.0.3,
where every fault is injected; with no fault, any host).
"""
import json
import statistics
import sys


FAULT_HOST = "10.202.0.3"  # rfC


def med(values):
    return statistics.median(values) if values else None


def fmt(v, spec="%.1f"):
    return "-" if v is None else spec % v


def main(args):
    rows = [json.loads(line) for line in open(args[0]) if line.strip()]
    keys = []
    for r in rows:
        k = (r["fault"], r.get("manager", "?"))
        if k not in keys:
            keys.append(k)
    out = ["| fault | manager | runs | correct | wrong | failed | median job (s) | median stage retries "
           "| median fetch failures | median executors lost | fault → job end, median (s) | range (s) "
           "| rdma / sort (median fault → end) | runs blaming a healthy host |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    recovery = {}
    for fault, manager in keys:
        rs = [r for r in rows if r["fault"] == fault and r.get("manager") == manager]
        ok = [r for r in rs if r["outcome"] == "correct"]
        rec = [(r["endEpochMs"] - r["injectedEpochMs"]) / 1000 for r in rs
               if r.get("injectedEpochMs") and r.get("endEpochMs")]
        recovery[(fault, manager)] = med(rec)
        ratio = "-"
        if manager == "rdma" and recovery.get((fault, "sort")) and med(rec):
            ratio = "%.2f" % (med(rec) / recovery[(fault, "sort")])
        faulty = () if fault == "none" else (FAULT_HOST,)
        blaming = sum(1 for r in rs if any(h not in faulty for h in r.get("blamedHosts", [])))
        out.append("| %s | %s | %d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %d |" % (
            fault, manager, len(rs), len(ok), sum(r["outcome"] == "wrong" for r in rs),
            sum(r["outcome"] not in ("correct", "wrong") for r in rs),
            fmt(med([r["jobMs"] / 1000 for r in ok])), fmt(med([r["stageRetries"] for r in rs]), "%g"),
            fmt(med([r.get("fetchFailures", 0) for r in rs]), "%g"),
            fmt(med([r.get("executorsLost", 0) for r in rs]), "%g"), fmt(med(rec)),
            "%.1f–%.1f" % (min(rec), max(rec)) if rec else "-", ratio, blaming))
    text = "\n".join(out) + "\n"
    if len(args) > 1:
        open(args[1], "w").write(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
