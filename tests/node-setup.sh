#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The object-store suites' servers and client, installed with npm into DIR
# (default tests/node of the build tree) once: s3rver, azurite and
# @azure/storage-blob at the versions below. Under a lock on DIR, so that
# check_obj and the Python suite (tests/python.sh), run at once by
# make -j, install them once between them. Exit 0: ready; 77: no node or
# npm; 1: npm failed (DIR/npm-install.log says why).
set -u
dir=${1:-tests/node}
pkgs="s3rver@3.7.1 azurite@3.35.0 @azure/storage-blob@12.28.0"
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || exit 77
mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || exit 1
ready() {
    for p in s3rver azurite @azure/storage-blob; do
        [ -r "$dir/node_modules/$p/package.json" ] || return 1
    done
}
install() {
    ready && exit 0
    echo "installing $pkgs into $dir (once)" >&2
    (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error --prefix "$dir" \
        $pkgs) >"$dir/npm-install.log" 2>&1 && ready
}
if command -v flock >/dev/null 2>&1; then
    exec 9>"$dir/.install.lock"
    flock 9
fi
install
