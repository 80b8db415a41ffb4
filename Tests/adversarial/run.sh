#!/usr/bin/env bash
# Adversarial test of the INSTALLED plugin (GStreamer finds it in the user plugin folder): every class
# of bad or extreme input, fed through gst-launch-1.0 under `timeout`, each outcome classified as
#   clean  the process exited by itself and did what the case expects: ran to EOS (output checked
#          where there is one), or posted an ERROR / a WARNING (with a word of the message checked);
#   crash  killed by a signal (SIGILL/SIGTRAP: Swift runtime traps; SIGABRT, SIGBUS, SIGSEGV, SIGKILL);
#   hang   still running at its time limit;
#   wrong  exited by itself but not as expected (e.g. exit 0 where an ERROR was due).
# Prints `PASS <name>` or `FAIL <name> (<class>: <detail>)` plus the last log lines per case, then
#   adversarial: N inputs, C clean, X crashes, H hangs, W wrong
# and exits non-zero on any FAIL. Hostile files are built fresh under build/adversarial/ each run; the
# installed model sets are cloned (hard links where possible) and never modified in place.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/Tests/adversarial"
OUT="$ROOT/build/adversarial"
rm -rf "$OUT"; mkdir -p "$OUT/logs" "$OUT/sets" "$OUT/runtime" "$OUT/outputs"
# A private registry: a stale or blacklisted entry elsewhere must not decide the result.
export GST_REGISTRY="$OUT/registry.bin"

DATA="${XDG_DATA_HOME:-$HOME/.local/share}/gst-matanyone"
SEG_SRC="$DATA/models/segmenter"
M2_SRC="${MATANYONE_TEST_MODELS:-$ROOT/build/test-models}/matanyone2"
RVM_SRC="$DATA/models/rvm"
ORT_LIB="$(readlink -f "$DATA/onnxruntime/libonnxruntime.so.1" 2>/dev/null || true)"
SETS="$OUT/sets"
MASKS="$OUT/masks"
MAKE=(python3 "$HERE/make_inputs.py")

# Time limits (s), generous for a slow shared 2-core machine: FAST for inputs that must be refused
# before any inference (FIFOs, oversized files), NORMAL for small frames, BIG for huge frames.
T_FAST=30 T_NORMAL=60 T_BIG=180
# Data-segment cap (ulimit -d) for the cases that may try to allocate without bound (memcap=1): half
# the machine's memory, at most 8 GiB (the legitimate 7680x4320 MatAnyone2 run needs < 3 GiB). It
# keeps a runaway allocation from driving a shared machine into the OOM killer, which may pick another
# process; the allocation fails inside the element instead. Not used elsewhere: with threads=256 the
# thread stacks count against it too.
MEM_KB=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo 2>/dev/null || true)
DATA_LIMIT_KB=$((${MEM_KB:-0} / 2))
if [ "$DATA_LIMIT_KB" -le 0 ] || [ "$DATA_LIMIT_KB" -gt 8388608 ]; then DATA_LIMIT_KB=8388608; fi

total=0 clean=0 crashes=0 hangs=0 wrong=0 repro=""

# ---------------------------------------------------------------------------------------------------
# The case runner.
#   run_case NAME EXPECT TIMEOUT [word=REGEX] [out=FILE:BYTES] [needs=seg|m2|rvm|ort] [memcap=1] -- GST-LAUNCH ARGS...
# EXPECT: eos      exit 0 after EOS (warnings allowed); with out=, FILE must then hold BYTES bytes
#         error    an ERROR was posted ("ERROR: from element"), the process exited non-zero by itself
#         warning  a WARNING was posted, then EOS as for eos
#         either   a clean ERROR or EOS (which one is printed)
#         notneg   refused at negotiation (not-negotiated / could not link), exited by itself
# word=: an extended regex (case-insensitive) the ERROR/WARNING/log must contain, e.g. the path at fault.
fail() { # name, class, detail, log
    echo "FAIL $1 ($2: $3)"
    [ -f "$4" ] && [ "$4" != /dev/null ] && { tail -n 10 "$4"; echo "  repro: $repro"; }
    case "$2" in crash) crashes=$((crashes + 1)) ;; hang) hangs=$((hangs + 1)) ;; *) wrong=$((wrong + 1)) ;; esac
}

run_case() {
    local name="$1" expect="$2" limit="$3"; shift 3
    local word="" out="" needs="" memcap=""
    while [ $# -gt 0 ] && [ "$1" != "--" ]; do
        case "$1" in
            word=*) word="${1#word=}" ;;
            out=*) out="${1#out=}" ;;
            needs=*) needs="${1#needs=}" ;;
            memcap=1) memcap=1 ;;
            *) echo "run_case $name: bad option $1" >&2; return 1 ;;
        esac
        shift
    done
    shift # --
    total=$((total + 1))
    local log="$OUT/logs/${name//\//_}.log"
    case "$needs" in
        seg) [ -f "$SEG_SRC/manifest.json" ] || { fail "$name" setup "no segmenter set at $SEG_SRC (run scripts/setup.sh)" /dev/null; return; } ;;
        m2) [ -f "$M2_SRC/manifest.json" ] || { fail "$name" setup "no matanyone2 test set" /dev/null; return; } ;;
        rvm) [ -f "$RVM_SRC/manifest.json" ] || { fail "$name" setup "no rvm set at $RVM_SRC (run scripts/setup.sh)" /dev/null; return; } ;;
        ort) [ -f "$ORT_LIB" ] || { fail "$name" setup "no ONNX Runtime at $DATA/onnxruntime (run scripts/setup.sh)" /dev/null; return; } ;;
    esac
    local started rc elapsed attempt
    for attempt in 1 2; do
        started=$SECONDS
        # (Not exec: the subshell reports a death by signal into the log, not onto this script's stderr.)
        ( [ -n "$memcap" ] && ulimit -d "$DATA_LIMIT_KB"
          timeout -k 10 "$limit" gst-launch-1.0 --no-fault "$@"; exit $? ) </dev/null >"$log" 2>&1
        rc=$?
        elapsed=$((SECONDS - started))
        # gst-launch-1.0 1.22 quits its main loop from a bus *sync* handler on ERROR; an ERROR posted
        # before the main thread has entered g_main_loop_run (an element refusing caps within the
        # first milliseconds of streaming, on a loaded machine) is lost, and gst-launch waits forever
        # with the pipeline already failed (gdb: main thread idle in g_main_loop_run, the ERROR
        # printed, "Setting pipeline to NULL" never reached). That is gst-launch's race, not the
        # element's: a case that timed out that way is run once more, and a second hang counts.
        if [ "$attempt" = 1 ] && [ "$rc" = 124 ] && grep -q "^ERROR: pipeline doesn't want to preroll" "$log" \
                && ! grep -q "^Setting pipeline to NULL" "$log"; then
            echo "NOTE $name: gst-launch lost the quit of an early ERROR (its own race); running it again"
            continue
        fi
        break
    done
    # For the report only: the log itself is what the checks read (the command line names the paths).
    repro="GST_REGISTRY=$GST_REGISTRY timeout $limit gst-launch-1.0 --no-fault $*  # exit $rc after ${elapsed}s"

    # timeout says 124 when it stopped the command, 137 when it had to SIGKILL it after -k.
    if [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ "$elapsed" -ge "$limit" ]; }; then
        fail "$name" hang "no exit within ${limit}s" "$log"; return
    fi
    # 128+N is death by signal N (timeout passes it on); gst-launch's own failures exit 1 or 255 (-1).
    if [ "$rc" -gt 128 ] && [ "$rc" -lt 192 ]; then
        local why; why="$(grep -m1 -E "^Fatal error|terminate called|^Assertion|runtime error" "$log" | cut -c1-160)"
        fail "$name" crash "SIG$(kill -l $((rc - 128)) 2>/dev/null || echo "?") (exit $rc) after ${elapsed}s${why:+: $why}" "$log"; return
    fi
    local got_error=0 got_eos=0 got_warning=0 got_notneg=0
    grep -q "^ERROR: from element" "$log" && got_error=1
    [ "$rc" = 0 ] && grep -q "^Got EOS from element" "$log" && got_eos=1
    grep -q "^WARNING: from element" "$log" && got_warning=1
    grep -qiE "not-negotiated|not negotiated|could not link" "$log" && got_notneg=1
    local first_error; first_error="$(grep -m1 "^ERROR: from element" "$log" | cut -d: -f4- | cut -c1-140)"
    local first_warning; first_warning="$(grep -m1 "^WARNING: from element" "$log" | cut -d: -f4- | cut -c1-140)"

    check_output() { # after EOS: the file holds the bytes expected (all frames, full size)
        [ -z "$out" ] && return 0
        local file="${out%:*}" bytes="${out##*:}" size
        size=$(size_of "$file")
        rm -f "$file"
        [ "$size" = "$bytes" ] || { fail "$name" wrong "ran to EOS but wrote $size bytes, expected $bytes" "$log"; return 1; }
    }
    check_word() { # the message names what it should
        [ -z "$word" ] && return 0
        grep -qiE -- "$word" "$log" || { fail "$name" wrong "$1 does not mention '$word'" "$log"; return 1; }
    }
    local outcome="exit $rc"
    if [ "$got_error" = 1 ]; then outcome="ERROR:$first_error"; elif [ "$got_eos" = 1 ]; then outcome="EOS (exit 0)"; fi

    case "$expect" in
        eos)
            [ "$got_eos" = 1 ] && [ "$got_error" = 0 ] || { fail "$name" wrong "expected EOS, got $outcome" "$log"; return; }
            check_output && check_word "the log" || return ;;
        warning)
            [ "$got_eos" = 1 ] && [ "$got_error" = 0 ] || { fail "$name" wrong "expected a WARNING then EOS, got $outcome" "$log"; return; }
            [ "$got_warning" = 1 ] || { fail "$name" wrong "ran to EOS without the expected WARNING" "$log"; return; }
            check_output && check_word "the WARNING" || return ;;
        error)
            [ "$got_error" = 1 ] && [ "$rc" != 0 ] || { fail "$name" wrong "expected an ERROR, got $outcome" "$log"; return; }
            check_word "the ERROR" || return ;;
        either)
            if [ "$got_error" = 1 ] && [ "$rc" != 0 ]; then
                check_word "the ERROR" || return
                echo "PASS $name (clean ERROR:$first_error)"; clean=$((clean + 1)); return
            fi
            [ "$got_eos" = 1 ] || { fail "$name" wrong "expected a clean ERROR or EOS, got $outcome" "$log"; return; }
            check_output || return
            echo "PASS $name (ran to EOS)"; clean=$((clean + 1)); return ;;
        notneg)
            [ "$rc" != 0 ] && [ "$got_notneg" = 1 ] || { fail "$name" wrong "expected refusal at negotiation, got $outcome" "$log"; return; }
            check_word "the log" || return ;;
        *) echo "run_case $name: bad expectation $expect" >&2; return 1 ;;
    esac
    if [ "$expect" = warning ]; then echo "PASS $name (WARNING:$first_warning)"; else echo "PASS $name"; fi
    clean=$((clean + 1))
}

# ---------------------------------------------------------------------------------------------------
# Inputs.
src() { # W H N [more caps]: BGRA test frames
    echo "videotestsrc num-buffers=$3 pattern=smpte ! video/x-raw,format=BGRA,width=$1,height=$2${4:+,$4}"
}
GRAY_SINK="video/x-raw,format=GRAY8 ! fakesink"
gray_file() { echo "video/x-raw,format=GRAY8 ! filesink location=$OUT/outputs/$1.gray"; }

# A copy of a model set that shares the installed files' inodes (hard links) where it can. Files in
# a clone are changed only by replacing them (rm first, or make_inputs.py's write-and-rename), never
# by writing into them, so that the originals stay untouched.
size_of() { stat -c %s "$1" 2>/dev/null || echo 0; }
clone() { # SRC DST
    mkdir -p "$2"
    cp -rl "$1/." "$2/" 2>/dev/null || { rm -rf "$2"; mkdir -p "$2"; cp -r "$1/." "$2/"; }
}
# mkset CASE ENGINE: $SETS/CASE/ with segmenter/ (and matanyone2/ for that engine: automatic seeding
# uses the segmenter); prints the folder of ENGINE's set.
mkset() {
    mkdir -p "$SETS/$1/$2"
    [ -f "$SEG_SRC/manifest.json" ] && clone "$SEG_SRC" "$SETS/$1/segmenter"
    [ "$2" = matanyone2 ] && [ -f "$M2_SRC/manifest.json" ] && clone "$M2_SRC" "$SETS/$1/matanyone2"
    [ "$2" = rvm ] && [ -f "$RVM_SRC/manifest.json" ] && clone "$RVM_SRC" "$SETS/$1/rvm"
    echo "$SETS/$1/$2"
}

"${MAKE[@]}" masks "$MASKS" || { echo "FAIL setup (make_inputs.py masks)"; exit 1; }
GOOD_SET="$(dirname "$(mkset good matanyone2)")"
M2_OPTS="engine=matanyone2 model-dir=$GOOD_SET seed=mask seed-mask=$MASKS/good.png warmup=1"

# The plugin must be there at all; the first call also builds the private registry.
if ! gst-inspect-1.0 matanyone >"$OUT/logs/inspect.log" 2>&1; then
    echo "FAIL plugin-installed (setup: gst-inspect-1.0 matanyone fails; run scripts/setup.sh)"; tail -n 10 "$OUT/logs/inspect.log"
    echo "adversarial: 1 inputs, 0 clean, 0 crashes, 0 hangs, 1 wrong"; exit 1
fi

# ---------------------------------------------------------------------------------------------------
# 0. Baselines: the unmodified sets run, so that a failure below is the hostile input's doing.
run_case seg-baseline eos $T_NORMAL needs=seg out="$OUT/outputs/seg-baseline.gray:$((64 * 48 * 3))" -- \
    $(src 64 48 3) ! matanyone engine=segmenter model-dir="$GOOD_SET" ! $(gray_file seg-baseline)
run_case m2-baseline eos $T_NORMAL needs=m2 out="$OUT/outputs/m2-baseline.gray:$((64 * 48 * 3))" -- \
    $(src 64 48 3) ! matanyone $M2_OPTS working-size=64 ! $(gray_file m2-baseline)
RVM_SET="$(dirname "$(mkset rvm-good rvm)")"
run_case rvm-baseline eos $T_NORMAL needs=rvm out="$OUT/outputs/rvm-baseline.gray:$((64 * 48 * 3))" -- \
    $(src 64 48 3) ! matanyone engine=rvm model-dir="$RVM_SET" ! $(gray_file rvm-baseline)

# ---------------------------------------------------------------------------------------------------
# 1. Hostile model sets, for each engine. F: the model file the case attacks.
for engine in segmenter matanyone2 rvm; do
    if [ "$engine" = segmenter ]; then
        p=seg F=selfie_segmentation.onnx MODEL=segmenter SRCSET="$SEG_SRC" needs=seg
        OPTS="engine=segmenter"
    elif [ "$engine" = rvm ]; then
        p=rvm F=rvm_mobilenetv3_fp32.onnx MODEL=rvm SRCSET="$RVM_SRC" needs=rvm
        OPTS="engine=rvm"
    else
        p=m2 F=encoder.onnx MODEL=encoder SRCSET="$M2_SRC" needs=m2
        OPTS="engine=matanyone2 working-size=64 warmup=1"
    fi
    pipe() { echo "$(src 64 48 3) ! matanyone $OPTS model-dir=$(dirname "$1") ! $GRAY_SINK"; }

    d=$(mkset $p-manifest-missing $engine); rm -f "$d/manifest.json"
    run_case $p-manifest-missing error $T_NORMAL needs=$needs word="not found.*$d" -- $(pipe "$d")

    d=$(mkset $p-manifest-empty $engine); rm -f "$d/manifest.json"; : >"$d/manifest.json"
    run_case $p-manifest-empty error $T_NORMAL needs=$needs word="$d" -- $(pipe "$d")

    d=$(mkset $p-manifest-not-json $engine); rm -f "$d/manifest.json"; printf '{"format": 1, "engine": "%s", models: [' $engine >"$d/manifest.json"
    run_case $p-manifest-not-json error $T_NORMAL needs=$needs word="$d" -- $(pipe "$d")

    d=$(mkset $p-manifest-fifo $engine); rm -f "$d/manifest.json"; mkfifo "$d/manifest.json"
    run_case $p-manifest-fifo error $T_FAST needs=$needs word="$d" -- $(pipe "$d")

    d=$(mkset $p-manifest-directory $engine); rm -f "$d/manifest.json"; mkdir "$d/manifest.json"
    run_case $p-manifest-directory error $T_NORMAL needs=$needs word="$d" -- $(pipe "$d")

    d=$(mkset $p-manifest-200MB $engine); rm -f "$d/manifest.json"; truncate -s 200M "$d/manifest.json"
    run_case $p-manifest-200MB error $T_FAST needs=$needs word="$d" -- $(pipe "$d")

    d=$(mkset $p-model-absent $engine); rm -f "$d/$F"
    run_case $p-model-absent error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")

    d=$(mkset $p-onnx-truncated-half $engine)
    [ -f "$SRCSET/$F" ] && { rm -f "$d/$F"; head -c $(($(size_of "$SRCSET/$F") / 2)) "$SRCSET/$F" >"$d/$F"; }
    run_case $p-onnx-truncated-half error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")

    d=$(mkset $p-onnx-random-bytes $engine); rm -f "$d/$F"; "${MAKE[@]}" random "$d/$F" 65536
    run_case $p-onnx-random-bytes error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")

    d=$(mkset $p-onnx-fifo $engine); rm -f "$d/$F"; mkfifo "$d/$F"
    run_case $p-onnx-fifo error $T_FAST needs=$needs word="$F" -- $(pipe "$d")

    # Paths out of the set: the literal traversal (to /etc/passwd), an absolute path, a traversal
    # that lands on a real model (only a refusal shows it was not followed), a symlink out of the set.
    d=$(mkset $p-path-dotdot-passwd $engine)
    [ -f "$d/manifest.json" ] && "${MAKE[@]}" manifest "$d/manifest.json" file $MODEL "$(printf '../%.0s' $(seq 16))etc/passwd"
    run_case $p-path-dotdot-passwd error $T_NORMAL needs=$needs word="passwd" -- $(pipe "$d")

    d=$(mkset $p-path-absolute-passwd $engine)
    [ -f "$d/manifest.json" ] && "${MAKE[@]}" manifest "$d/manifest.json" file $MODEL /etc/passwd
    run_case $p-path-absolute-passwd error $T_NORMAL needs=$needs word="passwd" -- $(pipe "$d")

    d=$(mkset $p-path-dotdot-to-real-model $engine)
    [ -f "$d/manifest.json" ] && "${MAKE[@]}" manifest "$d/manifest.json" file $MODEL "$(realpath --relative-to="$d" "$SRCSET/$F")"
    run_case $p-path-dotdot-to-real-model error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")

    d=$(mkset $p-path-symlink-out $engine)
    [ -f "$SRCSET/$F" ] && { rm -f "$d/$F"; ln -s "$(readlink -f "$SRCSET/$F")" "$d/$F"; }
    run_case $p-path-symlink-out error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")

    d=$(mkset $p-sha256-wrong $engine)
    [ -f "$d/manifest.json" ] && "${MAKE[@]}" manifest "$d/manifest.json" sha256 $MODEL
    run_case $p-sha256-wrong error $T_NORMAL needs=$needs word="$F" -- $(pipe "$d")
done

# MatAnyone2's manifest dims (the engine sizes its tensors from them): the encoder's image input
# [1, 3, "H", "W"] made huge, overflowing, negative, the wrong symbol, a division by zero, unknown.
for spec in "dim-huge:2=2147483647" "dim-overflow:2=4294967296,3=4294967296" "dim-negative:1=-5" \
            'dim-H/2-for-H:2="H/2"' 'dim-H/0:2="H/0"' 'dim-Q:2="Q"'; do
    name="m2-${spec%%:*}" edits="${spec#*:}"
    d=$(mkset "${name//\//_}" matanyone2)
    IFS=, read -ra pairs <<<"$edits"
    for pair in "${pairs[@]}"; do
        [ -f "$d/manifest.json" ] && "${MAKE[@]}" manifest "$d/manifest.json" dim encoder image "${pair%%=*}" "${pair#*=}"
    done
    run_case "$name" error $T_NORMAL needs=m2 word="image|encoder|manifest" -- \
        $(src 64 48 3) ! matanyone engine=matanyone2 working-size=64 warmup=1 model-dir="$(dirname "$d")" ! $GRAY_SINK
done

# ---------------------------------------------------------------------------------------------------
# 2. The ONNX Runtime library (runtime-library=).
R="$OUT/runtime"
mkdir -p "$R/a-directory.so"
mkfifo "$R/fifo.so"
echo "this is a text file, not a shared library" >"$R/text.so"
if [ -f "$ORT_LIB" ]; then
    head -c 10 "$ORT_LIB" >"$R/ten-bytes.so"
    head -c $(($(size_of "$ORT_LIB") / 2)) "$ORT_LIB" >"$R/truncated-half.so"
    head -c 65536 "$ORT_LIB" >"$R/truncated-64k.so"
fi
LIBZ="$(readlink -f "$(ldconfig -p 2>/dev/null | awk '/libz\.so\.1 .*x86-64|libz\.so\.1 / {print $NF; exit}')" 2>/dev/null || true)"
[ -f "$LIBZ" ] || LIBZ="$(readlink -f /lib/x86_64-linux-gnu/libz.so.1 2>/dev/null || true)"
rt_case() { # name, library, timeout, needs
    run_case "$1" error "$3" needs="$4" word="$2" -- \
        $(src 64 48 3) ! matanyone engine=segmenter model-dir="$GOOD_SET" runtime-library="$2" ! $GRAY_SINK
}
rt_case rt-nonexistent "$R/nonexistent/libonnxruntime.so.1" $T_NORMAL seg
rt_case rt-directory "$R/a-directory.so" $T_NORMAL seg
rt_case rt-fifo "$R/fifo.so" $T_FAST seg
rt_case rt-text-file "$R/text.so" $T_NORMAL seg
rt_case rt-ten-bytes "$R/ten-bytes.so" $T_NORMAL ort
rt_case rt-truncated-half "$R/truncated-half.so" $T_NORMAL ort
rt_case rt-truncated-64k "$R/truncated-64k.so" $T_NORMAL ort
if [ -f "$LIBZ" ]; then rt_case rt-elf-not-onnxruntime "$LIBZ" $T_NORMAL seg
else total=$((total + 1)); fail rt-elf-not-onnxruntime setup "no libz.so.1 found" /dev/null; fi

# ---------------------------------------------------------------------------------------------------
# 3. Seed masks (engine=matanyone2 seed=mask seed-mask=...).
mkfifo "$MASKS/fifo.png"
mask_case() { # name, expect, mask, timeout, word
    run_case "$1" "$2" "$4" needs=m2 word="$5" out="$OUT/outputs/$1.gray:$((64 * 48 * 3))" -- \
        $(src 64 48 3) ! matanyone engine=matanyone2 model-dir="$GOOD_SET" working-size=64 warmup=1 seed=mask \
        seed-mask="$3" ! $(gray_file "$1")
}
mask_case mask-nonexistent error "$MASKS/nonexistent.png" $T_NORMAL "$MASKS/nonexistent.png"
mask_case mask-directory error "$MASKS" $T_NORMAL "$MASKS"
mask_case mask-fifo error "$MASKS/fifo.png" $T_FAST "$MASKS/fifo.png"
mask_case mask-empty-file error "$MASKS/empty.png" $T_NORMAL "$MASKS/empty.png"
mask_case mask-random-bytes error "$MASKS/random.png" $T_NORMAL "$MASKS/random.png"
mask_case mask-truncated-png error "$MASKS/truncated.png" $T_NORMAL "$MASKS/truncated.png"
mask_case mask-1x1-png eos "$MASKS/one-pixel.png" $T_NORMAL ""
mask_case mask-all-black warning "$MASKS/all-black.png" $T_NORMAL "all-black.png"
mask_case mask-all-white warning "$MASKS/all-white.png" $T_NORMAL "all-white.png"

# ---------------------------------------------------------------------------------------------------
# 4. Extreme sizes and properties, both engines.
size_case() { # name, engine options, W, H, N, timeout, expect, needs [memcap=1]
    local bytes=$((($3 + 3) / 4 * 4 * $4 * $5)) # GRAY8 rows are padded to 4 bytes
    run_case "$1" "$7" "$6" needs="$8" out="$OUT/outputs/$1.gray:$bytes" ${9:-} -- \
        $(src "$3" "$4" "$5") ! matanyone $2 ! $(gray_file "$1")
}
SEG_OPTS="engine=segmenter model-dir=$GOOD_SET"
for wh in 1x1 2x2 3x5 7x1 1x7; do
    w=${wh%x*} h=${wh#*x}
    size_case seg-size-$wh "$SEG_OPTS" $w $h 3 $T_NORMAL eos seg
    size_case m2-size-$wh "$M2_OPTS" $w $h 3 $T_NORMAL eos m2
done
size_case seg-size-7680x4320 "$SEG_OPTS" 7680 4320 2 $T_BIG eos seg
size_case m2-size-7680x4320 "$M2_OPTS" 7680 4320 2 $T_BIG eos m2
# The widest frame videotestsrc makes: 32767x1 where it allows, else 16384x2.
if timeout 60 gst-launch-1.0 -q $(src 32767 1 1) ! fakesink >/dev/null 2>&1; then WW=32767 WH=1; else WW=16384 WH=2; fi
size_case seg-size-${WW}x$WH "$SEG_OPTS" $WW $WH 2 $T_BIG eos seg
# MatAnyone2 keeps the aspect at its working size: a clean refusal is as good as a run here.
size_case m2-size-${WW}x$WH "$M2_OPTS" $WW $WH 2 $T_BIG either m2 memcap=1
size_case m2-working-size-16-1920x1080 "$M2_OPTS working-size=16" 1920 1080 2 $T_NORMAL eos m2
size_case m2-working-size-4096-1920x1080 "$M2_OPTS working-size=4096 warmup=0" 1920 1080 1 $T_BIG either m2 memcap=1
size_case m2-working-size-0-4096x2160 "$M2_OPTS working-size=0 warmup=0" 4096 2160 1 $T_BIG either m2 memcap=1

M2_SMALL="$M2_OPTS working-size=64"
size_case m2-top-k-10000 "$M2_SMALL top-k=10000" 64 48 4 $T_NORMAL eos m2
size_case m2-max-mem-frames-100-mem-every-1 "$M2_SMALL max-mem-frames=100 mem-every=1" 64 48 5 $T_NORMAL eos m2
run_case m2-mem-every-0 error $T_NORMAL needs=m2 word="mem-every" -- $(src 64 48 3) ! matanyone $M2_SMALL mem-every=0 ! $GRAY_SINK
size_case seg-threads-256 "$SEG_OPTS threads=256" 64 48 3 $T_NORMAL eos seg
size_case m2-threads-256 "$M2_SMALL threads=256" 64 48 3 $T_NORMAL eos m2
run_case seg-stats-interval-1 eos $T_NORMAL needs=seg word="matanyone-stats" -- -m $(src 64 48 3) ! matanyone $SEG_OPTS stats-interval=1 ! $GRAY_SINK
run_case m2-stats-interval-1 eos $T_NORMAL needs=m2 word="matanyone-stats" -- -m $(src 64 48 3) ! matanyone $M2_SMALL stats-interval=1 ! $GRAY_SINK
run_case output-alpha-with-composite-caps notneg $T_NORMAL needs=seg -- \
    $(src 64 48 3) ! matanyone $SEG_OPTS output=alpha ! video/x-raw,format=BGRA ! fakesink
run_case seg-framerate-0_1 eos $T_NORMAL needs=seg -- $(src 64 48 3 framerate=0/1) ! matanyone $SEG_OPTS ! $GRAY_SINK
run_case m2-framerate-0_1 eos $T_NORMAL needs=m2 -- $(src 64 48 3 framerate=0/1) ! matanyone $M2_SMALL ! $GRAY_SINK
# Several people and the watch at their limits: 8 people at 4K with the frame's own size is refused
# with the largest size that fits (or runs where memory allows); a watch every frame with patience 1
# re-seeds at once; people cut to pieces by a mask of 1-pixel stripes.
size_case m2-max-people-8-working-size-0-3840x2160 "$M2_OPTS max-people=8 working-size=0 warmup=0" 3840 2160 1 $T_BIG either m2 memcap=1
size_case m2-watch-every-frame "$M2_SMALL watch-interval=1 watch-patience=1 watch-iou=100" 64 48 4 $T_NORMAL eos m2
size_case m2-max-people-8-small "$M2_SMALL max-people=8" 64 48 3 $T_NORMAL eos m2
for format in GRAY8 I420; do
    run_case input-$format notneg $T_NORMAL -- \
        videotestsrc num-buffers=3 ! video/x-raw,format=$format,width=64,height=48 ! matanyone $SEG_OPTS ! fakesink
done

# ---------------------------------------------------------------------------------------------------
# 5. The README's error table, as a user meets it.
run_case table-model-folder-missing error $T_NORMAL word="not found.*$OUT/no-such-models" -- \
    $(src 64 48 3) ! matanyone model-dir="$OUT/no-such-models" ! $GRAY_SINK
run_case table-model-folder-missing-matanyone2 error $T_NORMAL word="not found.*$OUT/no-such-models" -- \
    $(src 64 48 3) ! matanyone engine=matanyone2 model-dir="$OUT/no-such-models" ! $GRAY_SINK
run_case table-runtime-missing error $T_NORMAL needs=m2 word="ONNX Runtime.*$OUT/no-such-runtime/libonnxruntime.so.1" -- \
    $(src 64 48 3) ! matanyone $M2_SMALL runtime-library="$OUT/no-such-runtime/libonnxruntime.so.1" ! $GRAY_SINK

echo "adversarial: $total inputs, $clean clean, $crashes crashes, $hangs hangs, $wrong wrong"
[ "$clean" = "$total" ]
