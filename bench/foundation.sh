#!/usr/bin/env bash
# bench/foundation.sh: the monolith on one core against the one-core sgemm ceiling (issue: foundation).
# Targets: configs/medium.json >= 0.70 of sgemm GFLOP/s; the default config <= 1.0 ms/step.
source "$(dirname "$0")/lib.sh"
RESULTS=${RESULTS:-$ROOT/bench/results/foundation.jsonl}
: > "$RESULTS"
sgemm=$("$ROOT/bench/sgemm" 1024 256)
echo "$sgemm" | sed 's/^/# sgemm /'
peak=$(echo "$sgemm" | head -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["gflops"])')
read -r d_ms d_sps d_gf < <(measure default 1 --config "$ROOT/configs/default.json" --steps 300 --log-every 0)
read -r m_ms m_sps m_gf < <(measure medium 1 --config "$ROOT/configs/medium.json" --steps 12 --log-every 0)
printf '\n%-28s %12s %12s %10s\n' "job (1 core, monolith)" "step ms" "samples/s" "GFLOP/s"
printf '%-28s %12s %12s %10s\n' "sgemm 1024^3" "" "" "$peak" "configs/default.json" "$d_ms" "$d_sps" "$d_gf" "configs/medium.json" "$m_ms" "$m_sps" "$m_gf"
python3 - "$m_gf" "$peak" "$d_ms" <<'PY'
import sys
m, peak, d = map(float, sys.argv[1:])
print("\nmedium / sgemm = %.2f (target >= 0.70) | default step %.3f ms (target <= 1.0)" % (m / peak, d))
PY
echo "# raw runs: $RESULTS"
