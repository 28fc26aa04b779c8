#!/usr/bin/env bash
# tests/t_wait.sh: the wait policy (--wait-policy active|passive|auto, MICROPP_WAIT_POLICY; comms/watchdog.c).
# It changes how a waiting rank spends its core, never what is computed: layouts run both ways give the
# same losses and the same weights, byte for byte (the CPU each spends: tests/t_wait_cpu.sh);
# auto follows the cores this process may run on (taskset), said in the summary and --json; a bad word is
# refused in one line with exit 2.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh)
unset MICROPP_WAIT  # (it overrides any policy: tests/run.sh's and a caller's)

# ---- the same bits under either policy: the JSON summary's losses and every saved tensor ----
M=(--layers 4 --hidden 32 --classes 4 --batch 32 --steps 3 --log-every 0 --json)
while IFS='|' read -r name n args; do
    same=1 why=""
    for w in active passive; do
        rm -rf "$TMP/$w"
        # shellcheck disable=SC2086
        run 240 mpiexec -n "$n" "$MICROPP" train "${M[@]}" $args --wait-policy $w --save "$TMP/$w" </dev/null
        if [ "$RC" != 0 ]; then same=0 why="--wait-policy $w: rc $RC: $(tail -c 300 <<<"$ERR")"; break; fi
        json_get '["losses"]' > "$TMP/$w.losses"
    done
    if [ "$same" = 1 ] && ! cmp -s "$TMP/active.losses" "$TMP/passive.losses"; then
        same=0 why="losses $(cat "$TMP/active.losses") active, $(cat "$TMP/passive.losses") passive"
    fi
    files=0  # (a file's name holds its run's id: the files are paired in their order, stage by stage)
    mapfile -t fa < <(ls "$TMP"/active/*.safetensors 2>/dev/null)
    mapfile -t fp < <(ls "$TMP"/passive/*.safetensors 2>/dev/null)
    [ "$same" = 1 ] && [ "${#fa[@]}" != "${#fp[@]}" ] && same=0 why="${#fa[@]} tensor files active, ${#fp[@]} passive"
    for i in "${!fa[@]}"; do
        [ "$same" = 1 ] || break
        files=$((files + 1))
        cmp -s "${fa[$i]}" "${fp[$i]}" || { same=0 why="$(basename "${fa[$i]}") differs from $(basename "${fp[$i]}")"; }
    done
    [ "$same" = 1 ] && [ "$files" = 0 ] && same=0 why="no checkpoint written"
    if [ "$same" = 1 ]; then pass "wait/$name: the same losses and $files tensor files, active and passive"
    else fail "wait/$name: the same bits under either policy" "$why"; fi
done <<'EOF'
pp 4 1f1b|4|--mode pp --micro-batches 4
pp 2 zb-h1 --post-validate|2|--mode pp --schedule zb-h1 --micro-batches 4 --post-validate
hybrid 2x2|4|--pp 2 --dp 2 --micro-batches 2
ddp 2 ring|2|--mode ddp --allreduce ring
ddp 2 shm --zero 3|2|--mode ddp --allreduce shm --zero 3
ddp 2 --deterministic|2|--mode ddp --deterministic --det-rows 16
tp 2|2|--tp 2
ep 2|2|--dp 2 --ep 2 --experts 4
EOF

# (passive spending less CPU than active where a rank waits: tests/t_wait_cpu.sh, a file run alone)

# ---- auto: passive where a node has more ranks than cores (one core by taskset), else active ----
A=(--mode pp --layers 4 --hidden 16 --batch 8 --steps 1 --log-every 0)
if command -v taskset > /dev/null; then
    run 60 taskset -c 0 mpiexec -n 2 "$MICROPP" train "${A[@]}" --wait-policy auto
    if [ "$RC" = 0 ] && grep -q "^waits: --wait-policy auto: waiting ranks sleep after a short spin (2 ranks on this node, 1 core: a node has more ranks than cores)$" <<<"$OUT"
    then pass "wait/auto on 1 core: passive, said in the summary"
    else fail "wait/auto on 1 core: passive" "rc $RC: $(grep waits <<<"$OUT$ERR" | head -c 300)"; fi
else skip "wait/auto on 1 core" "no taskset"; fi
run 60 mpiexec -n 2 "$MICROPP" train "${A[@]}" --wait-policy auto --json
want=$([ "$(nproc)" -ge 2 ] && echo spin || echo sleep)
if [ "$RC" = 0 ] && [ "$(json_get '["wait_policy"]')" = auto ] && [ "$(json_get '["waits"]')" = "$want" ]; then
    pass "wait/auto with 2 ranks on $(nproc) cores: --json says auto, $want"
else fail "wait/auto with 2 ranks on $(nproc) cores" "rc $RC: expected auto, $want: $(tail -c 300 <<<"$OUT$ERR")"; fi
# the environment's policy is the default; the option or the config key wins over it
run 60 env MICROPP_WAIT_POLICY=passive mpiexec -n 2 "$MICROPP" train "${A[@]}" --json
[ "$RC" = 0 ] && [ "$(json_get '["wait_policy"]')" = passive ] && [ "$(json_get '["waits"]')" = sleep ] \
    && ! grep -q "^waits:" <<<"$OUT" \
    && pass "wait/MICROPP_WAIT_POLICY=passive is the default, said in --json (no summary line: the tests set it)" \
    || fail "wait/MICROPP_WAIT_POLICY=passive" "rc $RC: $(tail -c 300 <<<"$OUT$ERR")"
printf '{"wait_policy": "active"}\n' > "$TMP/wait.json"
run 60 env MICROPP_WAIT_POLICY=passive mpiexec -n 2 "$MICROPP" train "${A[@]}" --config "$TMP/wait.json" --json
[ "$RC" = 0 ] && [ "$(json_get '["wait_policy"]')" = active ] \
    && pass "wait/the config key wait_policy wins over MICROPP_WAIT_POLICY" \
    || fail "wait/the config key wait_policy" "rc $RC: $(tail -c 300 <<<"$OUT$ERR")"
run 60 env -u MICROPP_WAIT_POLICY mpiexec -n 2 "$MICROPP" train "${A[@]}" --json
[ "$RC" = 0 ] && [ "$(json_get '["wait_policy"]')" = active ] && ! grep -q "^waits:" <<<"$OUT" \
    && pass "wait/the default: active, no line in the summary" \
    || fail "wait/the default: active, no line in the summary" "rc $RC: $(grep '^waits:' <<<"$OUT")"

expect_user_error "wait-bad/--wait-policy nap: one line, exit 2" "--wait-policy = 'nap' is not one of active\|passive\|auto" \
    30 mpiexec -n 2 "$MICROPP" train "${A[@]}" --wait-policy nap
expect_user_error "wait-bad/MICROPP_WAIT_POLICY=nap: one line, exit 2" \
    "MICROPP_WAIT_POLICY=nap: expected active, passive or auto" 30 \
    env MICROPP_WAIT_POLICY=nap mpiexec -n 2 "$MICROPP" train "${A[@]}"
