#!/usr/bin/env python3
"""tests/doc_examples.py: runs the examples shown in README.md and docs/*.md and compares what they
print now with what the page shows, so the pages cannot drift from the binary. tests/t_docs.sh runs
it; it prints one line per example in tests/lib.sh's protocol (PASS name | FAIL name: why | SKIP
name: why), a FAIL followed by a short diff.

THE CONVENTION (what a page writer needs to know)
- An example is a line starting with "$ " inside a fenced code block (``` ... ```). The lines after
  it, up to the next "$ " line or the end of the block, are its output: stdout and stderr together,
  as a terminal shows them. Every "$ " line of every block is run, not only micropp's (a `$ ls ckpt`
  after a `--save ckpt` is checked too). Blocks without a "$ " line (make targets, Python) are prose.
- The commands of one block run in order in one fresh scratch folder (removed afterwards), under
  bash, with a timeout (60 s by default). The folder holds links named micropp, micropp-cpu, configs
  and bench to the repository's (micropp to $MICROPP when set), so `./micropp ...` and
  `configs/...` work as written and every file an example writes lands in the scratch folder. GPUs
  are hidden (CUDA_VISIBLE_DEVICES=): the pages show this project's CPU machine.
- A shown line that is exactly "..." stands for any number of lines (none included). Otherwise the
  shown lines must equal the printed ones, in order, after the rules below; trailing spaces and
  trailing blank lines do not count.
- Lines that carry timings or facts of the machine are left out on BOTH sides before comparing,
  by this rule (DROP below): a number followed by a time or rate unit (ms, us, ns, s, samples/s,
  GFLOP/s, GB/s, MB/s), a date (2026-11-22), this machine's hostname (as a word), a path under /tmp
  or the scratch folder. Measured values without a unit (bubble tables, benchmark rows, Gantt charts
  of a real run) are not caught by the rule: their blocks say so with ignore-lines (below).
- Parts of lines that differ from machine to machine are masked on both sides (MASK below): floats
  printed as x.xxe-yy (relative errors and float noise, which depend on the BLAS kernel's summation
  order) become <e>; OpenBLAS's `core=NAME` becomes core=<masked>.
- Annotations: HTML comments on the lines right before a block's opening fence (a reader of the
  rendered page never sees them, and a copied block carries none), one directive each:
    <!-- doc-test: skip REASON -->          the block's commands are not run; each counts as SKIP
                                           with REASON (GPU-only, several machines, ...)
    <!-- doc-test: ignore-lines REGEX -->   lines matching REGEX (Python re.search) are left out on
                                           both sides (measured numbers without a unit)
    <!-- doc-test: mask REGEX -->           text matching REGEX becomes <masked> on both sides
                                           (a random run id in a file name)
    <!-- doc-test: run-with ARGS -->        ARGS are added to every ./micropp command of the block
                                           (e.g. --steps 3 for a long run; the same options shown
                                           in the command are dropped, as micropp refuses a flag
                                           given twice), and the lines that
                                           depend on the number of steps are left out too (RUN_WITH
                                           below: step N/M logs, the final loss, the header's
                                           "| steps N |"); other lines that then differ from the
                                           page need ignore-lines
    <!-- doc-test: timeout SECONDS -->      per-command limit instead of 60 s
    <!-- doc-test: slurm NODES -->          the block needs a Slurm cluster of NODES nodes: it runs
                                           only where MICROPP_DOC_SLURM_NODES=NODES says one is up
                                           (tests/t_slurm.sh sets it while its throwaway cluster
                                           runs, and runs the page); elsewhere each command counts
                                           as SKIP. With the variable set, blocks without it SKIP
  And one for a Markdown table of options instead of a block:
    <!-- doc-test: options-table COMMAND --> COMMAND (e.g. `./micropp train --help`) is run, and
                                           each row's first cell must name options it lists (the
                                           same short flag and metavar), and a non-empty second
                                           cell must be its default, as the help's "(DEFAULT)" or
                                           "(default: DEFAULT)": one PASS or FAIL per table
  An unknown directive is a FAIL, so a typo cannot quietly switch a check off.

Also, with --links: every relative link of a page ([text](docs/x.md#anchor), images too) must
name a file of the repository and, with an anchor, a heading of that page (GitHub's anchors: lower
case, punctuation dropped, spaces to dashes). One PASS or FAIL per page.

usage: doc_examples.py [--micropp PATH] [--list | --links] PAGE...   (paths are resolved)
"""
import difflib
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TIMEOUT = 60

# A line matching one of these is left out of the comparison, on both sides.
DROP = [
    r"\d\s*(ms|us|µs|ns|s|k?\s*samples/s|GFLOP/s|GB/s|MB/s)\b",  # a time or a rate
    r"\b(19|20)\d\d-\d\d-\d\d\b",                                 # a date
    r"/tmp/",                                                      # a temporary path
    r"^note: \d+ ranks? x \d+ threads? on this node share \d+ cores?",  # more threads than this machine's cores
    r"^# warning: the profile was measured with ",  # a committed profile measured on another CPU or BLAS than here
]
# Text matching one of these is replaced by its placeholder, on both sides.
MASK = [
    (r"\b\d\.\d+e[-+]\d+\b", "<e>"),      # relative errors, float noise: the BLAS kernel's rounding
    (r"\bcore=\S+", "core=<masked>"),     # OpenBLAS's kernel for this CPU
]
# With run-with, these lines are left out as well: they change with the number of steps.
RUN_WITH = [r"^step \d+/\d+ ", r"^final loss ", r"\| steps \d+ \|"]
LINKS = ("micropp", "micropp-cpu", "configs", "bench", "tests")
DIRECTIVE = re.compile(r"^\s*<!--\s*doc-test:\s*(\S+)\s*(.*?)\s*-->\s*$")


class Block:
    def __init__(self, page, line, directives):
        self.page, self.line, self.directives = page, line, directives
        self.examples = []  # [line number, command, [shown output lines]]
        self.table = None   # an options table: [(line number, [cells])]
        self.orphan = False  # directives that stand above neither a block nor a table


def parse(page):
    """The fenced blocks of a page that hold "$ " lines, with the directives right above each."""
    lines = open(page, encoding="utf-8").read().split("\n")
    blocks, i, used = [], 0, set()
    while i < len(lines):
        m = re.match(r"^( *)(```+|~~~+)", lines[i])
        directives, j = [], i - 1
        while j >= 0 and DIRECTIVE.match(lines[j]):
            d = DIRECTIVE.match(lines[j])
            directives.insert(0, (d.group(1), d.group(2), j + 1))
            j -= 1
        if (m or lines[i].startswith("|")) and not DIRECTIVE.match(lines[i]):
            used.update(ln for _, _, ln in directives)
        if lines[i].startswith("|") and directives and not lines[i - 1].startswith("|"):
            b = Block(page, i + 1, directives)
            b.table = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if i >= b.line + 1 and not set("".join(cells)) <= set("-: "):  # not the header, not ---
                    b.table.append((i + 1, cells))
                i += 1
            blocks.append(b)
            continue
        if not m:
            i += 1
            continue
        indent, fence, start = m.group(1), m.group(2), i
        b = Block(page, start + 1, directives)
        i += 1
        while i < len(lines) and not lines[i].lstrip(" ").startswith(fence):
            text = lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip(" ")
            if text.startswith("$ "):
                b.examples.append([i + 1, text[2:], []])
            elif b.examples:
                b.examples[-1][2].append(text)
            i += 1
        i += 1
        if b.examples:
            blocks.append(b)
    for n, l in enumerate(lines):
        d = DIRECTIVE.match(l)
        if d and n + 1 not in used:
            b = Block(page, n + 1, [(d.group(1), d.group(2), n + 1)])
            b.orphan = True
            blocks.append(b)
    return blocks


def without_flags(part, args):
    """part (one ./micropp command) with the options that args gives again left out, value and all:
    micropp refuses a flag given twice, and run-with's value is the one meant."""
    words, give = part.split(" "), args.split()
    flags = {w: i + 1 < len(give) and not give[i + 1].startswith("-") for i, w in enumerate(give) if w.startswith("-")}
    out, i = [], 0
    while i < len(words):
        w = words[i]
        if w in flags:
            i += 2 if flags[w] else 1
            continue
        if w.split("=")[0] in flags and "=" in w:
            i += 1
            continue
        out.append(w)
        i += 1
    return " ".join(out)


def with_args(cmd, args):
    """cmd with args added after the ./micropp invocation (before a redirection, pipe or ;)."""
    out, pos = cmd, 0
    while True:
        k = out.find("./micropp", pos)
        if k < 0:
            return out
        m = re.compile(r"\s(\d?>|\||&&|;)").search(out, k)
        end = m.start() if m else len(out)
        part = without_flags(out[k:end], args)
        out = out[:k] + part + " " + args + out[end:]
        pos = k + len(part) + len(args) + 1


def normalize(lines, drop, mask):
    out = []
    for l in lines:
        l = l.rstrip()
        if any(r.search(l) for r in drop):
            continue
        for r, rep in mask:
            l = r.sub(rep, l)
        out.append(l)
    while out and out[-1] == "":
        out.pop()
    while out and out[0] == "":
        out.pop(0)
    return out


def matches(shown, got):
    """shown equals got, a shown "..." standing for any run of lines."""
    memo = {}

    def m(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(shown):
            r = j == len(got)
        elif shown[i] == "...":
            r = any(m(i + 1, k) for k in range(j, len(got) + 1))
        else:
            r = j < len(got) and shown[i] == got[j] and m(i + 1, j + 1)
        memo[(i, j)] = r
        return r
    sys.setrecursionlimit(100000)
    return m(0, 0)


# An option's line of --help (2 or 6 spaces in; its text may start on the next line), and the lines
# its text wraps onto (further in).
HELP_LINE = re.compile(r"^(?: {2}| {6})(?:(-\w), )?(--[\w-]+)(?: ([\w.]+))?(?:\s{2,}(.*))?$")
HELP_MORE = re.compile(r"^ {8,}(\S.*)$")


def check_table(b, micropp, out):
    """A table of options against the --help of the command its options-table directive names."""
    name0 = os.path.relpath(b.page, ROOT)
    cmds = [a for k, a, _ in b.directives if k == "options-table"]
    unknown = [k for k, _, _ in b.directives if k != "options-table"]
    name = "%s:%d options table" % (name0, b.line)
    if len(cmds) != 1 or unknown:
        out("FAIL %s: a table takes one options-table directive and nothing else" % name)
        return
    name += " against `%s`" % cmds[0]
    cmd = cmds[0].replace("./micropp", shlex.quote(micropp), 1)
    p = subprocess.run(["bash", "-c", cmd], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    helps, last = {}, None
    for l in p.stdout.decode("utf-8", "replace").split("\n"):
        m, more = HELP_LINE.match(l), HELP_MORE.match(l)
        if m:
            last = m.group(2)
            helps[last] = list(m.groups()[:3]) + [m.group(4) or ""]
        elif more and last:
            sep = "" if helps[last][3].endswith("|") else " "  # a list of choices broken after a '|'
            helps[last][3] = (helps[last][3] + sep + more.group(1)).strip()
        else:
            last = None
    bad, n = [] if b.table else ["the table has no rows"], 0
    for ln, cells in b.table:
        opts = re.findall(r"`(-[^`]*)`", cells[0])
        if not opts:
            bad.append("line %d names no option" % ln)
        for o in opts:
            m = re.match(r"^(?:(-\w), )?(--[\w-]+)(?: ([\w.]+))?$", o)
            h = helps.get(m.group(2)) if m else None
            n += 1
            if not m:
                bad.append("line %d: %r is not an option as --help writes one" % (ln, o))
            elif not h:
                bad.append("line %d: %s is not in the help" % (ln, m.group(2)))
            elif (m.group(1), m.group(3)) != (h[0], h[2]):
                said = ", ".join(x for x in (h[0], h[1]) if x) + (" " + h[2] if h[2] else "")
                bad.append("line %d: %r, but the help says %r" % (ln, o, said))
            elif len(cells) > 1 and cells[1].strip("`") and len(opts) == 1:
                d = cells[1].strip("`")
                if not (h[3].endswith("(%s)" % d) or h[3].endswith("(default: %s)" % d)):
                    bad.append("line %d: %s defaults to %r, but the help says %r" % (ln, m.group(2), d, h[3][-40:]))
    if p.returncode != 0 or not helps:
        out("FAIL %s: the command exited %d with no options listed" % (name, p.returncode))
    elif bad:
        out("FAIL %s: %s" % (name, "; ".join(bad[:5])))
    else:
        out("PASS %s: %d options, their short flags, metavars and defaults" % (name, n))


def run_block(b, micropp, out):
    name0 = os.path.relpath(b.page, ROOT)
    skip, runwith, timeout, slurm = None, None, DEFAULT_TIMEOUT, None
    drop = [re.compile(r) for r in DROP] + [re.compile(r"\b%s\b" % re.escape(socket.gethostname()))]
    mask = [(re.compile(r), rep) for r, rep in MASK]
    bad = []
    for kind, arg, line in b.directives:
        try:
            if kind == "skip":
                skip = arg or "(no reason given)"
            elif kind == "ignore-lines":
                drop.append(re.compile(arg))
            elif kind == "mask":
                mask.append((re.compile(arg), "<masked>"))
            elif kind == "run-with":
                runwith = arg
                drop += [re.compile(r) for r in RUN_WITH]
            elif kind == "timeout":
                timeout = float(arg)
            elif kind == "slurm":
                slurm = int(arg)
            else:
                bad.append("%s:%d: unknown doc-test directive %r" % (name0, line, kind))
        except (re.error, ValueError) as e:
            bad.append("%s:%d: doc-test %s %r: %s" % (name0, line, kind, arg, e))
    names = ["%s:%d $ %s" % (name0, ln, cmd) for ln, cmd, _ in b.examples]
    if bad:
        for n in names:
            out("FAIL %s: %s" % (n, "; ".join(bad)))
        return
    cluster = os.environ.get("MICROPP_DOC_SLURM_NODES")
    if slurm is not None and cluster != str(slurm):
        skip = skip or "needs a Slurm cluster of %d node%s (tests/t_slurm.sh runs it on its own)" % (
            slurm, "s" * (slurm > 1))
    elif slurm is None and cluster:
        skip = skip or "not a Slurm example (tests/t_slurm.sh runs only those, on a cluster of %s)" % cluster
    if skip:
        for n in names:
            out("SKIP %s: %s" % (n, skip))
        return
    scratch = tempfile.mkdtemp(prefix="micropp-doc.")
    drop.append(re.compile(re.escape(scratch)))
    try:
        for l in LINKS:
            target = micropp if l == "micropp" else os.path.join(ROOT, l)
            if os.path.exists(target):
                os.symlink(target, os.path.join(scratch, l))
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="", NO_COLOR="1")
        for (ln, cmd, shown), name in zip(b.examples, names):
            run = with_args(cmd, runwith) if runwith else cmd
            t0 = time.time()
            try:
                p = subprocess.run(["timeout", "-k", "5", str(timeout), "bash", "-c", run], cwd=scratch, env=env,
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                got, rc = p.stdout.decode("utf-8", "replace").split("\n"), p.returncode
            except OSError as e:
                out("FAIL %s: %s" % (name, e))
                continue
            secs = time.time() - t0
            if rc in (124, 137) and secs >= timeout:  # (137 is also what a run whose process was killed exits with)
                out("FAIL %s: timed out after %.0f s" % (name, timeout))
                continue
            want, have = normalize(shown, drop, mask), normalize(got, drop, mask)
            if matches(want, have):
                out("PASS %s (%.1f s%s)" % (name, secs, ", run with " + runwith if runwith else ""))
            else:
                out("FAIL %s: the output differs from the page (exit %d, %.1f s; - page, + now, lines compared):"
                    % (name, rc, secs))
                diff = list(difflib.unified_diff(want, have, "page", "now", n=1, lineterm=""))[2:]
                for d in diff[:24]:
                    out("    " + d)
                if len(diff) > 24:
                    out("    ... (%d more diff lines)" % (len(diff) - 24))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_links(page, out):
    name, bad, n = os.path.relpath(page, ROOT), [], 0
    text = open(page, encoding="utf-8").read()
    prose = re.sub(r"^( *)(```+|~~~+).*?^\1\2", "", text, flags=re.S | re.M)  # links in code blocks are not links
    for target in re.findall(r"\]\(([^)\s]+)\)", prose):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        n += 1
        path, _, frag = target.partition("#")
        file = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
        if not os.path.exists(file):
            bad.append("%s: no such file" % target)
        elif frag and file.endswith(".md"):
            heads = {anchor(h) for h in re.findall(r"^#+ (.*)$", open(file, encoding="utf-8").read(), flags=re.M)}
            if frag not in heads:
                bad.append("%s: no such heading in %s" % (target, os.path.relpath(file, ROOT)))
    if bad:
        out("FAIL %s links: %s" % (name, "; ".join(bad[:5])))
    else:
        out("PASS %s links: %d relative links lead to files and headings that exist" % (name, n))


def main(argv):
    micropp = os.environ.get("MICROPP") or os.path.join(ROOT, "micropp")
    listing, links, pages = False, False, []
    it = iter(argv)
    for a in it:
        if a == "--micropp":
            micropp = next(it)
        elif a == "--list":
            listing = True
        elif a == "--links":
            links = True
        else:
            pages.append(a)
    micropp = os.path.abspath(os.path.join(ROOT, micropp))

    def out(s):
        print(s, flush=True)
    if links:
        for p in pages:
            check_links(os.path.abspath(p), out)
        return 0
    blocks = [b for p in pages for b in parse(os.path.abspath(p))]
    if listing:
        for b in blocks:
            if b.table is not None:
                print("%s:%d options table (%d rows) [%s]" % (os.path.relpath(b.page, ROOT), b.line, len(b.table),
                                                            " ".join(a for _, a, _ in b.directives)))
            for ln, cmd, shown in b.examples:
                print("%s:%d $ %s (%d lines shown)%s" % (os.path.relpath(b.page, ROOT), ln, cmd, len(shown),
                                                       "".join(" [%s %s]" % (k, a) for k, a, _ in b.directives)))
        return 0
    for b in blocks:
        if b.orphan:
            out("FAIL %s:%d doc-test %s: not on the lines right above a code block or a table" %
                (os.path.relpath(b.page, ROOT), b.line, b.directives[0][0]))
        elif b.table is not None:
            check_table(b, micropp, out)
        else:
            run_block(b, micropp, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
