#!/usr/bin/env python3
# tests/shape.py: the limits that keep micropp's code readable (README's code map states them):
#   - no function longer than 120 lines (tables of data are not functions and are not counted);
#   - no .c file over 800 lines;
#   - no include from a lower layer to a higher one (LAYERS below: a file may include headers of
#     its own layer or lower; ops, data, config and util never include comms.h or train headers);
#   - every source file opens with a comment saying what it owns.
# Prints one PASS/FAIL line per rule (the test protocol of tests/run.sh).
import glob, os, re, sys

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
MAX_FN, MAX_FILE = 120, 800
LAYERS = [  # lowest first; a source and its header share a layer
    ['util', 'ops_math', 'tags'],
    ['ops', 'ops_cpu', 'ops_onednn', 'kernels', 'cuda_stub', 'devcomm', 'data', 'idx', 'config', 'safetensors', 'fault', 'outfile'],
    ['model', 'schedule', 'schedule_file', 'p2p'],
    ['comms', 'watchdog', 'launch', 'finalize'],
    ['ddp', 'checkpoint', 'trace'],
    ['plan', 'run', 'memory', 'pipeline', 'verify', 'report', 'train_options'],
    ['train', 'bubble', 'plan_cmd', 'pingpong', 'allreduce', 'selftest'],
    ['micropp'],
]
layer_of = {name: i for i, names in enumerate(LAYERS) for name in names}
sources = sorted(glob.glob('*.c') + glob.glob('*.h') + glob.glob('*.cu'))
failed = 0

def report(name, problems):
    global failed
    if problems:
        failed += 1
        print(f"FAIL {name}: " + "; ".join(problems[:12]) + (f" (+{len(problems) - 12} more)" if len(problems) > 12 else ""))
    else:
        print(f"PASS {name}")

def functions(path):  # (name, lines) of each top-level function definition
    lines = open(path, errors='replace').read().split('\n')
    out, start, name = [], None, None
    for i, l in enumerate(lines):
        m = re.match(r'^[A-Za-z_].*\b([A-Za-z_]\w*)\s*\([^;]*\)\s*\{\s*$', l)
        if m and start is None and not re.match(r'^(static\s+)?(const\s+)?\w+\s+\w+\[\]\s*=', l):
            start, name = i, m.group(1)
        elif l.startswith('}') and start is not None:
            out.append((name, i - start + 1)); start = None
    return out

long_fns = [f"{p}:{n} is {k} lines" for p in sources if p.endswith(('.c', '.cu')) for n, k in functions(p) if k > MAX_FN]
report(f"shape/no function over {MAX_FN} lines", long_fns)
big = [f"{p} has {n} lines" for p in sources if p.endswith('.c') for n in [len(open(p).read().split(chr(10))) - 1] if n > MAX_FILE]
report(f"shape/no .c file over {MAX_FILE} lines", big)

unknown, upward = [], []
for p in sources:
    me = os.path.splitext(p)[0]
    if me not in layer_of: unknown.append(f"{p} has no layer in tests/shape.py"); continue
    for inc in re.findall(r'^#include "([^"]+)\.h"', open(p).read(), re.M):
        if inc not in layer_of: unknown.append(f"{p} includes {inc}.h, which has no layer"); continue
        if layer_of[inc] > layer_of[me]: upward.append(f"{p} (layer {layer_of[me]}) includes {inc}.h (layer {layer_of[inc]})")
report("shape/every source file has a layer", unknown)
report("shape/no include from a lower layer to a higher one", upward)
low = [p for p in sources if layer_of.get(os.path.splitext(p)[0], 99) <= 1
       for inc in re.findall(r'^#include "([^"]+)"', open(p).read(), re.M) if inc in ('comms.h', 'train.h', 'run.h', 'plan.h')]
report("shape/ops, data, config and util include nothing from comms or train", low)
bare = [p for p in sources if not open(p).read().startswith('//')]
report("shape/every source file opens with what it owns", bare)
sys.exit(0)  # the FAIL lines carry the verdict; a crash (nonzero) is a failure of its own
