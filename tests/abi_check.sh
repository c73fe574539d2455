#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# ABI guard, layouts: the ABI of libnxl.so as its public headers declare it
# (struct layouts, enum values, function signatures, typedefs) must stay
# compatible with the committed reference tests/abi/libnxl.dump, so that an
# accidental break fails and an intended one updates the reference and
# -version-info together. tests/abi_symbols.sh checks the list of exported
# symbols; this checks what they mean. Tools: Debian's abi-dumper (reads the
# library's DWARF) and abi-compliance-checker (compares two dumps).
#
#   tests/abi_check.sh               dump .libs/libnxl.so of this build (needs -g, the
#                                    default CFLAGS), compare with the reference (make check)
#   tests/abi_check.sh --build       build libnxl from a copy of the source tree with
#                                    CFLAGS='-g -Og' in build-abi/, dump, compare (make abi-check)
#   tests/abi_check.sh --update      the same build, then write the reference (make update-abi)
#   tests/abi_check.sh --lib LIB.so  dump and compare LIB.so
#   --report DIR                     keep abi-compliance-checker's HTML reports in DIR
#   --ref DUMP                       compare with DUMP instead (an older release's reference)
#
# Exit: 0 compatible (additions are compatible), 1 an incompatible change,
# 77 skipped (tools or debug info missing: says which), 99 an error.
set -u
LC_ALL=C
export LC_ALL

srcdir=${srcdir:-.}
srcdir=$(cd "$srcdir" && pwd)
ref=$srcdir/tests/abi/libnxl.dump
lib=.libs/libnxl.so
mode=check
keep=
while [ $# -gt 0 ]; do
    case "$1" in
    --build) mode=build ;;
    --update) mode=update ;;
    --lib) lib=$2; shift ;;
    --report) keep=$2; shift ;;
    --ref) ref=$2; shift ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "abi_check: unknown option $1 (--help)"; exit 99 ;;
    esac
    shift
done

skip() { echo "abi_check: SKIP: $*"; exit 77; }
for t in abi-dumper abi-compliance-checker; do
    command -v $t >/dev/null 2>&1 ||
        skip "no $t (apt-get install abi-dumper abi-compliance-checker)"
done
command -v readelf >/dev/null 2>&1 || skip "no readelf (binutils)"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/abi_check.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# --build/--update: libnxl built with -g -Og (abi-dumper keeps the registers
# and stack offsets of parameters only for an unoptimised or -Og build) from
# a copy of the source tree as it is in the working tree, or of the release
# tree: the source tree may be configured in place, which rules out VPATH.
if [ $mode != check ]; then
    b=${NXL_ABI_BUILD:-$(pwd)/build-abi}
    echo "abi_check: building libnxl with CFLAGS='-g -Og' in $b"
    rm -rf "$b/stage" && mkdir -p "$b/stage" "$b/src" || exit 99
    if [ -e "$srcdir/.git" ]; then
        (cd "$srcdir" && git ls-files -co --exclude-standard -z | grep -zv '^build-' |
            tar -cf - --null -T -) | tar -xf - -C "$b/stage" || exit 99
    else
        (cd "$srcdir" && tar -cf - --exclude='./build-*' .) | tar -xf - -C "$b/stage" || exit 99
    fi
    # only files that differ are copied (with a new time), so make rebuilds
    # what changed and nothing else
    (cd "$b/stage" && find . -type f | while IFS= read -r f; do
        cmp -s "$f" "../src/$f" || { mkdir -p "../src/${f%/*}" && cp "$f" "../src/$f"; } || exit 1
    done) || exit 99
    rm -rf "$b/stage"
    if [ ! -f "$b/src/config.status" ]; then
        if [ ! -x "$b/src/configure" ]; then
            (cd "$b/src" && autoreconf -fi) >"$b/autoreconf.log" 2>&1 ||
                { echo "abi_check: autoreconf failed: $b/autoreconf.log"; exit 99; }
        fi
        (cd "$b/src" && ./configure CFLAGS='-g -Og' --enable-man=no >"$b/configure.log" 2>&1) ||
            { echo "abi_check: configure failed: $b/configure.log"; exit 99; }
    fi
    (cd "$b/src" && nice -n 10 make -j"$(nproc)" libnxl.la >"$b/make.log" 2>&1) ||
        { echo "abi_check: the build failed: $b/make.log"; exit 99; }
    lib=$b/src/.libs/libnxl.so
fi

[ -f "$lib" ] || skip "no $lib (a static-only build?)"
[ $mode = check ] && [ "${NXL_LD_VERSION_SCRIPT:-yes}" != yes ] &&
    skip "libnxl.so was linked without lib/libnxl.map: its symbols carry no version (run make abi-check)"
readelf -S "$lib" | grep -q '\.debug_info' ||
    skip "$lib has no debug information (built without -g); run tests/abi_check.sh --build"

# the library's version, from the source tree's -version-info
vi=$(sed -n 's/^libnxl_la_LDFLAGS = -version-info \([0-9:]*\).*/\1/p' "$srcdir/Makefile.am")
dump() { # LIB OUT VERSION: what the public headers show of LIB's ABI
    abi-dumper "$1" -o "$tmp/full.dump" -public-headers "$srcdir/include" -vnum "$3" -quiet \
        >"$tmp/dumper.log" 2>&1 && [ -s "$tmp/full.dump" ] ||
        { cat "$tmp/dumper.log"; echo "abi_check: abi-dumper failed on $1"; exit 99; }
    perl "$srcdir/tests/abi/public-abi.pl" "$tmp/full.dump" "$2" \
        "$srcdir/include/nxl.h" "$srcdir/include/nxl/transport.h" 2>"$tmp/filter.log" ||
        { cat "$tmp/filter.log"; echo "abi_check: tests/abi/public-abi.pl failed"; exit 99; }
}

if [ $mode = update ]; then
    mkdir -p "$srcdir/tests/abi" || exit 99
    dump "$lib" "$tmp/new.dump" "$vi"
    cp "$tmp/new.dump" "$ref" || exit 99
    echo "abi_check: wrote $ref from $lib (-version-info $vi, $(wc -c <"$ref") bytes)"
    echo "  commit it with the -version-info bump and lib/libnxl.symbols (make update-symbols)"
    exit 0
fi

[ -f "$ref" ] || { echo "abi_check: no reference $ref (make update-abi)"; exit 99; }
dump "$lib" "$tmp/new.dump" "this-build"
# the reference's version is the -version-info it was written with
refname=${ref#"$srcdir"/}
rv=$(sed -n "s/^ *'LibraryVersion' => '\(.*\)',/\1/p" "$ref" | head -1)
acc() { # FORMAT: binary and source reports of reference → this build
    abi-compliance-checker -l libnxl -old "$ref" -new "$tmp/new.dump" -bin -src -report-format "$1" \
        -bin-report-path "$tmp/bin.$1" -src-report-path "$tmp/src.$1" >"$tmp/acc.$1.log" 2>&1
}
acc xml
rc=$?
[ -f "$tmp/bin.xml" ] && [ -f "$tmp/src.xml" ] ||
    { cat "$tmp/acc.xml.log"; echo "abi_check: abi-compliance-checker failed"; exit 99; }
if [ -n "$keep" ]; then
    acc htm
    mkdir -p "$keep" && cp "$tmp/bin.htm" "$keep/binary.html" && cp "$tmp/src.htm" "$keep/source.html" &&
        echo "abi_check: HTML reports in $keep/binary.html and $keep/source.html"
fi
grep -E 'compatibility( problems)?:' "$tmp/acc.xml.log" | sed 's/^/abi_check: /'

# the reports as text: each problem with what changed and which exported
# functions it affects, then the additions. abi-compliance-checker counts
# a struct that grows (fields added at its end) as compatible, a Low
# warning, for a struct passed by pointer only; that holds for nxl's
# size-versioned structs (a leading 'size_t size', which the library reads
# before any other field), not for the others: nxl_desc_t is passed as an
# array and a program may embed any struct in its own. So a size change or
# an added field is a problem here unless the struct begins with 'size'.
python3 - "$tmp/bin.xml" "$tmp/src.xml" "$srcdir/include/nxl.h" "$srcdir/include/nxl/transport.h" \
    >"$tmp/summary" <<'EOF'
import re, sys, xml.etree.ElementTree as ET
sized = set()
for h in sys.argv[3:]:
    src = re.sub(r'/\*.*?\*/', '', open(h).read(), flags=re.S)
    sized.update("struct " + m for m in re.findall(r'struct\s+(\w+)\s*\{\s*size_t\s+size\s*;', src))
GROWTH = ("DataType_Size", "Added_Field", "Added_Field_And_Size", "Size")
def fill(change, pid):
    t = change.text or ""
    for k, v in change.attrib.items():
        if pid == "DataType_Size" and v.isdigit():
            v = "%d bytes" % (int(v) // 8)  # the XML report gives bits
        t = t.replace("@" + k, v)
    return " ".join(t.split())
bad = 0
for path, kind in zip(sys.argv[1:3], ("binary", "source")):
    root = ET.parse(path).getroot()
    for sect in root:
        sev = sect.get("severity")
        if not sect.tag.startswith("problems_with") or sev in (None, "Safe"):
            continue
        for where in sect.iter():
            if where.tag not in ("type", "symbol", "constant") or where.find("problem") is None:
                continue
            name = where.get("name")
            for prob in where.findall("problem"):
                aff = prob.findall("./affected/symbol") or where.findall("./affected/symbol")
                eg = ", ".join(a.get("name").split("@")[0] for a in aff[:3])
                if sev in ("High", "Medium"):
                    verdict = "PROBLEM"
                elif kind == "binary" and prob.get("id") in GROWTH and where.tag == "type" and name.startswith(("struct ", "union ")) \
                        and name not in sized:
                    verdict = "PROBLEM (no leading size field)"
                else:
                    verdict = "warning"
                for ch in prob.findall("change"):
                    bad += verdict != "warning"
                    print("%s %s %s, %s: %s%s" % (verdict, kind, name, sev, fill(ch, prob.get("id")),
                          " (affects %s%s)" % (eg, ", ..." if len(aff) > 3 else "") if aff else ""))
    if kind == "binary":
        for tag, what in (("added_symbols", "added"), ("removed_symbols", "removed")):
            for e in root.findall(tag):
                for sym in e.iter("name"):
                    print("%s symbol %s" % (what, sym.text))
print("PROBLEMS %d" % bad)
EOF
[ $? -eq 0 ] || { echo "abi_check: cannot read abi-compliance-checker's XML reports"; exit 99; }
nprob=$(sed -n 's/^PROBLEMS //p' "$tmp/summary")
sed -e '/^PROBLEMS /d' -e 's/^/  /' "$tmp/summary"
if [ $rc -eq 0 ] && [ "$nprob" = 0 ]; then
    if grep -q '^added symbol' "$tmp/summary"; then
        echo "abi_check: compatible with $refname (-version-info $rv), with additions:"
        echo "  they need -version-info current+1:0:age+1 (and a new reference at the release: make update-abi)"
    elif grep -q '^warning' "$tmp/summary"; then
        echo "abi_check: compatible with $refname (-version-info $rv), with the warnings above"
    else
        echo "abi_check: the ABI of $lib is that of $refname (-version-info $rv)"
    fi
    exit 0
fi
cat <<MSG

abi_check: FAIL: the ABI of $lib is not compatible with $refname
  (-version-info $rv): a program built against the reference's headers would
  break with this library (binary), or no longer compile (source).
  If the change is not intended: undo it (add fields only at the end of
  structs that begin with 'size', values only at the end of enums, new
  functions instead of changed signatures).
  If it is intended: bump -version-info in Makefile.am to current+1:0:0 (the
  soname changes; see doc/building.md "The library's version"), then write the new
  reference with 'make update-abi' and commit both, with lib/libnxl.symbols.
  HTML reports: tests/abi_check.sh --report DIR.
MSG
exit 1
