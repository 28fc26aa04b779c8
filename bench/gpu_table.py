# bench/gpu_table.py: bench/gpu.sh's one table, from its two records: steps.tsv (step, verdict, note:
# one line per step) and gpu.jsonl (one line per training run: micropp's --json and bench/torch_mlp.py's
# line for the same model, or why there is none). Markdown on stdout.
import json, sys

steps_path, runs_path = sys.argv[1:3]
print("| step | verdict | note |")
print("| --- | --- | --- |")
failed = 0
for line in open(steps_path):
    step, verdict, note = (line.rstrip("\n").split("\t") + ["", ""])[:3]
    failed += verdict == "FAIL"
    print("| %s | %s | %s |" % (step, verdict, note.replace("|", "/")))
print()
print("| run | ranks | micropp step (ms) | micropp samples/s | PyTorch step (ms) | PyTorch samples/s "
      "| micropp time / PyTorch's |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for line in open(runs_path):
    r = json.loads(line)
    m, t = r["result"], r["torch"]
    row = [r["label"], str(r["ranks"]), "%.3f" % m["step_ms_median"], "%.0f" % m["samples_per_s"]]
    if "skipped" in t:
        row += ["-", "-", "no yardstick: %s" % t["skipped"]]
    else:
        row += ["%.3f" % t["step_ms_median"], "%.0f" % t["samples_per_s"],
                "%.2f (on %s)" % (m["step_ms_median"] / t["step_ms_median"], t["device"])]
    print("| " + " | ".join(row) + " |")
print()
print("%d step%s failed" % (failed, "" if failed == 1 else "s"))
