#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every function libnxl exports (nxl_*, in lib/libnxl.symbols) has a man
# page: its own doc/man/<name>.3, or a one-line page pointing at its group's
# (nxl_man_links in doc/Makefile.include), and that group page names it in
# its NAME section; nxl_strerror(3)'s status table is nxl.h's.
srcdir=${srcdir:-.}
# a variable of doc/Makefile.include, its continuation lines joined
mkvar() {
    sed -n "/^$1 = /,/[^\\]\$/p" "$srcdir/doc/Makefile.include" | sed "s/^$1 = //" | tr -d '\\' | tr '\n\t' '  '
}
NXL_MAN_PAGES=$(mkvar nxl_man_pages)
NXL_MAN_LINKS=$(mkvar nxl_man_links)
[ -n "$NXL_MAN_PAGES" ] && [ -n "$NXL_MAN_LINKS" ] ||
    { echo "no nxl_man_pages or nxl_man_links in $srcdir/doc/Makefile.include"; exit 99; }
missing=0
for f in $(sed -n 's/^T \(nxl_[a-z0-9_]*\)@.*/\1/p' "$srcdir/lib/libnxl.symbols"); do
    page=""
    case " $NXL_MAN_PAGES " in *" doc/man/$f.3 "*) page=$f ;; esac
    if [ -z "$page" ]; then
        for l in $NXL_MAN_LINKS; do
            [ "${l%%:*}" = "$f" ] && page=${l#*:}
        done
    fi
    if [ -z "$page" ]; then
        echo "FAIL: $f has no man page: add it to a page in doc/man/ and to nxl_man_links"
        missing=$((missing + 1))
        continue
    fi
    src=$srcdir/doc/man/$page.md
    # the NAME section: from "# NAME" to the next heading
    if ! sed -n '/^# NAME/,/^# [A-Z]/p' "$src" | grep -qw "$f"; then
        echo "FAIL: $f points at $page(3), whose NAME section does not name it ($src)"
        missing=$((missing + 1))
    fi
done
for l in $NXL_MAN_LINKS; do
    case " $NXL_MAN_PAGES " in *" doc/man/${l#*:}.3 "*) ;; *)
        echo "FAIL: link $l: no page doc/man/${l#*:}.3"; missing=$((missing + 1)) ;;
    esac
done
# nxl_strerror(3)'s table of status codes is nxl.h's NXL_STATUS_MAP
sed -n 's/^ *X(\([A-Z_]*\), \(-*[0-9]*\), "\(.*\)").*/\1 \2 \3/p' "$srcdir/include/nxl.h" > man_coverage.status.tmp
[ -s man_coverage.status.tmp ] || { echo "FAIL: no NXL_STATUS_MAP entries read from nxl.h"; missing=$((missing + 1)); }
while read -r name value text; do
    if ! sed 's/  */ /g' "$srcdir/doc/man/nxl_strerror.md" | grep -Fqx "NXL_$name $value $text"; then
        echo "FAIL: nxl_strerror(3) lacks the line for NXL_$name ($value, $text)"
        missing=$((missing + 1))
    fi
done < man_coverage.status.tmp
rm -f man_coverage.status.tmp
[ $missing -eq 0 ] || exit 1
echo "every exported nxl_* function has a man page; the status table matches nxl.h"
