#!/usr/bin/env python3
# tests/shape.py: the limits that keep micropp's code readable (docs/code.md states them):
#   - no function longer than 120 lines (tables of data are not functions and are not counted);
#   - no .c or .cu file over 800 lines, no line over 120 characters;
#   - every include points down the floors, read off the folders (no hand-kept table):
#       commands (a root file defining cmd_*, and micropp.c) -> planner/ -> train/ -> axes/ -> the
#       core (the other root files) -> comms/ -> base/; base/ includes only base/, comms/ only comms/
#       and base/, axes/ nothing of train/; and no two files include each other in a circle;
#   - no struct with more than 40 fields (a struct that grows with every feature is cut into parts by
#     concern: the options' per-axis parts, the Summary's and the Plan's part per axis);
#   - every source file opens with a comment saying what it owns;
#   - comments name only functions and files that exist: every `name()` in a comment is an identifier
#     of the code, every `x.c`, `x.h`, `x.cu` (bare or with its folder) a file of the sources.
# Prints one PASS/FAIL line per rule (the test protocol of tests/run.sh). With --report it prints
# the layout's figures instead: files per folder, floors, circles, the longest functions and structs.
import glob, os, re, sys

os.chdir(os.path.join(os.path.dirname(os.path.realpath(__file__)), '..'))
MAX_FN, MAX_FILE, MAX_LINE, MAX_FIELDS = 120, 800, 120, 40
FOLDERS = ['base', 'comms', 'axes', 'train', 'planner']  # below the root's commands and core (floors: floor())
sources = sorted(glob.glob('*.c') + glob.glob('*.h') + glob.glob('*.cu') + [f for d in FOLDERS for f in glob.glob(d + '/*.[ch]') + glob.glob(d + '/*.cu')])
failed = 0

def report(name, problems):
    global failed
    if problems:
        failed += 1
        print(f"FAIL {name}: " + "; ".join(problems[:12]) + (f" (+{len(problems) - 12} more)" if len(problems) > 12 else ""))
    else:
        print(f"PASS {name}")

def code_only(text):  # comments, strings, characters and preprocessor lines blanked, newlines kept
    pat = r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*'
    return re.sub(pat, lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text, flags=re.S | re.M)

def functions(path):  # (name, lines) of each top-level function definition, its signature included
    # Read by braces, not by lines: a `{` at file level right after a `)` opens a function (a `{`
    # after `=` is a table of data, after a name a struct), so a signature wrapped over several
    # lines is measured like any other.
    t = code_only(open(path, errors='replace').read())
    out, depth, name, start = [], 0, None, 0
    for i, ch in enumerate(t):
        if ch == '{':
            if depth == 0:
                head = t[:i].rstrip()
                name = None
                if head.endswith(')'):
                    j, d = len(head) - 1, 0
                    while j >= 0:  # back to the `(` that opens the parameter list
                        d += {')': 1, '(': -1}.get(head[j], 0)
                        if d == 0: break
                        j -= 1
                    m = re.search(r'([A-Za-z_]\w*)\s*$', head[:j])
                    if m: name, start = m.group(1), t.count('\n', 0, m.start())
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0 and name:
                out.append((name, t.count('\n', 0, i) - start + 1)); name = None
    return out

def structs(path):  # (name, fields) of each struct: declarators at its first depth (int a, b; is 2)
    t = code_only(open(path, errors='replace').read())
    out = []
    for m in re.finditer(r'\bstruct\s*(\w*)\s*\{', t):
        i, depth, body = m.end(), 1, []
        while depth and i < len(t):
            depth += {'{': 1, '}': -1}.get(t[i], 0)
            body.append(t[i] if depth == 1 else ('' if t[i] != '}' or depth else ''))
            i += 1
        name = m.group(1) or (re.match(r'\s*(\w+)', t[i:]) or [None, '?'])[1]
        flat, par, n = ''.join(body), 0, 0
        for ch in flat:
            par += {'(': 1, '[': 1, ')': -1, ']': -1}.get(ch, 0)
            n += ch == ';' or (ch == ',' and par == 0)
        out.append((name, n))
    return out

def layout_report():  # python3 tests/shape.py --report: the figures of the layout, for a review
    folders = {}
    for p in sources: folders.setdefault(os.path.dirname(p) or '(root)', []).append(p)
    lines = sum(len(open(p, errors='replace').read().split('\n')) - 1 for p in sources)
    print(f"{len(sources)} source files, {lines} lines: " + ", ".join(f"{d} {len(v)}" for d, v in sorted(folders.items())))
    unit = lambda p: os.path.splitext(p)[0]
    inc = {}
    for p in sources:
        for h in re.findall(r'^#include "([^"]+)"', open(p).read(), re.M):
            h = h if os.path.exists(h) else next((q for q in sources if os.path.basename(q) == os.path.basename(h)), None)
            if h and unit(h) != unit(p): inc.setdefault(unit(p), set()).add(unit(h))
    units = sorted({unit(p) for p in sources})
    def reach(a):
        seen, todo = set(), [a]
        while todo:
            for b in inc.get(todo.pop(), ()):
                if b not in seen: seen.add(b); todo.append(b)
        return seen
    r = {u: reach(u) for u in units}
    scc = {u: frozenset([u] + [v for v in r[u] if u in r[v]]) for u in units}
    floor = {}
    def fl(c):
        if c not in floor:
            floor[c] = 0
            floor[c] = 1 + max([fl(scc[v]) for u in c for v in inc.get(u, ()) if scc[v] != c] or [0])
        return floor[c]
    up = sorted(f"{a} -> {b}" for a in units for b in inc.get(a, ()) if scc[a] == scc[b])
    circles = sorted({" <-> ".join(sorted(c)) for c in scc.values() if len(c) > 1})
    print(f"floors (the longest include chain, a circle counted as one room): {max(fl(scc[u]) for u in units)}")
    print(f"arrows running back up (includes inside a circle): {len(up)} {up}; circles: {circles or 'none'}")
    fns = sorted(((k, f"{p}:{n}") for p in sources if p.endswith(('.c', '.cu')) for n, k in functions(p)), reverse=True)
    print("longest functions: " + ", ".join(f"{w} {k}" for k, w in fns[:8]))
    sts = sorted(((k, f"{n} ({p})") for p in sources for n, k in structs(p)), reverse=True)
    print("largest structs by field count: " + ", ".join(f"{w} {k}" for k, w in sts[:8]))

if '--report' in sys.argv:
    layout_report()
    sys.exit(0)

long_fns = [f"{p}:{n} is {k} lines" for p in sources if p.endswith(('.c', '.cu')) for n, k in functions(p) if k > MAX_FN]
report(f"shape/no function over {MAX_FN} lines", long_fns)
wide = [f"{p}:{i + 1} has {len(l)} characters" for p in sources for i, l in enumerate(open(p, errors='replace').read().split('\n')) if len(l) > MAX_LINE]
report(f"shape/no line over {MAX_LINE} characters (clang-format breaks them: .clang-format)", wide)
big = [f"{p} has {n} lines" for p in sources if p.endswith(('.c', '.cu')) for n in [len(open(p).read().split(chr(10))) - 1] if n > MAX_FILE]
report(f"shape/no .c or .cu file over {MAX_FILE} lines", big)
wide_structs = [f"{n} ({p}) has {k} fields" for p in sources for n, k in structs(p) if k > MAX_FIELDS]
report(f"shape/no struct over {MAX_FIELDS} fields (group them into parts by concern)", wide_structs)

# The floors, from the folders: a root file is a command when it (or its .c, for a header) defines cmd_*.
def is_command(p):
    c = os.path.splitext(p)[0] + '.c'
    return p == 'micropp.c' or (os.path.exists(c) and re.search(r'^int cmd_\w+\(', open(c).read(), re.M) is not None)
def floor(p):
    if p.startswith('base/'): return 0, 'base/'
    if p.startswith('comms/'): return 1, 'comms/'  # (below the core: the root's comms.h includes its headers)
    if p.startswith('axes/'): return 3, 'axes/'  # (the axes of parallelism, below the phases of a run)
    if p.startswith('train/'): return 4, 'train/'
    if p.startswith('planner/'): return 5, 'planner/'
    if p == 'commands.h' or is_command(p): return 6, 'command'
    return 2, 'core'
includes = {p: re.findall(r'^#include "([^"]+)"', open(p).read(), re.M) for p in sources}
unknown, upward = [], []
for p in sources:
    for inc in includes[p]:
        if inc not in includes:
            unknown.append(f"{p} includes \"{inc}\", which is no source file of the floors (give its folder: \"base/{inc}\"?)"); continue
        (fp, np), (fi, ni) = floor(p), floor(inc)
        if fi > fp: upward.append(f"{p} ({np}) includes {inc} ({ni})")
report("shape/every include names a source file by its folder", unknown)
report("shape/every include points down: commands -> planner/ -> train/ -> axes/ -> core -> comms/ -> base/", upward)

# Circles: files that include each other's headers through a loop (a .c and its .h are one file).
unit = lambda p: os.path.splitext(p)[0]
edges = {}
for p in sources:
    for inc in includes[p]:
        if inc in includes and unit(inc) != unit(p): edges.setdefault(unit(p), set()).add(unit(inc))
def reach(a):
    seen, todo = set(), [a]
    while todo:
        for b in edges.get(todo.pop(), ()):
            if b not in seen: seen.add(b); todo.append(b)
    return seen
circles = sorted({" <-> ".join(sorted((a, b))) for a in edges for b in edges[a] if a in reach(b)})
report("shape/no two files include each other in a circle", circles)

# Calls: no two files call each other in a circle (a lower file never calls a higher one: e.g.
# collectives.c never calls comms.c, which calls collectives.c). Read off the objects `make` built
# (nm: what each defines and what it leaves undefined); a hook called through a function pointer
# (base/util.c's exit hooks) is no call here, by design. SKIP without objects as new as the sources.
import shutil, subprocess
objs = {unit(p): f"build/{unit(p)}.o" for p in sources if p.endswith(('.c', '.cu'))}
objs = {u: o for u, o in objs.items() if os.path.exists(o)}  # (cuda_stub.o or kernels.o: the one built)
fresh = objs and shutil.which('nm') and all(os.path.getmtime(objs[unit(s)]) >= os.path.getmtime(s)
                                            for s in sources if unit(s) in objs)
if not fresh:
    print("SKIP shape/no two files call each other in a circle: no objects in build/ as new as the sources (make)")
else:
    defined, undefined = {}, {}
    for u, o in objs.items():
        for l in subprocess.run(['nm', o], capture_output=True, text=True, check=True).stdout.split('\n'):
            f = l.split()
            if len(f) == 3 and f[1] in 'TDBRC': defined[f[2]] = u
            elif len(f) == 2 and f[0] == 'U': undefined.setdefault(u, set()).add(f[1])
    edges = {u: {defined[s] for s in syms if s in defined and defined[s] != u} for u, syms in undefined.items()}
    circles = sorted({" <-> ".join(sorted((a, b))) for a in edges for b in edges[a] if a in reach(b)})
    report("shape/no two files call each other in a circle", circles)
bare = [p for p in sources if not open(p).read().startswith('//')]
report("shape/every source file opens with what it owns", bare)

# Comments that name what is gone: a function by `name()`, a file by `name.c` (bare, or with its
# folder). Text in quotes is an example, not a name; llm.c is another project.
code_names = set()
for p in sources: code_names |= set(re.findall(r'\b[A-Za-z_]\w*\b', code_only(open(p).read())))
files = set(sources) | set(glob.glob('tests/*.[ch]') + glob.glob('tests/fuzz/*.[ch]') + glob.glob('bench/*.[ch]'))
stale = []
for p in sources:
    text = open(p).read()
    for m in re.finditer(r'//[^\n]*|/\*.*?\*/', text, flags=re.S):
        c, line = re.sub(r'"[^"\n]*"', '""', m.group(0)), text.count('\n', 0, m.start()) + 1
        for f in re.findall(r'\b([A-Za-z_]\w*)\(\)', c):
            if f not in code_names: stale.append(f"{p}:{line} names {f}(), which no code defines or calls")
        for f in re.findall(r'(?<![\w.-])((?:[\w-]+/)*[\w-]+\.(?:c|h|cu))\b', c):
            if f != 'llm.c' and f not in files and not any(os.path.basename(x) == f for x in files):
                stale.append(f"{p}:{line} names {f}, which is no file of the sources")
report("shape/comments name only functions and files that exist", stale)
sys.exit(0)  # the FAIL lines carry the verdict; a crash (nonzero) is a failure of its own
