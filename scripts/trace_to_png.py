#!/usr/bin/env python3
"""Renders a depengine Chrome trace-event JSON file to a PNG timeline.

Draws one lane per thread or device stream (ordered by thread_sort_index,
labelled with thread_name), each op slice ("X") as a bar coloured by its name
with the trailing index stripped ("forward 3" -> "forward"), the dependency
flows ("s" -> "f", op A released op B) as thin translucent lines, and, below
on the same time axis, every counter ("C") series as a step plot. Time is in
milliseconds from the first event. The whole trace is also readable in
chrome://tracing or https://ui.perfetto.dev; this is for a static picture.

    python3 scripts/trace_to_png.py TRACE.json OUT.png \\
        [--start-ms A --end-ms B] [--title T] [--no-flows]

--start-ms/--end-ms crop to a window (ms from the first event), e.g. a few
training steps. Needs matplotlib (scripts/setup.sh installs it).
"""

import argparse
import json
import os
import re
import sys

MAX_FLOWS = 2000  # more arrows than this is ink, not information
MAX_LEGEND = 20


def fail(message):
    """Exits with a one-line message instead of a traceback."""
    sys.exit(f"trace_to_png: {message}")


def load_events(path):
    """Returns the traceEvents list of the JSON file at path.

    Accepts the object form ({"traceEvents": [...]}) and the bare array form.
    """
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        fail(f"{path} is not valid JSON: {e}")
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        fail(f"{path} has no traceEvents list")
    return [e for e in events if isinstance(e, dict)]


def base_name(name):
    """Strips a trailing index: "forward 3" and "forward 4" share a colour."""
    return re.sub(r"[\s_#:.-]*\d+$", "", name) or name


def parse(events):
    """Splits events into lanes, slices, flows and counters, times in us."""
    names, order = {}, {}
    slices, flow_ends, counters = [], {}, {}
    t0 = float("inf")
    for e in events:
        ph, tid = e.get("ph"), e.get("tid", 0)
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        if ph == "M" and e.get("name") == "thread_name":
            names[tid] = str(args.get("name", tid))
            continue
        if ph == "M" and e.get("name") == "thread_sort_index":
            order[tid] = args.get("sort_index", 0)
            continue
        if "ts" not in e:
            continue
        ts = float(e["ts"])
        t0 = min(t0, ts)
        if ph == "X":
            name = str(e.get("name", "?"))
            slices.append((tid, ts, float(e.get("dur", 0)), base_name(name)))
        elif ph in ("s", "f"):
            flow_ends.setdefault(e.get("id"), {})[ph] = (ts, tid)
        elif ph == "C":
            series = counters.setdefault(str(e.get("name", "?")), {})
            for key, value in args.items():
                if isinstance(value, (int, float)):
                    series.setdefault(str(key), []).append((ts, float(value)))
    flows = [(p["s"], p["f"]) for p in flow_ends.values() if len(p) == 2]
    tids = set(names) | {s[0] for s in slices}
    lanes = sorted(tids, key=lambda t: (order.get(t, 0), str(t)))
    labels = [names.get(t, f"tid {t}") for t in lanes]
    return lanes, labels, slices, flows, counters, t0


def colour_map(slices):
    """Maps each base name to a colour, in name order."""
    import matplotlib.pyplot as plt

    bases = sorted({s[3] for s in slices})
    cmap = plt.get_cmap("tab10" if len(bases) <= 10 else "tab20")
    return {b: cmap(i % cmap.N) for i, b in enumerate(bases)}


def draw_slices(ax, lane_y, slices, colours, to_ms):
    """Draws slices as bars, one collection per (base name, lane)."""
    from matplotlib.patches import Patch

    busy = {}
    for tid, ts, dur, name in slices:
        busy[name] = busy.get(name, 0.0) + dur
    bars = {}
    for tid, ts, dur, name in slices:
        bars.setdefault((name, tid), []).append((to_ms(ts), dur / 1000.0))
    for (name, tid), xranges in bars.items():
        ax.broken_barh(xranges, (lane_y[tid] - 0.4, 0.8),
                       facecolors=colours[name], edgecolor="none")
    shown = sorted(busy, key=lambda b: -busy[b])[:MAX_LEGEND]
    handles = [Patch(color=colours[b], label=b) for b in shown]
    if len(busy) > len(shown):
        more = f"+{len(busy) - len(shown)} more"
        handles.append(Patch(color="white", label=more))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1),
              fontsize="small", title="op", frameon=False)


def draw_flows(ax, lane_y, flows, to_ms):
    """Draws up to MAX_FLOWS flows as lines; returns how many were drawn."""
    from matplotlib.collections import LineCollection

    flows = sorted(flows, key=lambda flow: flow[0][0])
    if len(flows) > MAX_FLOWS:
        flows = [flows[i * len(flows) // MAX_FLOWS] for i in range(MAX_FLOWS)]
    segments = [((to_ms(s[0]), lane_y[s[1]]), (to_ms(f[0]), lane_y[f[1]]))
                for s, f in flows]
    ax.add_collection(LineCollection(segments, colors="black", linewidths=0.4,
                                     alpha=0.25, zorder=3))
    ax.scatter([b[0] for _, b in segments], [b[1] for _, b in segments],
               marker=">", s=4, c="black", alpha=0.35, linewidths=0, zorder=3)
    return len(segments)


def draw_counter(ax, name, series, to_ms, start, end):
    """Step-plots each series of one counter.

    The last value before the window carries into it, as a step plot implies.
    """
    for key, points in sorted(series.items()):
        points.sort()
        before = [p for p in points if p[0] < start]
        inside = [p for p in points if start <= p[0] <= end]
        shown = before[-1:] + inside
        if not shown:
            continue
        xs = [max(to_ms(t), to_ms(start)) for t, _ in shown] + [to_ms(end)]
        ys = [v for _, v in shown] + [shown[-1][1]]
        ax.step(xs, ys, where="post", linewidth=1, label=key)
    ax.set_ylabel(name, fontsize="small")
    if ax.get_lines():
        ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1),
                  fontsize="small", frameon=False)
    ax.grid(axis="y", alpha=0.3)


def crop(t0, slices, flows, start_ms, end_ms):
    """Returns the window (start, end) in us and the slices and flows in it."""
    last = max(ts + dur for _, ts, dur, _ in slices)
    start = t0 + 1000.0 * (start_ms or 0.0)
    end = t0 + 1000.0 * end_ms if end_ms is not None else last
    slices = [s for s in slices if s[1] < end and s[1] + s[2] > start]
    if not slices:
        window = f"{start_ms or 0:g} and {(end - t0) / 1000:g} ms"
        fail(f"no op slices between {window}")
    flows = [(s, f) for s, f in flows
             if min(s[0], f[0]) <= end and max(s[0], f[0]) >= start]
    return start, end, slices, flows


def render(args):
    """Reads args.trace and writes the PNG to args.out."""
    try:
        import matplotlib
    except ImportError:
        # The apt package serves Debian's own interpreter only: say which one
        # ran, so that a user of another python3 on PATH (a venv, conda) is
        # not told to install what is already there.
        fail(f"needs matplotlib, which {sys.executable} cannot import. "
             "Debian's python3-matplotlib (scripts/setup.sh installs it) "
             "serves /usr/bin/python3: run the script with that, or install "
             f"matplotlib for {sys.executable} (pip install matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    try:
        trace = parse(load_events(args.trace))
    except (TypeError, ValueError) as e:
        fail(f"{args.trace} has a malformed event: {e}")
    lanes, labels, slices, flows, counters, t0 = trace
    if not slices:
        fail(f"{args.trace} has no op slices (ph \"X\")")
    colours = colour_map(slices)  # before cropping: a window keeps the colours
    start, end, slices, flows = crop(t0, slices, flows, args.start_ms,
                                     args.end_ms)
    lane_y = {tid: i for i, tid in enumerate(lanes)}
    flows = [(s, f) for s, f in flows if s[1] in lane_y and f[1] in lane_y]

    def to_ms(ts):
        return (ts - t0) / 1000.0

    fig, axes = plt.subplots(
        1 + len(counters), 1, sharex=True, squeeze=False, figsize=(14, 7),
        dpi=110, gridspec_kw={"height_ratios": [4] + [1] * len(counters)})
    top = axes[0][0]
    draw_slices(top, lane_y, slices, colours, to_ms)
    title = args.title or os.path.basename(args.trace)
    title += f" — {len(slices)} op slices on {len(lanes)} lanes"
    if flows and not args.no_flows:
        drawn = draw_flows(top, lane_y, flows, to_ms)
        if drawn < len(flows):
            title += f", {drawn} of {len(flows)} flows drawn"
    top.set_yticks(range(len(lanes)), labels, fontsize="small")
    top.set_ylim(len(lanes) - 0.5, -0.5)
    top.set_xlim(to_ms(start), to_ms(end))
    top.set_title(title, fontsize="medium")
    top.grid(axis="x", alpha=0.3)
    for row, name in enumerate(sorted(counters), start=1):
        draw_counter(axes[row][0], name, counters[name], to_ms, start, end)
    axes[-1][0].set_xlabel("time (ms from first event)")
    fig.tight_layout()
    try:
        fig.savefig(args.out, bbox_inches="tight")
    except OSError as e:
        fail(f"cannot write {args.out}: {e.strerror}")


def main():
    """Parses the command line and renders."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="Chrome trace-event JSON file")
    parser.add_argument("out", help="PNG file to write")
    parser.add_argument("--start-ms", type=float,
                        help="window start, ms from the first event")
    parser.add_argument("--end-ms", type=float,
                        help="window end, ms from the first event")
    parser.add_argument("--title", help="title (default: the trace's name)")
    parser.add_argument("--no-flows", action="store_true",
                        help="do not draw dependency flows")
    args = parser.parse_args()
    if args.end_ms is not None and args.end_ms <= (args.start_ms or 0):
        parser.error("--end-ms must be greater than --start-ms")
    render(args)


if __name__ == "__main__":
    main()
