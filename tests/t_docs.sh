# tests/t_docs.sh: the pages cannot drift from the binary. Every `$ ./micropp ...` / `$ mpiexec ...`
# example in README.md and docs/*.md runs again and must print what the page shows (lines with
# timings left out; the convention and its <!-- doc-test: ... --> annotations are at the top of
# tests/doc_examples.py), the README's options tables must match each command's --help and name
# every option and schedule, every relative link must lead somewhere, every page of docs/ is linked
# from the README, docs/code.md maps every source file, and the README stays a front page.
source "$(dirname "$0")/lib.sh"
use_cpu_build  # (not about the GPU: tests/lib.sh; the outputs are the same)
unset MICROPP_PEAK_GFLOPS  # (the peak measured, as a user's run has it: tests/lib.sh gives one)
cd "$ROOT" || exit 1
PAGES=(README.md docs/*.md)

# --- the README: a front page that names the two commands CI and users start from ---
n=$(wc -l < README.md)
[ "$n" -le 250 ] && pass "docs/README.md is a front page: $n lines (at most 250; long sections go to docs/)" \
                 || fail "docs/README.md is a front page" "$n lines, at most 250: move the long sections to docs/"
for c in "make test" "make run"; do
    grep -q "^$c " README.md && pass "docs/README.md names \`$c\`" || fail "docs/README.md names \`$c\`" "no line starts with '$c'"
done

# --- links; and every page is linked from the README (a page nobody links is a page nobody reads) ---
python3 tests/doc_examples.py --links "${PAGES[@]}"
unlinked=""
for page in docs/*.md; do grep -qF "]($page" README.md || unlinked="$unlinked $page"; done
[ -z "$unlinked" ] && pass "docs/every page of docs/ is linked from the README ($(ls docs/*.md | wc -l) pages)" \
                   || fail "docs/every page of docs/ is linked from the README" "not linked:$unlinked"

# --- docs/code.md is the one map of the code: a row for every source file (a header that has a .c
# of the same name goes with it), and no row for a file that is gone ---
unmapped="" gone="" n=0
for f in *.c *.h *.cu base/*.[ch] comms/*.[ch] train/*.[ch] axes/*.[ch] planner/*.[ch]; do
    n=$((n + 1))
    case $f in *.h) [ -e "${f%.h}.c" ] && continue ;; esac
    grep -qF "\`$f\`" docs/code.md || unmapped="$unmapped $f"
done
for f in $(grep -oE '`[A-Za-z0-9_/]+\.(c|h|cu)`' docs/code.md | tr -d '`' | sort -u); do
    [ "$f" = name.c ] || [ -e "$f" ] || gone="$gone $f"
done
[ "$n" -ge 50 ] && [ -z "$unmapped$gone" ] && pass "docs/code.md maps every source file ($n) and names none that is gone" \
    || fail "docs/code.md maps every source file" "$n files found (at least 50); no row:${unmapped:- none}; gone:${gone:- none}"

if [ ! -x "$MICROPP" ]; then
    fail "docs/examples" "$MICROPP is not built (make)"
    exit 0
fi

# --- the README names every command, every option of each and every schedule a user meets ---
# (the options tables check that what they name exists; this, that nothing is left out). The
# commands are read from `micropp --help`, at least 6, so the loop cannot run over nothing.
cmds=$("$MICROPP" --help | sed -n '/^Commands:/,/^$/p' | grep -oE '^  [a-z]+ ' | tr -d ' ')
missing=""
for c in $cmds; do
    grep -qE "micropp $c\b" README.md || missing="$missing $c"
    for o in $("$MICROPP" "$c" --help | grep -oE '^( {2}-[a-zA-Z], | {6})--[a-z0-9-]+' | grep -oE -- '--[a-z0-9-]+' | grep -vx -- --help); do
        grep -qE -- "$o([^a-z0-9-]|$)" README.md || missing="$missing $c$o"
    done
done
scheds=$("$MICROPP" train --help | tr '\n' ' ' | sed -E 's/\| +/|/g; s/ +/ /g' | grep -oE -- '--schedule SCHED [^[]*\[[a-z0-9|-]+\]' | grep -oE '\[[a-z0-9|-]+\]$' | tr -d '[]' | tr '|' ' ')
for sc in $scheds; do grep -qF "\`$sc\`" README.md || missing="$missing schedule:$sc"; done
n=$(wc -w <<<"$cmds") k=$(wc -w <<<"$scheds")
[ "$n" -ge 6 ] && [ "$k" -ge 8 ] && [ -z "$missing" ] && pass "docs/README.md names every command ($n), each one's options and every schedule ($k)" \
    || fail "docs/README.md names every command, option and schedule" "$n commands read from micropp --help (at least 6), $k schedules from train --help (at least 8); not in README.md:$missing"

# --- the examples ---
python3 tests/doc_examples.py --micropp "$MICROPP" "${PAGES[@]}" | tee "$TMP/examples"
ran=$(grep -cE '^(PASS|FAIL) [^ ]+:[0-9]+ \$ ' "$TMP/examples")
[ "$ran" -ge 20 ] && pass "docs/examples: $ran examples run (and $(grep -c '^SKIP ' "$TMP/examples") skipped)" \
                  || fail "docs/examples" "only $ran examples found and run: is the convention of tests/doc_examples.py still followed?"
