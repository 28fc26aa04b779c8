#!/usr/bin/env bash
# tests/t_shape.sh: the code's shape limits (function and file lengths, include layers, file-top
# comments): see tests/shape.py.
source "$(dirname "$0")/lib.sh"
python3 "$ROOT/tests/shape.py"

# The rules can fail: in a copy of the sources, a comms/ header that reaches up for the root's comms.h
# breaks the floors (comms/ sits below the core), and a .cu file over the limit breaks the file rule.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$ROOT"/*.[ch] "$ROOT"/*.cu "$tmp"/ && cp -r "$ROOT"/{base,comms,axes,train,planner} "$tmp"/ && mkdir "$tmp/tests" &&
    cp "$ROOT"/tests/*.[ch] "$ROOT/tests/shape.py" "$tmp/tests"/
sed -i 's|^#include "comms/algo.h"|#include "comms.h"|' "$tmp/comms/ring.h"
for i in $(seq 800); do echo "// padding"; done >> "$tmp/kernels.cu"
out=$(python3 "$tmp/tests/shape.py" 2>&1)
grep -q '^FAIL shape/every include points down.*comms/ring.h (comms/) includes comms.h (core)' <<< "$out" &&
    pass "shape/the floors fail a comms/ file that includes the root's comms.h" ||
    fail "shape/the floors fail a comms/ file that includes the root's comms.h" "$(grep 'points down' <<< "$out")"
grep -q '^FAIL shape/no .c or .cu file over 800 lines: kernels.cu has' <<< "$out" &&
    pass "shape/the file limit fails a .cu file over it" ||
    fail "shape/the file limit fails a .cu file over it" "$(grep 'file over' <<< "$out")"
