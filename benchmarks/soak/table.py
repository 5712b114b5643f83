"""Tabulates the soak's CSVs (SoakJob) in a folder as Markdown, sampled along the run, into results.md.

    python3 benchmarks/soak/table.py benchmarks/target/soak
"""
import csv, os, sys
out = sys.argv[1]
def rows(name):
    p = os.path.join(out, name)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
def marks(n):
    return sorted({1, *[k for k in (10, 25, 50, 100, 150, 200, 300, 500) if k < n], n})
lines = ["## One application, shuffles cleaned by the ContextCleaner (per executor, worst of the executors)", "",
         "| manager | after shuffle | registered output bytes | output tables | shuffle files | mappings of them | open fds | threads (Spark's storage pool apart) | storage-pool threads | direct MiB | shuffle ms | READs so far | to Spark's path |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for m in ("sort", "rdma"):
    r = rows("soak-shuffles-%s.csv" % m)
    if not r:
        continue
    n = max(int(x["shuffle"]) for x in r)
    for k in marks(n):
        at = [x for x in r if int(x["shuffle"]) == k]
        mx = lambda f: max(int(x[f]) for x in at)
        pool = max(int(x["threads"]) - int(x["otherThreads"]) for x in at)
        total = lambda f: sum(int(x.get(f) or 0) for x in at)
        lines.append("| %s | %d | %d | %d | %d | %d | %d | %d | %d | %.1f | %d | %d | %d |" % (
            m, k, mx("registeredOutputBytes"), mx("tables"), mx("shuffleFiles"), mx("shuffleMappings"),
            mx("openFds"), mx("otherThreads"), pool, mx("directBytes") / 2**20, mx("jobMs"),
            total("readsCompleted"), total("sparkPathFallbacks")))
lines += ["", "## Applications in a row in one driver JVM", "",
          "| manager | after application | executors' registered output bytes | executors' shuffle files | driver open fds | driver threads | driver direct MiB | local dirs left | app ms | executors' READs | to Spark's path |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for m in ("sort", "rdma"):
    r = rows("soak-apps-%s.csv" % m)
    if not r:
        continue
    for k in marks(len(r)):
        x = r[k - 1]
        lines.append("| %s | %d | %s | %s | %s | %s | %.1f | %s | %s | %s | %s |" % (m, k, x["executorsRegisteredOutputBytes"],
            x["executorsShuffleFiles"], x["driverOpenFds"], x["driverThreads"], int(x["driverDirectBytes"]) / 2**20,
            x["localDirsLeft"], x["appMs"], x.get("executorsReads") or "-", x.get("executorsSparkPathFallbacks") or "-"))
text = "\n".join(lines) + "\n"
open(os.path.join(out, "results.md"), "w").write(text)
print(text)
