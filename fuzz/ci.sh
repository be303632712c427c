#!/usr/bin/env bash
# Runs every fuzz target of fuzz/fuzz_targets for a bounded time (FUZZ_SECONDS each, default
# 20) when the nightly toolchain and cargo-fuzz are installed; otherwise says it skips. Each
# target starts from a scratch copy of its committed corpus (fuzz/corpus/<target>), so CI never
# rewrites committed files; a crash, a timeout or a leak fails the script, and the input that
# caused it is left in fuzz/artifacts/<target>/ (ignored by git).
set -euo pipefail

cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-20}"

if ! cargo +nightly --version >/dev/null 2>&1 || ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "fuzz/ci.sh: skipped (needs the nightly toolchain and cargo-fuzz)"
  exit 0
fi

targets=()
for file in fuzz_targets/*.rs; do
  targets+=("$(basename "$file" .rs)")
done

echo "== cargo +nightly fuzz build (${targets[*]})"
cargo +nightly fuzz build -s none

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
failed=()
for target in "${targets[@]}"; do
  mkdir -p "$scratch/$target"
  if [ -d "corpus/$target" ]; then
    cp -R "corpus/$target/." "$scratch/$target/"
  fi
  dict=()
  if [ -f "$target.dict" ]; then
    dict=("-dict=$target.dict")
  fi
  # ops inputs are 8-byte steps after a flags byte: let them reach 200 steps.
  if [ "$target" = ops ]; then
    dict+=("-max_len=1601")
  fi
  echo "== fuzz $target for ${seconds}s"
  if ! cargo +nightly fuzz run -s none "$target" "$scratch/$target" -- \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 "${dict[@]}" 2>"$scratch/$target.log"; then
    tail -n 40 "$scratch/$target.log"
    failed+=("$target")
  else
    grep -E "^(#[0-9]+\s+DONE|Done [0-9]+ runs)" "$scratch/$target.log" || true
  fi
done

if [ "${#failed[@]}" -gt 0 ]; then
  echo "fuzz/ci.sh: findings in: ${failed[*]} (inputs in fuzz/artifacts/)"
  exit 1
fi
echo "fuzz/ci.sh: ${#targets[@]} targets ran ${seconds}s each without a finding"
