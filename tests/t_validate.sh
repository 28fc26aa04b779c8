# tests/t_validate.sh: `plan --auto --validate K` under mpiexec: the top K layouts and the best of each family
# run here as child jobs, predicted against measured, the regret, the refit profile (a factor per family)
# written beside the profile; a second run with the refit reports a lower median error; a world whose
# every run fails ends every rank with the rows marked failed; every misuse is one line, exit 2.
# run.sh: alone (two --validate runs compared by the clock: a file beside one of them skews the refit)
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
cd "$ROOT"
MODEL="--config configs/medium.json --layers 4 --batch 128 --device-memory 8G"
# A profile that prices every layer's passes at a quarter of what this machine measured: the first run's
# errors are -75% or worse whatever the load (a load only slows the runs), and the refit must bring them down.
python3 - configs/profiles/cpu-2ranks.json "$TMP/skewed.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
for prec in p["layers"].values():
    for kind in prec.values():
        for k in "FBIW": kind[k] = [s / 4 for s in kind[k]]
json.dump(p, open(sys.argv[2], "w"))
PY

# table_check FILE K: the rows (the top K and each family's best of a 2-rank world), the regret and the median
# error lines, the refit line; prints why not, else the median error.
table_check() {
    python3 - "$1" "$2" <<'PY'
import re, sys
text, K = open(sys.argv[1]).read(), int(sys.argv[2])
rows = re.findall(r"^ *(\d+)  (\S.*?) +([\d.]+) +([\d.]+) +([+-]\d+)%$", text, re.M)
ranks = [int(r[0]) for r in rows]
fam = lambda name: "pipeline" if name.startswith("pp ") else name.split()[0]
bad = []
if ranks[:K] != list(range(1, K + 1)): bad.append("the top %d not first: %s" % (K, ranks))
if {fam(r[1]) for r in rows} != {"pipeline", "ddp", "monolith"}: bad.append("families %s" % {fam(r[1]) for r in rows})
for r in rows:
    p, m, e = float(r[2]), float(r[3]), int(r[4])
    if abs(100 * (p / m - 1) - e) > 1: bad.append("error of %s: %s" % (r[1], r))
if not re.search(r"^regret: the pick \(.*\) measured [\d.]+ ms, the best measured \(.*\) [\d.]+ ms: [\d.]+x$", text, re.M):
    bad.append("no regret line")
med = re.search(r"^median \|error\| ([\d.]+)% over (\d+) layouts$", text, re.M)
if not med or int(med.group(2)) != len(rows): bad.append("no median line over %d rows" % len(rows))
if not re.search(r"^refit: pipeline x[\d.]+ \(\d\), ddp x[\d.]+ \(\d\), tp x[\d.]+ \(\d\) .*wrote ", text, re.M):
    bad.append("no refit line")
print("; ".join(bad) if bad else "ok %s" % med.group(1))
PY
}

run 120 mpiexec -n 2 "$MICROPP" plan --auto $MODEL --profile "$TMP/skewed.json" --validate 2 --steps 4 --top 2 \
    --out "$TMP/refit.json"
printf '%s\n' "$OUT" > "$TMP/first.txt"
first=$(table_check "$TMP/first.txt" 2)
if [ "$RC" -ne 0 ] || [ "${first%% *}" != ok ]; then
    fail "validate/table, regret and refit" "exit $RC: $first: $(head -c 900 "$TMP/first.txt") $ERR"
else pass "validate/table, regret and refit (median error ${first#ok }%)"; fi
why=$(python3 - "$TMP/refit.json" "$TMP/skewed.json" "$TMP/first.txt" <<'PY'
import json, re, statistics, sys
r, s = (json.load(open(f)) for f in sys.argv[1:3])
rows = re.findall(r"^ *\d+  (\S.*?) +([\d.]+) +([\d.]+) +[+-]\d+%$", open(sys.argv[3]).read(), re.M)
fam = lambda name: "pipeline" if name.startswith("pp ") else "tp" if name.startswith("monolith tp") else name.split()[0]
want = {f: statistics.median(float(m) / float(p) for n, p, m in rows if fam(n) == f) for f in {fam(n) for n, _, _ in rows}}
f = r.get("refit", {})
bad = [] if set(f) == set(want) == {"pipeline", "ddp", "tp"} else ["refit families %s, rows' %s" % (f, want)]
bad += ["%s x%g, the rows' median measured / predicted %g" % (k, f[k], v) for k, v in want.items()
        if k in f and abs(f[k] / v - 1) > 0.01]
def flat(x): return [v for y in x.values() for v in flat(y)] if isinstance(x, dict) else x
if any(abs(a - b) > 1e-9 * abs(b) for a, b in zip(flat(r["layers"]), flat(s["layers"]))): bad.append("the curves changed")
print("; ".join(bad))
PY
)
if [ -n "$why" ]; then fail "validate/the refit profile" "$why"; else pass "validate/the refit profile"; fi

# The refit profile again: a lower median error (its factors scale the families the first run measured).
run 120 mpiexec -n 2 "$MICROPP" plan --auto $MODEL --profile "$TMP/refit.json" --validate 2 --steps 4 --top 2
printf '%s\n' "$OUT" > "$TMP/second.txt"
second=$(table_check "$TMP/second.txt" 2)
if [ "$RC" -ne 0 ] || [ "${second%% *}" != ok ]; then fail "validate/second run" "exit $RC: $second: $OUT $ERR"
elif ! python3 -c 'import sys; sys.exit(not float(sys.argv[2]) < float(sys.argv[1]))' "${first#ok }" "${second#ok }"
then fail "validate/second run lowers the error" "${first#ok }% then ${second#ok }%"
else pass "validate/second run lowers the error (${first#ok }% -> ${second#ok }%)"; fi
if [ -f "$TMP/refit.refit.json" ]; then pass "validate/the refit beside the profile"
else fail "validate/the refit beside the profile" "no $TMP/refit.refit.json: $(ls "$TMP")"; fi

# Every run fails (rank 1 of each child job killed at its step 2): each row says so, every rank ends, exit 1.
MICROPP_FAULT=1:2:kill run 120 mpiexec -n 2 "$MICROPP" plan --auto $MODEL --profile "$TMP/skewed.json" --validate 1 \
    --steps 4 --out "$TMP/none.json"
failed=$(printf '%s\n' "$OUT" | grep -c "failed: exit")
if [ "$RC" -ne 1 ] || [ "$failed" -ne 3 ] || ! printf '%s' "$ERR" | grep -q "none of the 3 layouts ran"; then
    fail "validate/failed runs reported" "exit $RC, $failed rows failed: $OUT $ERR"
else pass "validate/failed runs reported"; fi

# --- misuse: one line, exit 2, on every rank alike ---
P="--profile configs/profiles/cpu-2ranks.json"
expect_user_error "validate/K 0" "--validate" 10 mpiexec -n 2 "$MICROPP" plan --auto $MODEL $P --validate 0
expect_user_error "validate/K over the rows" "--validate 100000: the table has [0-9]+ layouts that fit: give 1.." 20 \
    mpiexec -n 2 "$MICROPP" plan --auto $MODEL $P --validate 100000
expect_user_error "validate/1 rank, world 2" "mpiexec started [(]1 rank[)], and --world is 2" 10 \
    "$MICROPP" plan --auto $MODEL $P --validate 2 --world 2
expect_user_error "validate/without --auto" "--validate 2 runs --auto's top layouts: add --auto" 10 \
    mpiexec -n 2 "$MICROPP" plan $MODEL $P --validate 2
expect_user_error "validate/a machine file" "--validate measures this machine" 10 \
    mpiexec -n 2 "$MICROPP" plan --auto $MODEL --machine configs/machines/h100-node.json --validate 2
expect_user_error "validate/--json" "--validate prints its table, not JSON" 10 \
    mpiexec -n 2 "$MICROPP" plan --auto $MODEL $P --validate 2 --json
expect_user_error "validate/--out without it" "--out names --calibrate's profile or --validate's refit" 10 \
    "$MICROPP" plan --auto --world 2 $MODEL $P --out "$TMP/x.json"
