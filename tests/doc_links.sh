#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Every relative link of README.md and doc/*.md (doc/perf/ too) leads
# somewhere: [text](path), ![alt](path) and [text](path#anchor) name a file
# or folder that exists, relative to the page, and an anchor into a
# markdown page names one of its headings (GitHub's rule: lower case,
# punctuation dropped, spaces as hyphens). Links inside code (``` blocks,
# `spans`) and links with a scheme (https:, mailto:) are not followed.
#   tests/doc_links.sh [PAGE.md ...]     (default: the pages above)
srcdir=${srcdir:-.}
cd "$srcdir" || exit 99
if [ $# -eq 0 ]; then
    set -- README.md doc/*.md doc/perf/*.md
fi
tmp=${TMPDIR:-/tmp}/doc_links.$$
trap 'rm -f "$tmp".*' EXIT

# the text of a page outside code: fenced blocks and inline code removed
prose() {
    awk '/^[ \t]*```/ { fence = !fence; next } !fence { gsub(/`[^`]*`/, ""); print }' "$1"
}

# the anchors of a page's headings, one a line
anchors() {
    prose "$1" | awk '/^#+[ \t]/ {
        sub(/^#+[ \t]+/, ""); sub(/[ \t]+#*[ \t]*$/, "")
        s = tolower($0)
        gsub(/[^a-z0-9 _-]/, "", s)
        gsub(/ /, "-", s)
        print s
    }'
}

fail=0 n=0
for page in "$@"; do
    [ -f "$page" ] || { echo "FAIL: $page: no such page"; fail=1; continue; }
    dir=$(dirname "$page")
    # every ](target) of the page's prose: the target up to a space or ')'
    prose "$page" | grep -o '](\([^) ]*\)' | sed 's/^](//' >"$tmp.links"
    while IFS= read -r link; do
        case $link in
        '' | [a-zA-Z]*:*) continue ;; # a scheme: https:, mailto:
        esac
        n=$((n + 1))
        path=${link%%#*}
        anchor=
        case $link in *'#'*) anchor=${link#*#} ;; esac
        if [ -z "$path" ]; then
            target=$page
        else
            target=$dir/$path
        fi
        if [ ! -e "$target" ]; then
            echo "FAIL: $page: link ($link): $target does not exist"
            fail=1
            continue
        fi
        if [ -n "$anchor" ]; then
            case $target in
            *.md)
                anchors "$target" >"$tmp.anchors"
                grep -qxF "$anchor" "$tmp.anchors" || {
                    echo "FAIL: $page: link ($link): $target has no heading with the anchor #$anchor"
                    fail=1
                }
                ;;
            esac
        fi
    done <"$tmp.links"
done
[ "$fail" -eq 0 ] && echo "doc_links: $n relative links in $# pages lead to files (and headings)"
exit $fail
