#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every transport has its man page, doc/man/nxl-<name>.md (listed in
# nxl_man_pages of doc/Makefile.include as doc/man/nxl-<name>.7), and that
# page's PARAMETERS section documents every key of the transport's
# parameter table, each on a line of its own that starts with **key**,
# followed by "(default **VALUE**)" exactly when the table gives a default,
# and no key the table lacks.
#
# The transports are those tools/nxl_info lists (every one configure knows)
# and the folders of lib/transports. A transport's table is what
# `nxl_info -v` prints for it where this build can load it; otherwise (not
# built here: CUDA or GDS without their libraries, say) the table is read
# from its source, the `nxl_param_info_t NAME[] = {...}` in any file of
# lib/transports/<name>/ (macros in its defaults resolved from that
# folder's #defines). Where both exist they must agree, so that the source
# reading is checked by every build that has the transport.
srcdir=${srcdir:-.}
info=${NXL_INFO:-tools/nxl_info}  # NXL_INFO: another nxl_info (a wrapper, to try the source reading)
tmp=${TMPDIR:-/tmp}/man_params_sh.$$
trap 'rm -f "$tmp".*' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=$((failed + 1)); }

# a variable of doc/Makefile.include, its continuation lines joined
mkvar() {
    sed -n "/^$1 = /,/[^\\]\$/p" "$srcdir/doc/Makefile.include" | sed "s/^$1 = //" | tr -d '\\' | tr '\n\t' '  '
}
NXL_MAN_PAGES=$(mkvar nxl_man_pages)
[ -n "$NXL_MAN_PAGES" ] || { echo "no nxl_man_pages in $srcdir/doc/Makefile.include"; exit 99; }

# The parameter table of the transport in folder $1, from its source, as
# "KEY DEFAULT" lines ("-" where the default is NULL); a default that
# cannot be read comes out as "?<its C text>", which no page matches.
src_table() {
    dir=$srcdir/lib/transports/$1
    files=$(grep -l 'nxl_param_info_t *[A-Za-z_0-9]*\[\] *= *{' "$dir"/*.c "$dir"/*.h 2>/dev/null)
    [ -n "$files" ] || return 1
    [ "$(echo "$files" | wc -l)" -eq 1 ] || { echo "?two-tables"; return 0; }
    # the folder's #defines first, then the table's lines
    cat "$dir"/*.c "$dir"/*.h 2>/dev/null | awk '
        /^[ \t]*#[ \t]*define[ \t]+[A-Za-z_0-9]+[ \t]+[^ \t]/ {
            sub(/^[ \t]*#[ \t]*define[ \t]+/, "")
            name = $1; $1 = ""; sub(/^[ \t]+/, ""); sub(/[ \t]*\/[*\/].*$/, "")
            def[name] = $0
            next
        }
        /nxl_param_info_t *[A-Za-z_0-9]*\[\] *= *\{/ { on = 1; text = ""; next }
        on && /^[ \t]*};/ { on = 0; tables = tables text; next }
        on { text = text " " $0 }
        function val(d,   n) {
            gsub(/^[ \t]+|[ \t]+$/, "", d)
            if (d == "NULL") return "-"
            if (d ~ /^"[^"]*"$/) return substr(d, 2, length(d) - 2)
            if (d ~ /^PSTR\([A-Za-z_0-9]+\)$/) {
                n = d; sub(/^PSTR\(/, "", n); sub(/\)$/, "", n)
                if (n in def) { d = def[n]; gsub(/"/, "", d); return d }
                return "?" d
            }
            if (d ~ /^[A-Za-z_][A-Za-z_0-9]*$/ && (d in def) && def[d] ~ /^"[^"]*"$/)
                return substr(def[d], 2, length(def[d]) - 2)
            return "?" d
        }
        END {
            s = tables
            while (match(s, /\{[ \t]*"[a-z_0-9]+"[ \t]*,[^,]*,/)) {
                e = substr(s, RSTART + 1, RLENGTH - 2)
                s = substr(s, RSTART + RLENGTH)
                k = e; sub(/^[ \t]*"/, "", k); sub(/".*$/, "", k)
                d = e; sub(/^[^,]*,/, "", d)
                print k, val(d)
            }
        }'
}

# the transports: nxl_info's list, and the folders of lib/transports
: >"$tmp.names"
if [ -x "$info" ]; then
    $info >"$tmp.out" 2>&1 || { echo "nxl_info exited $?: $(cat "$tmp.out")"; exit 99; }
    $info -v >"$tmp.v" 2>&1 || { echo "nxl_info -v exited $?"; exit 99; }
    sed -n 's/^Transport \([^:]*\): .*/\1/p' "$tmp.out" >>"$tmp.names"
else
    echo "($info not built: checking the pages against the sources only)"
    : >"$tmp.v"
fi
for d in "$srcdir"/lib/transports/*/; do
    [ -d "$d" ] && basename "$d" | tr a-z A-Z >>"$tmp.names"
done
names=$(awk '!seen[$0]++' "$tmp.names")
[ -n "$names" ] || { echo "no transports found (nxl_info, lib/transports)"; exit 99; }

checked=0
for T in $names; do
    t=$(echo "$T" | tr A-Z a-z)
    page=$srcdir/doc/man/nxl-$t.md
    if [ ! -f "$page" ]; then
        fail "$T has no man page: write doc/man/nxl-$t.md (see doc/man/nxl-ucx.md)"
        continue
    fi
    case " $NXL_MAN_PAGES " in *" doc/man/nxl-$t.7 "*) ;; *)
        fail "doc/man/nxl-$t.7 is not in nxl_man_pages (doc/Makefile.include)" ;;
    esac
    grep -q "doc/man/nxl-$t\.md" "$srcdir/doc/Makefile.include" ||
        fail "doc/man/nxl-$t.md is not in EXTRA_DIST (doc/Makefile.include)"
    # the table as this build's nxl_info -v prints it ("    KEY DEFAULT DOC")
    awk -v t="$T" '/^Transport / { on = ($2 == t ":") }
        on && /^    [a-z_0-9]+ +[^ ]+ / { print $1, $2 }' "$tmp.v" >"$tmp.info"
    src_table "$t" >"$tmp.src" || : >"$tmp.src"
    if [ -s "$tmp.info" ]; then
        from="nxl_info -v"
        cp "$tmp.info" "$tmp.table"
        if [ -s "$tmp.src" ] && ! diff -u "$tmp.info" "$tmp.src" >"$tmp.diff"; then
            cat "$tmp.diff"
            fail "$T: the table read from lib/transports/$t/ is not what nxl_info -v prints (- nxl_info, + source): fix src_table() in $0"
        fi
    elif [ -s "$tmp.src" ]; then
        from="lib/transports/$t (not loadable in this build)"
        cp "$tmp.src" "$tmp.table"
    else
        fail "$T: no parameter table, neither from nxl_info -v nor in lib/transports/$t/"
        continue
    fi
    # the PARAMETERS section, and its lines that start with **key**
    sed -n '/^# PARAMETERS/,/^# [A-Z]/p' "$page" >"$tmp.sec"
    [ -s "$tmp.sec" ] || { fail "nxl-$t(7) has no PARAMETERS section ($page)"; continue; }
    n=0
    while read -r key def; do
        line=$(grep -m1 "^\*\*$key\*\*\( \|\$\)" "$tmp.sec")
        if [ -z "$line" ]; then
            fail "nxl-$t(7) does not document $T's parameter '$key' (a line '**$key** (default **$def**)' in PARAMETERS of $page)"
        elif [ "$def" = "-" ]; then
            case "$line" in *"(default"*)
                fail "nxl-$t(7) gives '$key' a default, $T's table none: '$line'" ;;
            esac
        else
            case "$line" in *"(default **$def**)"*) ;; *)
                fail "nxl-$t(7): '$key' should read '(default **$def**)' as $T's table says: '$line'" ;;
            esac
        fi
        n=$((n + 1))
    done <"$tmp.table"
    for key in $(sed -n 's/^\*\*\([a-z_0-9]*\)\*\*\( .*\)*$/\1/p' "$tmp.sec"); do
        grep -q "^$key " "$tmp.table" ||
            fail "nxl-$t(7) documents '$key', which $T's table does not have"
    done
    echo "$T: $n parameters checked in nxl-$t(7) (table from $from)"
    checked=$((checked + 1))
done
[ $failed -eq 0 ] || exit 1
echo "every transport ($checked) has its man page, with every parameter and its default"
