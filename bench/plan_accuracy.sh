#!/usr/bin/env bash
# bench/plan_accuracy.sh: how honest `micropp plan --auto` is on this machine. For 2 and 4 ranks it
# calibrates two profiles (plan --calibrate: configs/pipeline.json's widths and batch, which cover
# medium.json's, and configs/fashion.json's own widths), asks plan --auto --json for configs/medium.json,
# configs/pipeline.json and configs/fashion.json (Fashion-MNIST: the package dataset-fashion-mnist), then
# runs the planner's pick and a fixed set of other layouts of every family (pipeline schedules, ddp, ZeRO-1,
# 2 and 3, hybrid, --tp 2 alone and beside a pipeline or replicas, activation checkpointing, bf16; about 40 in
# all with the picks) with train --json and compares the measured median step with the prediction. A
# layout is named as plan --auto's table names it, or, for what the search leaves out (checkpointing where
# it fits without), as "= <train's flags>", priced alone (plan --profile without --auto). The layouts of a
# (config, ranks) run round-robin REPS times, so that a drift of the machine's load hits them alike;
# a layout's figure is the median of its runs' median steps. Prints a markdown table (also
# bench/results/plan_accuracy.md): per layout predicted and measured ms and the error; per (config,
# ranks) the regret (the pick's measured step over the best measured, within 3% or not); the median error; then, for
# the rows with replicas or slices, the collectives a run waited for against the prediction's, with the
# profile's collective wait (plan --calibrate's collective_wait) and without it (the same profile less the
# term: what the planner predicted before issue 32).
#   bash bench/plan_accuracy.sh                  # about 12 minutes on a quiet 2-core machine (not yet timed)
#   REPS=1 STEPS=3 bash bench/plan_accuracy.sh   # a quicker, noisier pass
#   RANKS=2 bash bench/plan_accuracy.sh          # the 2-rank groups only
# The table goes to stdout as docs/planner.md shows it; how long the pass took, to stderr.
source "$(dirname "$0")/lib.sh"
STEPS=${STEPS:-4}
RANKS=${RANKS:-2 4}
OUT=$ROOT/bench/results
RESULTS=$OUT/plan_accuracy.jsonl
: > "$RESULTS"
# The layouts measured besides the pick: a name plan --auto gives (layout_name), or "= FLAGS" priced alone.
declare -A LAYOUTS=(
    [pipeline.json:2]="pp 1f1b M=8 fp32|pp zb-h1 M=8 fp32|pp 1f1b M=16 bf16|ddp fp32|monolith tp2 fp32|ddp zero3 bf16"\
"|= --mode pp --schedule 1f1b --micro-batches 8 --checkpoint-activations --precision fp32"
    [medium.json:2]="ddp fp32|ddp zero1 fp32|pp 1f1b M=4 fp32|pp zb-h1 M=4 bf16|monolith tp2 bf16|ddp zero2 fp32"\
"|ddp zero3 fp32|= --mode pp --schedule zb-h1 --micro-batches 4 --checkpoint-activations --precision bf16"
    [pipeline.json:4]="hybrid 1f1b M=8 fp32|pp 1f1b M=8 fp32|ddp bf16|pp 1f1b M=8 tp2 fp32"\
"|= --mode pp --schedule 1f1b --micro-batches 8 --checkpoint-activations --precision bf16"
    [medium.json:4]="ddp fp32|hybrid 1f1b M=4 fp32|pp 1f1b M=8 bf16|ddp tp2 fp32"
    [fashion.json:2]="pp 1f1b M=4 fp32|ddp fp32|ddp zero1 fp32|monolith tp2 fp32|pp zb-h1 M=4 bf16"\
"|= --mode pp --schedule gpipe --micro-batches 4 --checkpoint-activations --precision fp32"
    [fashion.json:4]="hybrid 1f1b M=4 fp32|ddp fp32|pp 1f1b M=4 fp32|ddp tp2 fp32|ddp zero3 fp32"
)
for n in $RANKS; do
    mpiexec -n "$n" "$MICROPP" plan --calibrate --config "$ROOT/configs/pipeline.json" --out "$OUT/profile_$n.json" \
        > /dev/null < /dev/null
    mpiexec -n "$n" "$MICROPP" plan --calibrate --config "$ROOT/configs/fashion.json" --out "$OUT/fashion_$n.json" \
        > /dev/null < /dev/null
    for cfg in pipeline.json medium.json fashion.json; do
        profile=$OUT/profile_$n.json
        [ "$cfg" = fashion.json ] && profile=$OUT/fashion_$n.json
        # The pick first, then the fixed set (each once); for each: its name, prediction and command.
        MICROPP=$MICROPP python3 - "${LAYOUTS[$cfg:$n]}" "$n" "$profile" "$ROOT/configs/$cfg" > "$OUT/plan_rows.tsv" <<'PY'
import json, os, shlex, subprocess, sys
want, n, profile, config = sys.argv[1].split("|"), sys.argv[2], sys.argv[3], sys.argv[4]
nowait = profile[:-5] + "_nowait.json"  # the same profile less its collective wait
p = json.load(open(profile)); p.pop("collective_wait", None); json.dump(p, open(nowait, "w"))
def plan(*args, config=config, profile=profile):
    return json.loads(subprocess.run([os.environ["MICROPP"], "plan", "--world", n, "--profile", profile] +
                                     (["--config", config] if config else []) + ["--json"] + list(args), check=True,
                                     capture_output=True, text=True).stdout)
rows = [r for r in plan("--auto")["layouts"] if r["fits"]]
out = [rows[0]]
for w in want:
    r = plan(*shlex.split(w[1:])) if w.startswith("=") else next((r for r in rows if r["layout"] == w), None)
    if r is None: sys.exit("plan --auto has no layout '%s'" % w)
    if r["layout"] not in [o["layout"] for o in out]: out.append(r)
for i, r in enumerate(out):  # (its predicted collectives not hidden: the layout priced alone, its parts)
    parts = r.get("parts_ms") or plan(*shlex.split(r["command"])[5:], config=None)["parts_ms"]
    r0 = plan(*shlex.split(r["command"])[5:], config=None, profile=nowait)
    print("%s\t%d\t%.6f\t%.6f\t%.6f\t%.6f\t%s" % (r["layout"], i == 0, r["step_s"], parts["collectives"],
          r0["step_s"], r0["parts_ms"]["collectives"], r["command"]))
PY
        for ((rep = 0; rep < REPS; rep++)); do
            while IFS=$'\t' read -r name pick pred coll pred0 coll0 cmd; do
                args=${cmd#mpiexec -n $n ./micropp train }
                out=$(mpiexec -n "$n" "$MICROPP" train $args --steps "$STEPS" --log-every 0 --json < /dev/null)
                printf '{"config": "%s", "ranks": %d, "layout": "%s", "pick": %d, "predicted_s": %s, ' \
                    "$cfg" "$n" "$name" "$pick" "$pred" >> "$RESULTS"
                printf '"predicted_coll_ms": %s, "predicted_nowait_s": %s, "predicted_nowait_coll_ms": %s, ' \
                    "$coll" "$pred0" "$coll0" >> "$RESULTS"
                printf '"rep": %d, "result": %s}\n' "$rep" "$out" >> "$RESULTS"
            done < "$OUT/plan_rows.tsv"
        done
    done
done
python3 - "$RESULTS" "$STEPS" <<'PY' | tee "$OUT/plan_accuracy.md"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
rows = []
for r in runs:  # one row per layout: the median over its repetitions of a run's median step
    key = (r["config"], r["ranks"], r["layout"])
    if key in [(x["config"], x["ranks"], x["layout"]) for x in rows]: continue
    same = [x["result"]["step_ms_median"] for x in runs if (x["config"], x["ranks"], x["layout"]) == key]
    rows.append(dict(r, result={"step_ms_median": statistics.median(same)}, n=len(same)))
print("| config | ranks | layout | predicted ms | measured ms | error |")
print("|---|---|---|---|---|---|")
errs = []
for r in rows:
    m = r["result"]["step_ms_median"]; p = r["predicted_s"] * 1e3; e = (p - m) / m
    errs.append(abs(e))
    print("| %s | %d | %s%s | %.1f | %.1f | %+.0f%% |" % (r["config"], r["ranks"], r["layout"],
          " (pick)" if r["pick"] else "", p, m, 100 * e))
print()
for key in sorted({(r["config"], r["ranks"]) for r in rows}):
    g = [r for r in rows if (r["config"], r["ranks"]) == key]
    best = min(g, key=lambda r: r["result"]["step_ms_median"])
    pick = next(r for r in g if r["pick"])
    ratio = pick["result"]["step_ms_median"] / best["result"]["step_ms_median"]
    print("- %s on %d ranks: the pick (%s) measured %.1f ms, the best measured (%s) %.1f ms: regret %.2fx%s" % (
        key[0], key[1], pick["layout"], pick["result"]["step_ms_median"], best["layout"],
        best["result"]["step_ms_median"], ratio, " (within 3%)" if ratio <= 1.03 else " (NOT within 3%)"))
print()
print("median |error| over %d layouts: %.1f%% (%s steps per run, the first skipped; %d runs per layout)" % (
    len(errs), 100 * statistics.median(errs), sys.argv[2], rows[0]["n"]))
if all("predicted_nowait_s" in r for r in rows):  # (the profile less its collective wait: issue 32's before)
    e0 = [abs(r["predicted_nowait_s"] * 1e3 / r["result"]["step_ms_median"] - 1) for r in rows]
    print("without the profile's collective wait: median |error| %.1f%%, worst %.0f%% (with it: worst %.0f%%)" % (
        100 * statistics.median(e0), 100 * max(e0), 100 * max(errs)))
# The replicas' and slices' collectives: what a run waited for (data parallelism's sync not hidden, comm_ms x (1 -
# comm_hidden_fraction); the tensor-parallel all-reduces, which a pass waits for whole) against the prediction's
# collectives not hidden, from the first run of each layout.
sync = [(r, x) for r in rows for x in [next(y["result"] for y in runs if (y["config"], y["ranks"], y["layout"]) ==
        (r["config"], r["ranks"], r["layout"]))] if "comm_ms" in x or "tp_allreduce_ms_per_step" in x]
if sync and all("predicted_nowait_coll_ms" in r for r, _ in sync):
    print()
    print("| config | ranks | layout | step: measured - predicted ms | collectives waited for, measured ms | predicted ms "
          "| without the wait: step, measured - predicted ms | predicted collectives ms |")
    print("|---|---|---|---|---|---|---|---|")
    for r, x in sync:
        waited = x.get("comm_ms", 0) * (1 - x.get("comm_hidden_fraction", 0)) + x.get("tp_allreduce_ms_per_step", 0)
        print("| %s | %d | %s | %+.1f | %.1f | %.2f | %+.1f | %.2f |" % (r["config"], r["ranks"], r["layout"],
              x["step_ms_median"] - r["predicted_s"] * 1e3, waited, r["predicted_coll_ms"],
              x["step_ms_median"] - r["predicted_nowait_s"] * 1e3, r["predicted_nowait_coll_ms"]))
PY
echo "bench/plan_accuracy.sh: ${SECONDS}s (REPS=$REPS, STEPS=$STEPS)" >&2
