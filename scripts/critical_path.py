#!/usr/bin/env python3
"""Prints the critical path of a depengine trace file: the chain of ops and waits that set the length of the recorded
window (docs/pictures.md, "The critical path").

    scripts/critical_path.py TRACE.json

Reads the op slices ("cat":"op") and why each op waited (their args "wait_kind", "waited_for_op", "pushed_ts",
"ready_ts", "waited on"; engine/detail/trace_recorder.h) and walks back from the op that ended last, as the engine does
(engine/detail/critical_path.h): the same text as Engine::TraceCriticalPath() prints for the same trace. Works on any
trace the engine wrote, flushed ones (FlushTrace, a stall report) included.
"""
import json
import sys


def ms(ns):
    return "%.3f" % (ns / 1e6)


def ns(us):
    return round(us * 1000)


def load(path):
    with open(path) as file:
        trace = json.load(file)
    lanes = {}
    ops = {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            lanes[event["tid"]] = event["args"]["name"]
    for event in trace["traceEvents"]:
        if event.get("ph") != "X" or event.get("cat") != "op":
            continue
        args = event["args"]
        op = args["op"]
        name = event["name"]
        kind = args.get("wait_kind", "")
        ops[op] = {
            "op": op,
            "label": ("'%s' " % name if name else "") + "(op %d)" % op,
            "lane_id": event["tid"],
            "lane": lanes.get(event["tid"], "?"),
            "start": ns(event["ts"]),
            "end": ns(event["ts"] + event["dur"]),
            "pushed": ns(args["pushed_ts"]) if "pushed_ts" in args else -1,
            "ready": ns(args["ready_ts"]) if "ready_ts" in args else -1,
            "from": args.get("waited_for_op", 0) if kind in ("variable", "fence", "device") else 0,
            "reason": args.get("waited on", ""),
        }
    return ops


def critical_path(ops):
    if not ops:
        return []
    by_lane = {}
    for op in ops.values():
        by_lane.setdefault(op["lane_id"], []).append(op)
    for lane in by_lane.values():
        lane.sort(key=lambda op: (op["end"], op["op"]))
    at = max(ops.values(), key=lambda op: (op["end"], -op["op"]))
    steps = []  # last step first
    taken = set()
    while True:
        taken.add(at["op"])
        steps.append(("run", at["start"], at["end"], at["label"] + " ran on " + at["lane"]))
        if at["ready"] < 0:
            break
        holder = ops.get(at["from"]) if at["from"] != 0 and at["from"] not in taken else None
        released = max(at["ready"], holder["end"]) if holder is not None else at["ready"]
        # The op that ran last on its lane before it started: if that ended after the op could run, the lane held it.
        busy = None
        for op in reversed(by_lane[at["lane_id"]]):
            if op["end"] <= at["start"] and op is not at and op["op"] not in taken:
                busy = op
                break
        if busy is not None and busy["end"] > released:
            if busy["end"] < at["start"]:
                steps.append(("queued", busy["end"], at["start"],
                              at["label"] + " queued (ready, its lane busy with " + busy["label"] + ")"))
            at = busy
            continue
        queued = min(released, at["start"])
        if queued < at["start"]:
            steps.append(("queued", queued, at["start"], at["label"] + " queued (ready, not started)"))
        if holder is not None:
            if holder["end"] < queued:
                steps.append(("wait", holder["end"], queued, at["label"] + " waited for " + at["reason"]))
            at = holder
            continue
        pushed = min(at["pushed"], at["ready"]) if at["pushed"] >= 0 else at["ready"]
        if pushed < at["ready"]:
            steps.append(("wait", pushed, at["ready"], at["label"] + " waited for " + at["reason"]))
        steps.append(("push", pushed, pushed, "push of " + at["label"]))
        break
    steps.reverse()
    return steps


def text(path, traced):
    if not path:
        return "critical path: no op was recorded\n"
    ran = sum(end - start for kind, start, end, _ in path if kind == "run")
    waited = sum(end - start for kind, start, end, _ in path if kind == "wait")
    queued = sum(end - start for kind, start, end, _ in path if kind == "queued")
    runs = sum(1 for kind, _, _, _ in path if kind == "run")
    first, last = path[0][1], path[-1][2]
    out = "critical path: %s ms, from %s to %s ms: %d of %d ops ran %s ms, waited %s ms, queued %s ms\n" % (
        ms(last - first), ms(first), ms(last), runs, traced, ms(ran), ms(waited), ms(queued))
    out += "     at (ms)   took (ms)\n"
    for _, start, end, what in path:
        out += "%12.3f %11.3f  %s\n" % (start / 1e6, (end - start) / 1e6, what)
    return out


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: critical_path.py TRACE.json\n")
        return 2
    ops = load(argv[1])
    sys.stdout.write(text(critical_path(ops), len(ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
