#!/usr/bin/env bash
# tests/t_shape.sh: the code's shape limits (function and file lengths, include layers, file-top
# comments): see tests/shape.py.
source "$(dirname "$0")/lib.sh"
python3 "$ROOT/tests/shape.py"
