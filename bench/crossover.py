#!/usr/bin/env python3
# bench/crossover.py: bench/crossover.sh's arithmetic, apart so that tests/t_crossover.sh checks it: the
# measured crossover (where a method's step median crosses ddp's, interpolated in 1/rate: both steps are
# linear in the link's seconds a byte), the planner's predicted one read off `plan`'s crossover line, and the
# summary that puts them side by side.
#
#   bench/crossover.py summary ROWS PLAN_OUTPUT [PLAN_AFTER]   ROWS: "RATE_MBIT RUN MEDIAN_MS" lines, RUN ddp or
#       the method; PLAN_AFTER: the plan's output from a profile calibrated after the runs (a second prediction)
#   bench/crossover.py median TRAIN_OUTPUT        the "step X ms (median)" of a train run's output
import re
import sys


def crossing(rates, ddp, method):
    """The rate (Mb/s) below which the method's step is the shorter: the first sign change, from the lowest
    rate up, of method - ddp from below 0 to 0 or above, interpolated linearly in 1/rate. Returns (rate, i)
    with i the index of the pair's lower rate; (None, 'faster') when the method wins at every rate,
    (None, 'slower') when it loses at every rate."""
    d = [m - a for m, a in zip(method, ddp)]
    for i in range(len(rates) - 1):
        if d[i] < 0 <= d[i + 1]:
            u0, u1 = 1 / rates[i], 1 / rates[i + 1]
            u = u0 + (u1 - u0) * d[i] / (d[i] - d[i + 1])
            return 1 / u, i
    return None, ('faster' if all(x < 0 for x in d) else 'slower')


def sign_changes(ddp, method):
    d = [m - a >= 0 for m, a in zip(method, ddp)]
    return sum(1 for i in range(len(d) - 1) if d[i] != d[i + 1])


def median_ms(text):
    m = re.search(r'^step ([0-9.]+) ms \(median\)', text, re.M)
    return float(m.group(1)) if m else None


def predicted_mbit(text):
    """plan's crossover line in Mb/s: (value, the line); value None when it names no bandwidth."""
    for line in text.splitlines():
        if line.startswith('crossover:'):
            m = re.search(r'below ([0-9.e+]+) Gb/s', line)
            return (float(m.group(1)) * 1e3 if m else None), line
    return None, 'no crossover line'


def read_rows(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if len(f) == 3:
            rows.setdefault(f[1], {})[float(f[0])] = float(f[2])
    return rows


def summary(rows, plan_text, after_text=None):
    methods = [k for k in rows if k != 'ddp']
    if 'ddp' not in rows or len(methods) != 1:
        return 'crossover: the rows need ddp and one method, not %s' % sorted(rows), 1
    name = methods[0]
    rates = sorted(set(rows['ddp']) & set(rows[name]))
    ddp = [rows['ddp'][r] for r in rates]
    met = [rows[name][r] for r in rates]
    out = ['%-10s %12s %12s %12s' % ('Mb/s', 'ddp ms', name + ' ms', 'difference')]
    out += ['%-10g %12.1f %12.1f %+12.1f' % (r, a, m, m - a) for r, a, m in zip(rates, ddp, met)]
    b, where = crossing(rates, ddp, met)
    pred, line = predicted_mbit(plan_text)
    if b is None:
        out.append('measured crossover: none in %g-%g Mb/s (%s %s than ddp at every rate)' %
                   (rates[0], rates[-1], name, where))
    else:
        n = sign_changes(ddp, met)
        out.append('measured crossover: %.0f Mb/s (between %g and %g Mb/s%s)' %
                   (b, rates[where], rates[where + 1], '' if n == 1 else '; %d sign changes: noisy' % n))
    out.append('predicted crossover: %s (%s)' % ('%.0f Mb/s' % pred if pred else 'none', line))
    if b is not None and pred:
        out.append('predicted / measured: %.2f' % (pred / b))
    if after_text is not None:
        late, line = predicted_mbit(after_text)
        out.append('predicted, calibrated after the runs: %s%s' % ('%.0f Mb/s' % late if late else 'none (%s)' % line,
                                                                  ' (/ measured: %.2f)' % (late / b) if b and late else ''))
    return '\n'.join(out), 0


def main(argv):
    if len(argv) in (3, 4) and argv[0] == 'summary':
        text, rc = summary(read_rows(argv[1]), open(argv[2]).read(), open(argv[3]).read() if len(argv) == 4 else None)
        print(text)
        return rc
    if len(argv) == 2 and argv[0] == 'median':
        m = median_ms(open(argv[1]).read())
        if m is None:
            print('crossover: no "step X ms (median)" line in %s' % argv[1], file=sys.stderr)
            return 1
        print(m)
        return 0
    print('usage: bench/crossover.py summary ROWS PLAN_OUTPUT [PLAN_AFTER] | median TRAIN_OUTPUT', file=sys.stderr)
    return 2


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
