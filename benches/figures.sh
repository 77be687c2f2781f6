#!/usr/bin/env bash
# Everything the README's "Performance" tables need, for the current tree
# and (with --base REV) for an earlier commit built in a separate worktree,
# run interleaved (now, before, now, before, ...), then medians and ratios.
#
#   bash benches/figures.sh --base c251234              # 5 runs of each
#   bash benches/figures.sh --base c251234 --runs 3 --only orders,pair
#   bash benches/figures.sh --quick                     # smoke test: tiny sizes, one run, no base
#
# Options:
#   --base REV    also measure REV: checked out in a worktree under OUT, with
#                 this tree's benches/ and Cargo.lock copied in, so that one
#                 harness measures both builds (REV's crate must have the API
#                 the harness uses)
#   --runs N      runs of each build (default 5)
#   --only LIST   parts, comma-separated (default all):
#                   orders   `orders`, default features and huge-pages
#                   compare  a full `compare` (default features) and
#                            `compare --only lookups,pauses` (huge-pages)
#                   pair     callgrind instruction counts of an insert +
#                            remove pair (past the last key, and spread
#                            over the tree), and of an insert while growing
#                            to 65 536 in each order, and what a lookup
#                            costs at 262 144 in each order (instructions,
#                            simulated cache misses) (once per build:
#                            deterministic)
#   --out DIR     where builds, runs and summaries go (default
#                 target/figures)
#   --quick       `--quick` runs of the binaries: checks the script, not a
#                 figure
#
# Output: OUT/runs/<part>-<build>-<run>.* (one file per run), and
# OUT/summary-<part>.txt (what `medians` made of them; printed too).
# Builds: now, before, and each with `+hp` (the benches crate's huge-pages
# feature). Run it on a quiet machine: every table names the CPU it ran on.
# Takes about 2 min of builds, then runs x builds x 5 min on 2 cores (two
# `orders` of 15-30 s, a full `compare` of about 2 min and a huge-pages
# `compare --only lookups,pauses` of about 1.5 min): 5 runs with a base,
# about 50 minutes.

set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

BASE=
RUNS=5
ONLY=orders,compare,pair
OUT=$ROOT/target/figures
QUICK=
while [ $# -gt 0 ]; do
    case $1 in
        --base) BASE=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --quick) QUICK=--quick; RUNS=1; shift ;;
        -h|--help) sed -n '2,/^$/p' "$0"; exit 0 ;;
        *) echo "unknown argument $1 (--help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

BINS=(orders compare pair medians)
export CARGO_TERM_COLOR=never
# A target dir of its own, so that target/release/ keeps the tree's own
# default build (the last build here is the base's, with huge-pages).
TARGET=$OUT/target

# build SRC NAME [FEATURES]: release binaries of SRC's benches crate, copied
# to OUT/bin/NAME/ (one target dir for every build: the crate's path and
# features tell them apart, the dependencies build once).
build() {
    local src=$1 name=$2 features=${3:-}
    echo "== build $name ($src${features:+, --features $features})"
    (cd "$src" && CARGO_TARGET_DIR=$TARGET cargo build --quiet --release -p latchtree-benches \
        ${features:+--features "$features"} $(printf -- '--bin %s ' "${BINS[@]}"))
    mkdir -p "$OUT/bin/$name"
    for b in "${BINS[@]}"; do cp "$TARGET/release/$b" "$OUT/bin/$name/"; done
}

BUILDS=(now)
build "$ROOT" now
build "$ROOT" now+hp huge-pages
if [ -n "$BASE" ]; then
    SRC=$OUT/base-src
    if [ -d "$SRC" ]; then
        git -C "$SRC" checkout --quiet --force --detach "$BASE"
    else
        git worktree add --detach "$SRC" "$BASE"
    fi
    echo "== before: $(git -C "$SRC" log --oneline -1)"
    # One harness for both builds: this tree's benchmark crate and lock file.
    rm -rf "$SRC/benches"
    mkdir -p "$SRC/benches"
    (cd "$ROOT/benches" && tar cf - --exclude=./results --exclude=./RESULTS.md .) |
        (cd "$SRC/benches" && tar xf -)
    cp "$ROOT/Cargo.lock" "$SRC/Cargo.lock"
    build "$SRC" before
    build "$SRC" before+hp huge-pages
    BUILDS=(now before)
fi

# A fresh set of runs: the summaries glob every file here.
rm -rf "$OUT/runs"
mkdir -p "$OUT/runs"
echo "== machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"

# The runs, interleaved: run i of every build before run i+1 of any.
for i in $(seq 1 "$RUNS"); do
    for b in "${BUILDS[@]}"; do
        for f in "" +hp; do
            bin=$OUT/bin/$b$f
            if wants orders; then
                echo "== run $i: orders, $b$f"
                "$bin/orders" $QUICK >"$OUT/runs/orders-$b$f-$i.tsv"
            fi
            if wants compare; then
                echo "== run $i: compare, $b$f"
                dir=$OUT/runs/compare-$b$f-$i
                if [ -z "$f" ]; then
                    "$bin/compare" $QUICK --out "$dir" >"$dir.txt"
                else
                    "$bin/compare" $QUICK --only lookups,pauses --out "$dir" >"$dir.txt"
                fi
            fi
        done
    done
done

# Callgrind: instructions per insert + remove pair at n = 84 (deterministic:
# once per build). `pair` prints how many pairs it ran.
if wants pair; then
    if command -v valgrind >/dev/null; then
        : >"$OUT/summary-pair.txt"
        for b in "${BUILDS[@]}"; do
            for which in index_pairs latch_pairs btree_pairs \
                index_spread_pairs latch_spread_pairs btree_spread_pairs; do
                log=$OUT/runs/pair-$b-$which.callgrind
                valgrind --tool=callgrind --callgrind-out-file="$log.out" \
                    --toggle-collect="*$which*" "$OUT/bin/$b/pair" >"$log.txt" 2>&1
                got=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log.txt")
                pairs=$(grep -o '^[0-9]* pairs each' "$log.txt" | cut -d' ' -f1)
                echo "$b $which: $got instructions / $pairs pairs = $(((got + pairs / 2) / pairs)) a pair" |
                    tee -a "$OUT/summary-pair.txt"
            done
            for order in ascending descending random; do
                log=$OUT/runs/grow-$b-$order.callgrind
                valgrind --tool=callgrind --callgrind-out-file="$log.out" \
                    --toggle-collect='*grow_index*' "$OUT/bin/$b/pair" "$order" >"$log.txt" 2>&1
                got=$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$log.txt")
                inserts=$(grep -o '^[0-9]* inserts' "$log.txt" | cut -d' ' -f1)
                echo "$b grow_index $order: $got instructions / $inserts inserts = $(((got + inserts / 2) / inserts)) an insert" |
                    tee -a "$OUT/summary-pair.txt"
            done
            # What a lookup costs readers at 262 144 ranges, in instructions
            # and simulated misses (a 16 MiB last level): no drift with the
            # machine's load.
            for order in ascending descending random bulk; do
                log=$OUT/runs/lookups-$b-$order.callgrind
                valgrind --tool=callgrind --cache-sim=yes --LL=16777216,16,64 \
                    --callgrind-out-file="$log.out" --toggle-collect='*lookup_stream*' \
                    "$OUT/bin/$b/pair" lookups "$order" >"$log.txt" 2>&1
                read -r ir d1 ll < <(awk '/Collected :/ { print $4, $8, $11 }' "$log.txt")
                n=$(grep -o '^[0-9]* lookups' "$log.txt" | cut -d' ' -f1)
                awk -v b="$b" -v o="$order" -v ir="$ir" -v d1="$d1" -v ll="$ll" -v n="$n" 'BEGIN {
                    printf "%s lookup_stream %s: %.1f instructions, %.2f D1 misses, %.3f LL misses a lookup (%d lookups)\n",
                        b, o, ir / n, d1 / n, ll / n, n }' | tee -a "$OUT/summary-pair.txt"
            done
        done
    else
        echo "== pair: skipped (no valgrind)"
    fi
fi

# Medians and ratios (now/before, now+hp/before+hp).
M=$OUT/bin/now/medians
labels=()
for b in "${BUILDS[@]}"; do labels+=("$b"); done
for b in "${BUILDS[@]}"; do labels+=("$b+hp"); done
if wants orders; then
    args=()
    for l in "${labels[@]}"; do args+=("$l:" "$OUT"/runs/orders-"$l"-*.tsv); done
    "$M" orders "${args[@]}" | tee "$OUT/summary-orders.txt"
fi
if wants compare; then
    args=()
    for l in "${labels[@]}"; do args+=("$l:" "$OUT"/runs/compare-"$l"-*/compare.csv); done
    "$M" compare "${args[@]}" | tee "$OUT/summary-compare.txt"
fi
echo "== done: $OUT/summary-*.txt, one file per run in $OUT/runs"
if wants compare; then
    echo "   the README's charts: $OUT/runs/compare-now-$RUNS/{lookup,readers}.svg (copy them to benches/results/)"
fi
