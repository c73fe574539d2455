#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-3-Clause
# Each libFuzzer harness for a few seconds on its committed corpus, so that
# the harnesses build and the corpus runs clean in every make check (long
# runs: tests/fuzz/run -t SECONDS). Skipped (77) without clang's fuzzer.
cd "$(dirname "$0")/.." || exit 1
exec tests/fuzz/run -t "${NXL_FUZZ_SECONDS:-5}"
