#!/usr/bin/env bash
# bench/sweep.sh: the GPipe cheat sheet's experiments in one run. Each run is `micropp train --json`;
# its object, plus the experiment's parameters, is one line of OUT/sweep.jsonl, and OUT/summary.txt
# holds the tables (also printed). It draws the schedules' loss and step time per step with micropp plot
# (OUT/schedules_curves.svg, from their --metrics logs OUT/schedules_SCHED.jsonl), and with gnuplot
# installed OUT/speedup_vs_m.png and OUT/bubble_vs_m.png. Experiments:
#   monolith    the single-process baseline
#   m_sweep     sensitivity to M: gpipe and 1f1b for each M in MS (speedup vs M=1 and vs the monolith)
#   checkpoint  activation checkpointing off vs on (gpipe, M = FIXED_M): time and peak activation memory
#   partition   even split vs 80% of the layers on stage 0 (gpipe, M = FIXED_M): utilization falls
#   schedules   every schedule in SCHEDULES at M = FIXED_M
set -u
usage() {
    cat <<'EOF'
Usage: bench/sweep.sh [--tiny] [--out DIR] [--np K] [--no-plot]

  --tiny      a seconds-long run for tests (NP=2 LAYERS=4 HIDDEN=32 BATCH=16 STEPS=3 MS="1 2 4" FIXED_M=4)
  --out DIR   where sweep.jsonl, summary.txt and the plots go (bench/results/sweep)
  --np K      ranks = pipeline stages (the cores, at most 4)
  --no-plot   skip the PNG plots even when gnuplot is installed

Sizes come from the environment (defaults in parentheses): NP (cores, at most 4), LAYERS (16), HIDDEN (1024),
BATCH (256, divisible by every M), STEPS (20), THREADS (1, BLAS threads per rank),
MS ("1 2 4 8 16 32"), FIXED_M (8), SCHEDULES ("naive gpipe 1f1b"), MICROPP (./micropp),
MPIEXEC (mpiexec), RUN_TIMEOUT (900 s per run).

Examples:
  bench/sweep.sh                                  # the full sweep, one rank per core (<= 4)
  NP=2 HIDDEN=512 bench/sweep.sh --out /tmp/sw    # smaller
  bench/sweep.sh --tiny --out /tmp/tiny           # what the test suite runs
EOF
}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=bench/results/sweep PLOT=1 TINY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --tiny) TINY=1 ;;
        --out) [ $# -ge 2 ] || { echo "sweep.sh: --out needs a folder" >&2; exit 2; }; OUT=$2; shift ;;
        --np) [ $# -ge 2 ] || { echo "sweep.sh: --np needs a number" >&2; exit 2; }; NP=$2; shift ;;
        --no-plot) PLOT=0 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "sweep.sh: unknown option '$1' (see bench/sweep.sh --help)" >&2; exit 2 ;;
    esac
    shift
done
if [ "$TINY" = 1 ]; then
    : "${NP:=2}" "${LAYERS:=4}" "${HIDDEN:=32}" "${BATCH:=16}" "${STEPS:=3}" "${MS:=1 2 4}" "${FIXED_M:=4}"
fi
cores=$(nproc 2>/dev/null || echo 2); [ "$cores" -gt 4 ] && cores=4; [ "$cores" -lt 2 ] && cores=2
: "${NP:=$cores}" "${LAYERS:=16}" "${HIDDEN:=1024}" "${BATCH:=256}" "${STEPS:=20}" "${THREADS:=1}"
: "${MS:=1 2 4 8 16 32}" "${FIXED_M:=8}" "${SCHEDULES:=naive gpipe 1f1b}"
: "${MICROPP:=$ROOT/micropp}" "${MPIEXEC:=mpiexec}" "${RUN_TIMEOUT:=900}"

isnum() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
for v in NP LAYERS HIDDEN BATCH STEPS THREADS FIXED_M RUN_TIMEOUT; do
    isnum "${!v}" || { echo "sweep.sh: $v='${!v}' must be a positive integer" >&2; exit 2; }
done
[ "$NP" -ge 2 ] || { echo "sweep.sh: NP=$NP: a pipeline needs at least 2 ranks" >&2; exit 2; }
[ "$LAYERS" -ge "$NP" ] || { echo "sweep.sh: LAYERS=$LAYERS is fewer than NP=$NP stages: every stage needs a layer" >&2; exit 2; }
for m in $MS $FIXED_M; do
    isnum "$m" || { echo "sweep.sh: MS/FIXED_M value '$m' must be a positive integer" >&2; exit 2; }
    [ $((BATCH % m)) -eq 0 ] || { echo "sweep.sh: BATCH=$BATCH is not divisible by M=$m: pick a BATCH every M divides" >&2; exit 2; }
done
[ -x "$MICROPP" ] || { echo "sweep.sh: $MICROPP not found: run make first" >&2; exit 2; }
mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ] || { echo "sweep.sh: cannot write to --out '$OUT': check the path" >&2; exit 2; }
JSONL="$OUT/sweep.jsonl"
: > "$JSONL"

# 80% of the layers on stage 0 (at least one layer left for every other stage), the rest even.
p0=$(( (LAYERS * 8 + 5) / 10 )); [ "$p0" -gt $((LAYERS - NP + 1)) ] && p0=$((LAYERS - NP + 1))
SKEW=$p0; rest=$((LAYERS - p0))
for ((s = 1; s < NP; s++)); do n=$(( rest / (NP - 1) + (s - 1 < rest % (NP - 1) ? 1 : 0) )); SKEW="$SKEW,$n"; done

SIZE=(--layers "$LAYERS" --hidden "$HIDDEN" --batch "$BATCH" --steps "$STEPS" --threads "$THREADS" --eval-samples 0 --json)
LOG=(--log-every 0)  # the schedules experiment logs every step into a --metrics file instead
echo "# micropp sweep | ranks $NP | layers $LAYERS | hidden $HIDDEN | batch $BATCH | steps $STEPS | threads $THREADS | M: $MS | fixed M $FIXED_M | skewed partition $SKEW"
echo "# results: $JSONL"
failed=0
# one EXPERIMENT VARIANT NPROCS ARGS...: runs micropp train, appends its JSON object with the parameters.
one() {
    local exp=$1 variant=$2 np=$3; shift 3
    local cmd=("$MICROPP" train "${SIZE[@]}" "${LOG[@]}" "$@")
    [ "$np" -gt 1 ] && cmd=("$MPIEXEC" -n "$np" "${cmd[@]}")
    echo "# $exp $variant: ${cmd[*]}"
    local out err rc
    out=$(MPIEXEC_TIMEOUT=$RUN_TIMEOUT timeout -k 10 "$RUN_TIMEOUT" "${cmd[@]}" 2>"$OUT/.stderr"); rc=$?
    err=$(tail -n 1 "$OUT/.stderr" | tr -d '"\\')
    local head="{\"experiment\":\"$exp\",\"variant\":\"$variant\",\"np\":$np,\"threads\":$THREADS,"
    if [ "$rc" -eq 0 ] && [ "${out:0:1}" = "{" ]; then
        printf '%s%s\n' "$head" "${out#\{}" >> "$JSONL"
    else
        echo "#   FAILED (exit $rc): $err" >&2
        printf '%s"error":"exit %d: %s"}\n' "$head" "$rc" "$err" >> "$JSONL"
        failed=$((failed + 1))
    fi
}

one monolith monolith 1 --mode monolith
for s in gpipe 1f1b; do
    for m in $MS; do one m_sweep "$s M=$m" "$NP" --mode pp --schedule "$s" --micro-batches "$m"; done
done
one checkpoint off "$NP" --mode pp --schedule gpipe --micro-batches "$FIXED_M"
one checkpoint on "$NP" --mode pp --schedule gpipe --micro-batches "$FIXED_M" --checkpoint-activations
one partition even "$NP" --mode pp --schedule gpipe --micro-batches "$FIXED_M"
one partition "$SKEW" "$NP" --mode pp --schedule gpipe --micro-batches "$FIXED_M" --partition "$SKEW"
for s in $SCHEDULES; do
    LOG=(--log-every 1 --metrics "$OUT/schedules_$s.jsonl")
    one schedules "$s" "$NP" --mode pp --schedule "$s" --micro-batches "$FIXED_M"
done
LOG=(--log-every 0)
rm -f "$OUT/.stderr"

# ---- the summary tables (and the plots' data) ----
python3 - "$JSONL" "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = sys.argv[2]
ok = [r for r in rows if "error" not in r]
mono = next((r["step_ms_median"] for r in ok if r["experiment"] == "monolith"), None)
mean = lambda v: sum(v) / len(v)
print("\n# sensitivity to M: speedup = step time at M=1 / step time at M (same schedule); bubble = mean over stages")
print("%-8s %4s %10s %13s %13s %9s %9s %9s" % ("schedule", "M", "step ms", "speedup(M=1)", "vs monolith", "measured", "theory", "simulated"))
for s in ("gpipe", "1f1b"):
    sw = sorted((r for r in ok if r["experiment"] == "m_sweep" and r["schedule"] == s), key=lambda r: r["micro_batches"])
    base = next((r["step_ms_median"] for r in sw if r["micro_batches"] == 1), None)
    with open("%s/m_sweep_%s.dat" % (out, s), "w") as dat:
        dat.write("# M step_ms speedup_vs_M1 speedup_vs_monolith bubble_measured bubble_theory bubble_simulated\n")
        for r in sw:
            sp = base / r["step_ms_median"] if base else float("nan")
            vm = mono / r["step_ms_median"] if mono else float("nan")
            bm, bs = mean(r["bubble_measured"]), mean(r["bubble_simulated"])
            print("%-8s %4d %10.3f %12.2fx %12.2fx %9.3f %9.3f %9.3f" % (s, r["micro_batches"], r["step_ms_median"], sp, vm, bm, r["bubble_theory"], bs))
            dat.write("%d %g %g %g %g %g %g\n" % (r["micro_batches"], r["step_ms_median"], sp, vm, bm, r["bubble_theory"], bs))
if mono: print("(monolith: %.3f ms a step)" % mono)

print("\n# checkpointing: gpipe, fixed M; peak activations = the largest stage's")
print("%-11s %10s %14s %18s" % ("checkpoint", "step ms", "time overhead", "peak activations"))
ck = {r["variant"]: r for r in ok if r["experiment"] == "checkpoint"}
for v in ("off", "on"):
    if v in ck:
        r = ck[v]
        over = "%+.1f%%" % (100 * (r["step_ms_median"] / ck["off"]["step_ms_median"] - 1)) if "off" in ck else "-"
        print("%-11s %10.3f %14s %15.3f MB" % (v, r["step_ms_median"], over, max(r["peak_activation_bytes"]) / 1e6))

print("\n# non-uniform partitioning: gpipe, fixed M; per-stage bubble (measured / simulated from the measured stage times)")
print("%-14s %10s  %-30s %s" % ("layers/stage", "step ms", "measured", "simulated"))
for r in (r for r in ok if r["experiment"] == "partition"):
    print("%-14s %10.3f  %-30s %s" % (",".join(map(str, r["partition"])), r["step_ms_median"],
          " ".join("%.3f" % b for b in r["bubble_measured"]), " ".join("%.3f" % b for b in r["bubble_simulated"])))

print("\n# schedules at fixed M")
print("%-8s %4s %10s %9s %9s %9s %16s" % ("schedule", "M", "step ms", "measured", "theory", "simulated", "peak in-flight"))
for r in (r for r in ok if r["experiment"] == "schedules"):
    print("%-8s %4d %10.3f %9.3f %9.3f %9.3f %16s" % (r["schedule"], r["micro_batches"], r["step_ms_median"], mean(r["bubble_measured"]),
          r["bubble_theory"], mean(r["bubble_simulated"]), ",".join("%d" % p for p in r["peak_inflight"])))
bad = [r for r in rows if "error" in r]
if bad: print("\n# %d runs FAILED: %s" % (len(bad), "; ".join("%s %s: %s" % (r["experiment"], r["variant"], r["error"]) for r in bad)))
PY

# ---- the schedules' curves (loss, step time per step): micropp plot, no gnuplot needed ----
curves=(); for s in $SCHEDULES; do [ -s "$OUT/schedules_$s.jsonl" ] && curves+=("$OUT/schedules_$s.jsonl"); done
if [ "$PLOT" = 1 ] && [ ${#curves[@]} -gt 0 ]; then
    "$MICROPP" plot "${curves[@]}" --svg "$OUT/schedules_curves.svg" \
        --title "micropp sweep: schedules at M=$FIXED_M | $NP ranks | layers $LAYERS | hidden $HIDDEN | batch $BATCH" \
        && echo "# curves: $OUT/schedules_curves.svg" || { echo "# micropp plot failed" >&2; failed=$((failed + 1)); }
fi

# ---- plots: gnuplot is installed when missing (Debian's gnuplot-nox), as make installs libraries ----
if [ "$PLOT" = 1 ] && ! command -v gnuplot >/dev/null; then
    SUDO=$( [ "$(id -u)" = 0 ] || echo sudo )
    echo "# installing gnuplot-nox for the plots (--no-plot skips them)"
    { $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null 2>&1 \
      || { $SUDO apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends gnuplot-nox >/dev/null 2>&1; }; } \
      || echo "# could not install gnuplot-nox (apt-get failed): no plots; install it and run again"
fi
if [ "$PLOT" = 1 ] && command -v gnuplot >/dev/null && [ -s "$OUT/m_sweep_gpipe.dat" ]; then
    term=pngcairo; gnuplot -e "set terminal pngcairo" 2>/dev/null || term=png
    gnuplot <<EOF && echo "# plots: $OUT/speedup_vs_m.png $OUT/bubble_vs_m.png"
set terminal $term size 800,500
set datafile missing "nan"
set logscale x 2
set key top left
set grid
set xlabel "micro-batches M"
set output "$OUT/speedup_vs_m.png"
set title "Speedup vs M ($NP stages, $LAYERS x $HIDDEN, batch $BATCH): step time at M=1 / at M"
set ylabel "speedup"
plot "$OUT/m_sweep_gpipe.dat" using 1:3 with linespoints lw 2 title "gpipe", \
     "$OUT/m_sweep_1f1b.dat" using 1:3 with linespoints lw 2 title "1f1b"
set output "$OUT/bubble_vs_m.png"
set title "Bubble vs M ($NP stages): measured, simulated from measured stage times, (K-1)/(M+K-1)"
set ylabel "bubble (idle fraction)"
set yrange [0:1]
plot "$OUT/m_sweep_gpipe.dat" using 1:5 with linespoints lw 2 title "gpipe measured", \
     "$OUT/m_sweep_1f1b.dat" using 1:5 with linespoints lw 2 title "1f1b measured", \
     "$OUT/m_sweep_gpipe.dat" using 1:7 with lines dt 2 lw 2 title "gpipe simulated", \
     "$OUT/m_sweep_gpipe.dat" using 1:6 with lines lw 1 lc rgb "black" title "theory"
EOF
elif [ "$PLOT" = 1 ]; then
    echo "# gnuplot not found: plots skipped (apt-get install gnuplot-nox to get them)"
fi
[ "$failed" -eq 0 ] || { echo "# $failed runs failed" >&2; exit 1; }
