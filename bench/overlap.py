#!/usr/bin/env python3
"""bench/overlap.py: steps back to back, read off a `micropp train --trace` file of a pipeline.

  python3 bench/overlap.py TRACE.json [FIRST LAST]
  python3 bench/overlap.py --gantt WIDTH TRACE.json STEP

Per rank, the window of steps FIRST..LAST (1-based; default the second to the last but one) runs from the
rank's first event of step FIRST to its first event of step LAST + 1; the bubble across those steps is
1 - (the ranks' forward, backward, backward input and backward weight time) / (the ranks' windows summed):
the barrier, the waits, the loss all-reduce and the optimizer count as idle. It is the measured side of
`micropp bubble`'s overlapped figure (idle / the longest rank span, steps back to back);
`bubble_less_optimizer` takes the optimizer steps' time out of the windows, as the simulator has none. `overlap_ms`: the
mean over the window's steps s of how long before step s's last event on any rank step s + 1 began on
another (about 0, the ranks' clock skew at step 1's barrier, when a barrier parts the steps). One JSON line.
--gantt: steps STEP and STEP + 1 as text, a row per rank, WIDTH columns from the first of their events to the
last: each column the kind at its middle (capitals: step STEP; small letters: step STEP + 1), '.' idle.
"""
import json
import sys

COMPUTE = {"forward", "backward", "backward input", "backward weight"}


LETTER = {"forward": "F", "backward": "B", "backward input": "I", "backward weight": "W", "optimizer step": "O",
          "loss wait": "L", "recv wait": "-", "send": "^"}


def gantt(width, path, step):
    ev = [e for e in json.load(open(path))["traceEvents"]
          if e.get("ph") == "X" and e["args"]["step"] in (step, step + 1) and e["cat"] in LETTER]
    t0 = min(e["ts"] for e in ev)
    t1 = max(e["ts"] + e["dur"] for e in ev)
    dt = (t1 - t0) / width
    print(f"# steps {step} (capitals) and {step + 1} (small letters), {(t1 - t0) / 1e3:.1f} ms, {dt / 1e3:.2f} ms a column;"
          " F forward, B backward, I backward input, W backward weight, O optimizer step, L loss wait,"
          " - recv wait, ^ send, . idle")
    for r in sorted({e["pid"] for e in ev}):
        row = ["."] * width
        for e in sorted((e for e in ev if e["pid"] == r), key=lambda e: LETTER[e["cat"]] in "-^L"):
            a, b = int((e["ts"] - t0) / dt + 0.5), int((e["ts"] + e["dur"] - t0) / dt + 0.5)
            ch = LETTER[e["cat"]] if e["args"]["step"] == step else LETTER[e["cat"]].lower()
            for i in range(a, min(b, width)):
                if row[i] == "." or ch not in "-^Ll": row[i] = ch
        print(f"rank {r} |{''.join(row)}|")


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--gantt":
        return gantt(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    if len(sys.argv) not in (2, 4):
        sys.exit(__doc__.strip().splitlines()[2].strip())
    ev = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
    ranks = sorted({e["pid"] for e in ev})
    steps = max(e["args"]["step"] for e in ev)
    first, last = (int(sys.argv[2]), int(sys.argv[3])) if len(sys.argv) == 4 else (2, steps - 1)
    if not 1 <= first <= last < steps:
        sys.exit(f"overlap.py: steps {first}..{last}: need 1 <= FIRST <= LAST < {steps} (a step after the window)")
    start = {(r, s): min(e["ts"] for e in ev if e["pid"] == r and e["args"]["step"] == s)
             for r in ranks for s in range(first, last + 2)}
    end = {(r, s): max(e["ts"] + e["dur"] for e in ev if e["pid"] == r and e["args"]["step"] == s)
           for r in ranks for s in range(first, last + 1)}
    window = sum(start[r, last + 1] - start[r, first] for r in ranks)
    busy = sum(e["dur"] for e in ev if e["cat"] in COMPUTE and first <= e["args"]["step"] <= last)
    opt = sum(e["dur"] for e in ev if e["cat"] == "optimizer step" and first <= e["args"]["step"] <= last)
    lap = [max(end[r, s] for r in ranks) - min(start[r, s + 1] for r in ranks) for s in range(first, last + 1)]
    period = window / len(ranks) / (last + 1 - first)
    print(json.dumps({"ranks": len(ranks), "steps": [first, last], "bubble": round(1 - busy / window, 4),
                      "bubble_less_optimizer": round(1 - busy / (window - opt), 4),
                      "step_ms": round(period / 1e3, 3),
                      "overlap_ms": round(sum(lap) / len(lap) / 1e3, 3)}))


main()
