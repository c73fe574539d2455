#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# tools/nxl_info against the library's own answers (tests/nxl_info_probe):
# the same transports in the same order, each available or not as
# nxl_plugins_available() says, the library's version, the module folders
# (NXL_PLUGIN_DIR's first); with -v, every available transport lists its
# parameters, and each listed key is one nxl_backend_create() takes — with
# its listed default, creation succeeds for UCX, LIBFABRIC and POSIX (OBJ
# needs a bucket, so only "not an unknown parameter" is asked of it), while
# a key not listed is refused. A named transport that does not exist exits
# 1, a bad option 2.
info=tools/nxl_info
probe=tests/nxl_info_probe
for p in $info $probe; do [ -x $p ] || { echo "$p not built"; exit 99; }; done
tmp=${TMPDIR:-/tmp}/nxl_info_sh.$$
trap 'rm -f "$tmp".*' EXIT
fail() { echo "FAIL: $*"; exit 1; }

$info >"$tmp.out" 2>&1 || fail "nxl_info exited $?: $(cat "$tmp.out")"
cat "$tmp.out"
$probe list >"$tmp.probe" || fail "nxl_info_probe list failed"
sed -n 's/^Transport \([^:]*\): \(.*\)$/\1 \2/p' "$tmp.out" >"$tmp.got"
grep -v '^version ' "$tmp.probe" >"$tmp.want"
[ -s "$tmp.want" ] || fail "nxl_plugins_available() lists no transport"
diff -u "$tmp.want" "$tmp.got" || fail "nxl_info's transports are not nxl_plugins_available()'s (- library, + nxl_info)"
version=$(sed -n 's/^version //p' "$tmp.probe")
head -n 1 "$tmp.out" | grep -q "^nxl $version " || fail "first line does not name nxl $version"
grep -q '^  build options: .*debug=.*tls=' "$tmp.out" || fail "no build options line"
grep -q '^  configured: .*UCX=' "$tmp.out" || fail "no configured-transports line"
dirs=$(sed -n 's/^  module folders: *//p' "$tmp.out")
[ -n "$dirs" ] || fail "no module folders line"
first=$(printf '%s' "${NXL_PLUGIN_DIR:-}" | cut -d: -f1)
if [ -n "$first" ]; then
    case "$dirs" in "$first"*) ;; *) fail "module folders '$dirs' do not start with NXL_PLUGIN_DIR's '$first'" ;; esac
fi
# an available transport serves memory and has capabilities
awk '/^Transport .*: available$/ { t = $2; m = 0; c = 0; next }
     /^Transport / { t = "" }
     t != "" && /^  memory: +[A-Z]/ { m = 1 }
     t != "" && /^  capabilities: +[a-z]/ { c = 1 }
     t != "" && /^$/ { if (!m || !c) { print t; bad = 1 } t = "" }
     END { if (t != "" && (!m || !c)) { print t; bad = 1 } exit bad }' "$tmp.out" ||
    fail "an available transport without memory types or capabilities (above)"

$info -v >"$tmp.v" 2>&1 || fail "nxl_info -v exited $?"
checked=0
for t in $(sed -n 's/^\([^ ]*\) available$/\1/p' "$tmp.want"); do
    # this transport's block: its parameter lines "    KEY DEFAULT DOC"
    awk -v t="$t" '/^Transport / { on = ($2 == t ":") } on && /^    [a-z_]+ +[^ ]+ / { print $1, $2 }' \
        "$tmp.v" >"$tmp.params"
    [ -s "$tmp.params" ] || fail "nxl_info -v lists no parameters of $t"
    while read -r key def; do
        val=$def
        [ "$def" = "-" ] && val=x
        out=$($probe create "$t" "$key" "$val"); rc=$?
        case "$out" in *"unknown parameter"*) fail "$t: '$key', listed by nxl_info -v, is refused: $out" ;; esac
        if [ "$def" != "-" ] && [ $rc -ne 0 ]; then
            case $t in
            UCX | LIBFABRIC | POSIX) fail "$t: $key=$def, its listed default, is refused: $out" ;;
            esac
        fi
        checked=$((checked + 1))
    done <"$tmp.params"
    out=$($probe create "$t" nxl_info_no_such_key 1) && fail "$t took a key it does not list"
    case "$out" in *"unknown parameter 'nxl_info_no_such_key'"*) ;; *) fail "$t: an unlisted key: $out" ;; esac
done
if grep -q '^UCX available$' "$tmp.want"; then
    grep -q '^    am_write_max ' "$tmp.v" || fail "nxl_info -v does not list UCX's am_write_max"
fi

$info -v nosuch >/dev/null 2>&1; rc=$?
[ $rc -eq 1 ] || fail "nxl_info nosuch exited $rc, not 1"
$info -x >/dev/null 2>&1; rc=$?
[ $rc -eq 2 ] || fail "nxl_info -x exited $rc, not 2"
t=$(sed -n '1s/ .*//p' "$tmp.want")
$info -v "$(echo "$t" | tr A-Z a-z)" | grep -q "^Transport $t: " || fail "nxl_info -v (lower case) does not describe $t"
echo "nxl_info: $(wc -l <"$tmp.want") transports as nxl_plugins_available() says; $checked parameters taken by nxl_backend_create()"
