# tests/t_docs.sh: the pages cannot drift from the binary. Every `$ ./micropp ...` / `$ mpiexec ...`
# example in README.md and docs/*.md runs again and must print what the page shows (lines with
# timings left out; the convention and its <!-- doc-test: ... --> annotations are at the top of
# tests/doc_examples.py), the README's options table must match `micropp train --help`, every
# relative link must lead somewhere, and the README stays a front page.
source "$(dirname "$0")/lib.sh"
cd "$ROOT" || exit 1
PAGES=(README.md docs/*.md)

# --- the README: a front page that names the two commands CI and users start from ---
n=$(wc -l < README.md)
[ "$n" -le 250 ] && pass "docs/README.md is a front page: $n lines (at most 250; long sections go to docs/)" \
                 || fail "docs/README.md is a front page" "$n lines, at most 250: move the long sections to docs/"
for c in "make test" "make run"; do
    grep -q "^$c " README.md && pass "docs/README.md names \`$c\`" || fail "docs/README.md names \`$c\`" "no line starts with '$c'"
done

# --- links ---
python3 tests/doc_examples.py --links "${PAGES[@]}"

# --- the examples ---
if [ ! -x "$MICROPP" ]; then
    fail "docs/examples" "$MICROPP is not built (make)"
    exit 0
fi
python3 tests/doc_examples.py --micropp "$MICROPP" "${PAGES[@]}" | tee "$TMP/examples"
ran=$(grep -cE '^(PASS|FAIL) [^ ]+:[0-9]+ \$ ' "$TMP/examples")
[ "$ran" -ge 20 ] && pass "docs/examples: $ran examples run (and $(grep -c '^SKIP ' "$TMP/examples") skipped)" \
                  || fail "docs/examples" "only $ran examples found and run: is the convention of tests/doc_examples.py still followed?"
