#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# The command lines of nxlbench and the examples: --help, both spellings of
# a flag (--flag value, --flag=value), one-line errors with exit status 2 for
# unknown flags, missing and bad values, and nxlbench's JSON: it parses and
# holds every key it held when it was written by hand (the lists below were
# taken from that version's output).
set -u
top=${builddir:-.}
NB=$top/bench/nxlbench
KS=$top/examples/kv_stream
KT=$top/examples/kv_tiering
KV=$top/examples/kv_server/kv_server
[[ -x $NB && -x $KS ]] || { echo "cli.sh: $NB or $KS not built"; exit 99; }
T=$(mktemp -d /tmp/cli_test.XXXXXX)
trap 'rm -rf "$T"' EXIT
fail=0
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }

# PROG ARGS... → exit 2, exactly one line on stderr matching WANT, nothing on stdout
refuse() {
    local want=$1; shift
    "$@" >"$T/out" 2>"$T/err"
    local rc=$? lines
    lines=$(wc -l <"$T/err")
    if [[ $rc != 2 || $lines != 1 ]] || ! grep -q -- "$want" "$T/err" || [[ -s $T/out ]]; then
        bad "'$*': exit $rc, $lines line(s) on stderr (want 2, one line with '$want'):"
        cat "$T/err" "$T/out"
    else
        ok "'${*#"$top/"}' → $(cat "$T/err")"
    fi
}

# PROG → --help: exit 0, the usage on stdout
helps() {
    local p=$1
    if "$p" --help >"$T/help" 2>"$T/err" && grep -qi usage "$T/help" && [[ ! -s $T/err ]]; then
        ok "$(basename "$p") --help"
    else
        bad "$p --help"; cat "$T/err"
    fi
}

# ---------------------------------------------------------------- nxlbench
helps "$NB"
"$NB" -h | cmp -s - "$T/help" || bad "nxlbench -h differs from --help"
refuse "unknown flag '--bogus'" "$NB" --bogus
refuse "unknown flag '--num_it'" "$NB" --num_it 5           # no abbreviations
refuse "unknown flag '-x'" "$NB" -x
refuse "--json needs a value" "$NB" --spawn --json
refuse "bad value 'x' for --num_iter" "$NB" --num_iter=x
refuse "bad value 'FOO' for --backend" "$NB" --backend FOO
refuse "bad value 'maybe' for --spawn" "$NB" --spawn=maybe
refuse "--help takes no value" "$NB" --help=1
refuse "unexpected argument 'stray'" "$NB" --spawn stray
refuse "choose one of --spawn" "$NB" --quiet

ENV="/env /env/FI_PROVIDER /env/UCX_TLS /env/backend_params /env/cpus /env/host /env/nxl_version
/env/transports /env/ucx_version /mode /rows /env/flags"
for f in backend busy_poll_us check_consistency duration initiator_seg_type latency_reply \
    max_batch_size max_block_size max_row_bytes mem_source mode num_files num_iter op_type pin \
    pipeline_depth posix_api_type recreate_xfer spawn start_batch_size start_block_size \
    storage_enable_direct storage_footprint storage_huge_pages storage_prefill target_seg_type \
    total_buffer_size warmup_iter; do
    ENV="$ENV /env/flags/$f"
done
BW="block_size batch_size iters bw_gbps avg_lat_us avg_prep_us p99_prep_us avg_post_us p99_post_us avg_tx_us p99_tx_us"
rows() { local k o=; for k in "$@"; do o="$o /rows[]/$k"; done; echo "$o"; }

# FILE KEYS... → FILE parses as JSON and holds every key (paths, rows[] for each row)
have_keys() {
    local f=$1; shift
    if ! command -v python3 >/dev/null; then
        echo "skip $f: no python3 to parse the JSON"; return
    fi
    python3 -m json.tool "$f" >/dev/null || { bad "$f is not JSON"; return; }
    python3 - "$f" "$@" <<'EOF' || fail=1
import json, sys
def keys(o, p=""):
    out = set()
    if isinstance(o, dict):
        for k, v in o.items():
            out.add(p + "/" + k)
            out |= keys(v, p + "/" + k)
    elif isinstance(o, list):
        for v in o:
            out |= keys(v, p + "[]")
    return out
doc = json.load(open(sys.argv[1]))
have, want = keys(doc), set(" ".join(sys.argv[2:]).split())
missing, extra = sorted(want - have), sorted(have - want)
if missing:
    print("FAIL %s: keys missing: %s" % (sys.argv[1], " ".join(missing)))
    sys.exit(1)
print("ok   %s: all %d keys%s" % (sys.argv[1], len(want), ", and new: " + " ".join(extra) if extra else ""))
EOF
}

# FILE KEY VALUE → env.flags.KEY == VALUE
flag_is() {
    command -v python3 >/dev/null || return
    python3 -c 'import json, sys
v = json.load(open(sys.argv[1]))["env"]["flags"][sys.argv[2]]
sys.exit(0 if str(v).lower() == sys.argv[3].lower() else 1)' "$1" "$2" "$3" ||
        bad "$1: flags.$2 is not $3"
}

# the same run in both spellings
run_nb() { # NAME ARGS...
    local name=$1; shift
    if timeout 120 "$NB" --quiet --json "$T/$name.json" "$@" >"$T/$name.out" 2>&1; then
        ok "nxlbench $*"
    else
        bad "nxlbench $* exited nonzero:"; cat "$T/$name.out"
    fi
}
run_nb bw_space --spawn --block_sizes 4K,64K --num_iter 5 --warmup_iter 1 --pipeline_depth 2 \
    --op_type READ --check_consistency
run_nb bw_equals --spawn=1 --block_sizes=4K,64K --num_iter=5 --warmup_iter=1 --pipeline_depth=2 \
    --op_type=READ --check_consistency=true
for n in bw_space bw_equals; do
    have_keys "$T/$n.json" $ENV $(rows $BW)
    flag_is "$T/$n.json" num_iter 5
    flag_is "$T/$n.json" pipeline_depth 2
    flag_is "$T/$n.json" op_type READ
    flag_is "$T/$n.json" check_consistency true
    flag_is "$T/$n.json" spawn true
    [[ $(grep -c '^[0-9]' "$T/$n.out") == 2 ]] || bad "$n: not 2 rows in the table"
done
run_nb lat --spawn --mode=latency --block_sizes=8 --num_iter=10 --warmup_iter=1
have_keys "$T/lat.json" $ENV $(rows $BW p50_us p99_us)
run_nb desc --spawn --mode desc_rate --start_batch_size 64 --num_iter 3 --warmup_iter 1
have_keys "$T/desc.json" $ENV $(rows $BW descs prep_us post_us complete_us prep_local_us \
    prep_remote_us make_us)
flag_is "$T/desc.json" start_batch_size 64
run_nb idle --spawn --mode=idle --duration=0.2
have_keys "$T/idle.json" $ENV $(rows role duration_s wakeups_per_s cpu_s nvcsw nivcsw)
if grep -q "define NXL_HAVE_POSIX 1" "$top/config.h" 2>/dev/null; then
    run_nb posix --backend=POSIX --target_seg_type=FILE --block_sizes=4K --storage_footprint=1M \
        --check_consistency --storage_huge_pages 0
    have_keys "$T/posix.json" $ENV $(rows $BW) /env/direct /env/dram_pages /env/dram_thp_bytes \
        /env/filepath /env/footprint /env/num_files /env/page_cache /env/posix_engine
    flag_is "$T/posix.json" storage_huge_pages false
    flag_is "$T/posix.json" storage_footprint 1048576
else
    echo "skip nxlbench POSIX: not built"
fi

# ---------------------------------------------------------------- kv_stream
helps "$KS"
refuse "unknown flag '--bogus'" "$KS" --bogus
refuse "--layers needs a value" "$KS" --layers
refuse "bad value '0' for --layers" "$KS" --layers=0
refuse "--quiet takes no value" "$KS" --quiet=1
refuse "unknown mode 'sideways'" "$KS" sideways
refuse "unexpected argument 'extra'" "$KS" decode extra
refuse "--listen HOST:PORT is required" "$KS" decode
for args in "--layers 3 --blocks 4 --block_size 4K --inflight 2" \
    "--layers=3 --blocks=4 --block_size=4K --inflight=2" \
    "both --layers=3 --blocks 4 --block-size=4K --inflight 2"; do
    # shellcheck disable=SC2086
    if timeout 60 "$KS" $args >"$T/ks.out" 2>&1 && grep -q "prefill ok, decode ok" "$T/ks.out" &&
        grep -q "3 layers x 4 blocks x 4 KiB = 48 KiB received" "$T/ks.out"; then
        ok "kv_stream $args"
    else
        bad "kv_stream $args:"; cat "$T/ks.out"
    fi
done

# ---------------------------------------------------------------- kv_tiering
if [[ -x $KT ]]; then
    helps "$KT"
    refuse "unknown flag '-q'" "$KT" -q
    refuse "-b needs a value" "$KT" -b
    refuse "bad value 'x' for -b" "$KT" -b x
    refuse "bad value '0' for --slots" "$KT" --slots=0
    # the same requests, so the same counts whatever the spelling
    timeout 60 "$KT" -d "$T" -b 64 -s 32 -k 4 -r 300 >"$T/kt1" 2>&1 || bad "kv_tiering -b 64 ..."
    timeout 60 "$KT" --dir="$T" --blocks=64 --slots 32 --block_kib=4 -r300 >"$T/kt2" 2>&1 ||
        bad "kv_tiering --blocks=64 ..."
    norm() { grep -E '^  (hits|evictions)|kv_tiering: ok' "$1"; }
    if grep -q "kv_tiering: ok" "$T/kt1" && [[ $(norm "$T/kt1") == "$(norm "$T/kt2")" ]]; then
        ok "kv_tiering -b 64 -s 32 -k 4 -r 300 = --blocks=64 --slots 32 --block_kib=4 -r300"
    else
        bad "kv_tiering: the two spellings differ:"; cat "$T/kt1" "$T/kt2"
    fi
fi

# ---------------------------------------------------------------- kv_server
if [[ -x $KV ]]; then
    helps "$KV"
    refuse "unknown flag '--bogus'" "$KV" --bogus
    refuse "bad value '2' for --put_ratio" "$KV" --put-ratio 2
    refuse "bad value '1' for --cpus" "$KV" --cpus=1
    refuse "--connect HOST:PORT is required" "$KV" client
    if timeout 60 "$KV" both --blocks=32 --block_size 4K --requests=200 --connections 2 --quiet \
        >"$T/kv.out" 2>&1 && grep -q "client ok, serve ok" "$T/kv.out"; then
        ok "kv_server both --blocks=32 --block_size 4K --requests=200 --connections 2"
    else
        bad "kv_server both:"; cat "$T/kv.out"
    fi
fi

exit $fail
