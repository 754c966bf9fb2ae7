#!/usr/bin/env bash
# Slims the working tree a device call sends, then puts it back:
#
#   experiments/gpu_tree.sh slim      # before the call: the outputs stop being tracked
#   experiments/gpu_tree.sh restore   # after it (and before any commit): the index is HEAD again
#
# A lent machine takes the tracked files and the untracked ones git does not ignore, 64 MiB at
# most with the carried wheels and data; the committed results, reports, CSVs and plots are
# most of the tree and no shard reads them. `slim` drops from the index exactly what
# lcx.run.provenance counts as outputs (its OUTPUTS: results/, *.md, *.csv, *.png, *.ipynb) and
# ignores them in .git/info/exclude, so they stay on disk, do not travel, and the results the
# machine writes still record a clean commit. It refuses an index with staged changes, since
# `restore` puts the index back to HEAD.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
exclude="$(git rev-parse --git-path info/exclude)"
begin="# gpu_tree.sh slim: begin" end="# gpu_tree.sh slim: end"
fail() { echo "error: $*" >&2; exit 2; }

# The pathspecs of the outputs, from the one place that defines them.
mapfile -t specs < <(cd "$here" && python3 -c \
  'from lcx.run import provenance; print("\n".join(provenance.OUTPUTS))')
outputs=() patterns=()
for spec in "${specs[@]}"; do
  glob=${spec#*)}  # ":(top,exclude,glob)experiments/**/results/**" -> "experiments/**/results/**"
  outputs+=(":(top,glob)$glob")
  patterns+=("/$glob")
done
slim=$(grep -qxF "$begin" "$exclude" 2>/dev/null && echo yes || echo no)

case "$mode" in
  slim)
    [ "$slim" = no ] || fail "the tree is slim already; run experiments/gpu_tree.sh restore"
    git diff --cached --quiet || fail "the index has staged changes; commit or unstage them first"
    mkdir -p "$(dirname "$exclude")"
    { echo "$begin"; printf '%s\n' "${patterns[@]}"; echo "$end"; } >>"$exclude"
    git ls-files -z -- "${outputs[@]}" | xargs -0 -r git --literal-pathspecs rm -q --cached --
    echo "[gpu_tree] slim: $(git ls-files | wc -l) tracked files, $(git ls-files -z |
      du -cb --files0-from=- | tail -1 | cut -f1) bytes travel;" \
      "run experiments/gpu_tree.sh restore after the call"
    ;;
  restore)
    [ "$slim" = yes ] || fail "the tree is not slim; nothing to restore"
    git reset -q
    sed -i "/^$begin\$/,/^$end\$/d" "$exclude"
    echo "[gpu_tree] restored: $(git ls-files | wc -l) tracked files"
    ;;
  *) fail "mode='$mode' is not allowed; allowed: slim, restore" ;;
esac
