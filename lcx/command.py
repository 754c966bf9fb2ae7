"""The `lcx` console command (`pip install .` puts it on PATH): `lcx train ...`, `lcx eval ...`,
the same subcommands as launch.sh, which is a convenience around the same modules. Each runs in
this process, after one re-exec that sets launch.sh's GLIBC_TUNABLES where the user set none."""

from __future__ import annotations

import os
import runpy
import sys

# subcommand -> the module it runs and the flags that go first; launch.sh dispatches to the
# same (tests/test_command.py checks the two agree).
COMMANDS = {
  "quickstart": ("lcx.tools.quickstart", ()),
  "train": ("lcx.main", ("--mode=train",)),
  "eval": ("lcx.main", ("--mode=eval",)),
  "generate": ("lcx.tools.generate", ()),
  "report": ("lcx.tools.report", ()),
  "provenance": ("lcx.tools.report.provenance", ()),
  "sweep": ("lcx.tools.sweep", ()),
  "longrope": ("lcx.tools.longrope", ()),
  "config": ("lcx.config.listing", ()),
  "bench": ("lcx.tools.bench", ()),
  "data": ("lcx.data.stats", ()),
  "export": ("lcx.tools.export", ()),
}
# glibc's malloc on transparent huge pages: XLA:CPU steps 1.3x faster (docs/performance.md,
# launch.sh).
TUNABLES = "glibc.malloc.hugetlb=1"


def usage() -> str:
  return "usage: lcx {" + ",".join(COMMANDS) + "} [FLAGS...] (see ./launch.sh help)"


def main(argv: list[str] | None = None) -> None:
  argv = sys.argv[1:] if argv is None else argv
  if not argv or argv[0] in ("help", "-h", "--help"):
    print(usage())
    return
  if argv[0] not in COMMANDS:
    print(f"error: unknown command {argv[0]!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
    sys.exit(2)
  if "GLIBC_TUNABLES" not in os.environ and sys.platform.startswith("linux"):
    os.environ["GLIBC_TUNABLES"] = TUNABLES  # read by glibc at process start: start afresh
    os.execv(sys.executable, [sys.executable, "-m", "lcx.command", *argv])
  module, first = COMMANDS[argv[0]]
  sys.argv = [module, *first, *argv[1:]]
  runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
  main()
