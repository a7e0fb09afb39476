#!/usr/bin/env bash
# check_saves.sh BIN WORK - what a run writes is whole or absent (common/fa_save.h), tried through the phase binaries:
#   1. an unwritable --csv or --save-dir is refused before anything is computed (one line, exit 2, no check block);
#   2. a folder holding files no run writes is refused, and its files are left alone;
#   3. reusing a run's folder replaces its set whole: phase 1's save over phase 4's leaves no dq/dk/dv/do behind;
#   4. a disk that fills mid-save (a 64 KiB tmpfs; skipped where mount is not allowed) leaves no partial set and no
#      partial folder, and the line names the file and the system's reason; so does a --csv on /dev/full.
set -u
BIN=$1
WORK=$2
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
small=(--B 1 --H 1 --S 64 --D 16 --iters 0 --impl cpu)

# Runs a binary that must refuse: exit 2, one "error:" line matching $1, nothing on stdout (nothing was computed).
expect_refusal() {
    local regex=$1
    shift
    "$@" > out.txt 2> err.txt
    local rc=$?
    [ "$rc" -eq 2 ] || fail "$*: exit $rc, expected 2"
    [ "$(wc -l < err.txt)" -eq 1 ] && grep -Eq "^error: .*$regex" err.txt || fail "$*: stderr is not one line matching '$regex': $(cat err.txt)"
    [ ! -s out.txt ] || fail "$*: computed before refusing: $(head -c 200 out.txt)"
}

# 1. Unwritable places, found before the run.
expect_refusal "cannot append to /nonexistent-dir/r.csv: No such file or directory" \
    "$BIN/phase1_naive" "${small[@]}" --csv /nonexistent-dir/r.csv
expect_refusal "--csv: cannot append to .*: Not a directory" "$BIN/phase1_naive" "${small[@]}" --csv /dev/null/r.csv
expect_refusal "cannot use /dev/null/run: Not a directory" "$BIN/phase4_backward" "${small[@]}" --save-dir /dev/null/run

# 2. Someone else's folder.
mkdir notes && echo keep > notes/todo.txt
expect_refusal "--save-dir notes holds 'todo.txt', which no run writes" "$BIN/phase1_naive" "${small[@]}" --save-dir notes
[ "$(cat notes/todo.txt)" = keep ] && [ "$(ls notes)" = todo.txt ] || fail "the refused folder was changed: $(ls notes)"

# 3. A run's folder reused by another run: the new set replaces the old one whole.
"$BIN/phase4_backward" "${small[@]}" --save-dir run > /dev/null 2>&1 || fail "phase 4's save failed"
[ -f run/dq.npy ] && [ -f run/do.npy ] || fail "phase 4 saved no gradients: $(ls run)"
"$BIN/phase1_naive" "${small[@]}" --save-dir run > /dev/null 2>&1 || fail "phase 1's save over phase 4's failed"
have=$(ls run | tr '\n' ' ')
[ "$have" = "checks.csv command.txt k.npy lse.npy o.npy q.npy v.npy " ] || fail "run holds '$have' after phase 1's save"
grep -q phase1_naive run/command.txt || fail "command.txt is not phase 1's"
ls -d run.partial-* > /dev/null 2>&1 && fail "a partial folder was left behind"

# 4. Full disks.
# (a device takes the open; the rows exist only after the run, so here the refusal comes after the check block)
"$BIN/phase1_naive" --B 1 --H 1 --S 64 --D 16 --iters 1 --warmup 0 --impl cpu --csv /dev/full > out.txt 2> err.txt
rc=$?
[ "$rc" -eq 2 ] && grep -q "^error: writing /dev/full failed: No space left on device$" err.txt ||
    fail "--csv /dev/full: exit $rc, $(cat err.txt)"
if mkdir -p full && mount -t tmpfs -o size=64k tmpfs full 2> /dev/null; then
    "$BIN/phase4_backward" --B 1 --H 2 --S 128 --D 32 --iters 0 --impl cpu --save-dir full/run > out.txt 2> err.txt
    rc=$?
    [ "$rc" -eq 2 ] || fail "a save to a full disk: exit $rc, expected 2"
    grep -Eq "^error: writing full/run.partial-[0-9]+/[a-z]+.npy failed: No space left on device$" err.txt ||
        fail "a save to a full disk: $(cat err.txt)"
    [ -z "$(ls full)" ] || fail "a save to a full disk left $(ls full)"
    umount full
else
    echo "note: no tmpfs could be mounted here: the full-disk save is not tried"
fi

[ "$failures" -eq 0 ] && echo "All save checks passed." || echo "$failures save check(s) failed"
[ "$failures" -eq 0 ]
