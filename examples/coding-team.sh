#!/usr/bin/env bash
# Makes the small repository examples/coding-team.toml works on, runs the team on it, and
# shows the result. Every merge waits for a person: on a terminal arbor asks; with --yes this
# script approves each one (printing what it approves), as a person would with
# `arbor approvals`, `arbor approve` and `arbor resume`.
#
#   bash examples/coding-team.sh [--yes] [DIR]     # DIR: where to work (default: a new one)
#
# ARBOR names the arbor program (default: arbor on PATH).
set -euo pipefail

yes=false
if [ "${1:-}" = "--yes" ]; then yes=true; shift; fi
arbor=${ARBOR:-arbor}
spec=$(cd "$(dirname "$0")" && pwd)/coding-team.toml
work=${1:-$(mktemp -d)}
mkdir -p "$work"
work=$(cd "$work" && pwd)
cd "$work"

repo=$work/repo
if [ -e "$repo" ]; then
  echo "coding-team.sh: $repo exists already: pick a new DIR" >&2
  exit 2
fi
mkdir -p "$repo"
git -C "$repo" init -q -b main
cat > "$repo/greet.sh" <<'SH'
greeting() { echo hello; }
name() { echo world; }
SH
cat > "$repo/test.sh" <<'SH'
. ./greet.sh
fail=0
[ "$(greeting)" = Hello ] || { echo "greeting says $(greeting), not Hello"; fail=1; }
[ "$(name)" = arbor ] || { echo "name says $(name), not arbor"; fail=1; }
[ -f NOTES.md ] || { echo "NOTES.md is missing"; fail=1; }
[ $fail = 0 ] && echo "all tests pass"
exit $fail
SH
git -C "$repo" add .
git -C "$repo" -c user.name=you -c user.email=you@example.invalid commit -q -m "A greeting and its tests"

code=0
if $yes; then
  "$arbor" run "$spec" --repository "$repo" --no-input -q || code=$?
  # Each stop: the merges waiting, approved as a person would, then the run goes on.
  while [ "$code" = 4 ]; do
    "$arbor" approvals
    # Every pending call's id (apr_… its own, sub_… a child's), from every suspension.
    ids=$("$arbor" approvals --json | grep -o '"id":"\(apr\|sub\)_[0-9a-f]*"' | cut -d'"' -f4 || true)
    if [ -z "$ids" ]; then
      echo "coding-team.sh: the run waits, but no pending call was listed" >&2
      exit 1
    fi
    # shellcheck disable=SC2086
    "$arbor" approve @latest $ids
    code=0
    "$arbor" resume @latest --no-input || code=$?
  done
else
  "$arbor" run "$spec" --repository "$repo" || code=$?
fi
echo
echo "the main checkout ($repo) now:"
git -C "$repo" log --oneline --graph main
(cd "$repo" && sh test.sh) || true
exit "$code"
