"""report.md and results.csv: every kind's sections, rows and plots (kinds.KINDS), in its order."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence

from lcx import files
from lcx.tools.report import claims as claims_lib, kinds, tables
from lcx.tools.report.load import SCHEMA, check

CLAIMS_HEADING = "Claims (pre-declared)"


def sections(
  results: Sequence[dict],
  baseline: str = "",
  tolerance: float | None = None,
  claims: Sequence[claims_lib.Claim] = (),
) -> list[tuple[str, str, str | None]]:
  """(heading, markdown, plot key) for every table that has data, in report order. The paired
  tables need per-document losses, so older results leave them out. `baseline`: see
  `lengths.pair_tables`; `tolerance`: see `lengths.effective_length_tables`; `claims`: the
  experiment's pre-declared claims, judged last (`claims.claims_table`). Runs and
  variants are named as `tables.as_seeds` names them, here and in the CSV, index and plots."""
  results = tables.as_seeds(results)
  out = []
  for kind in kinds.KINDS.values():
    chosen = tables.of_kind(results, kind.name)
    for section in kind.sections:
      body = section.build(chosen, baseline, tolerance)
      if body:
        out.append((section.heading, body, section.plot))
  if claims:
    out.append((CLAIMS_HEADING, claims_lib.claims_table(results, claims), None))
  return out


def format_tables(
  results: Sequence[dict],
  baseline: str = "",
  tolerance: float | None = None,
  claims: Sequence[claims_lib.Claim] = (),
) -> str:
  """All tables as markdown: what the CLI prints and evaluation shows after a run."""
  chosen = sections(results, baseline, tolerance, claims)
  return "\n\n".join(f"## {h}\n\n{body}" for h, body, _ in chosen)


def _index_table(results: Sequence[dict]) -> str:
  rows = [
    [
      r["run"],
      str(r["variant"]),
      r["kind"],
      str(r["step"]),
      str(r.get("scheme", "-")),
      str(r.get("remap", "-")),
      str(r["train_len"]),
      kinds.KINDS[r["kind"]].describe(r),
    ]
    for r in results
  ]
  return tables.markdown_table(
    ["run", "variant", "kind", "step", "scheme", "remap", "train length", "protocol"],
    rows,
    align="lllrllrl",
  )


def csv_rows(results: Sequence[dict], baseline: str = "") -> list[dict]:
  """Tidy long format: one row per result x measurement (length, position bucket, size bucket,
  depth, passkey cell) x metric, then the rows comparing results (the paired differences);
  unused columns empty."""
  results = tables.as_seeds(results)
  own = [row for r in results for row in kinds.KINDS[r["kind"]].rows(r)]
  pairs = [
    row
    for kind in kinds.KINDS.values()
    for row in kind.pair_rows(tables.of_kind(results, kind.name), baseline)
  ]
  return own + pairs


def format_csv(results: Sequence[dict], baseline: str = "") -> str:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, tables.CSV_COLUMNS, lineterminator="\n")
  writer.writeheader()
  writer.writerows(csv_rows(results, baseline))
  return buffer.getvalue()


def format_report(
  results: Sequence[dict],
  title: str,
  plots: dict[str, str],
  baseline: str = "",
  tolerance: float | None = None,
  claims: Sequence[claims_lib.Claim] = (),
) -> str:
  """report.md: title, the tables with links to their plots, and what each result is."""
  results = tables.as_seeds(results)
  parts = [
    f"# {title}",
    "",
    f"{len(results)} results (schema `{SCHEMA}`), rendered by `python -m lcx.tools.report`. "
    "Cells: value [95% CI].",
  ]
  for heading, body, plot in sections(results, baseline, tolerance, claims):
    parts += ["", f"## {heading}", "", body]
    if plot in plots:
      parts += ["", f"![{plot.replace('_', ' ')}]({os.path.basename(plots[plot])})"]
  if not results:
    parts += ["", "No results yet."]
  else:
    parts += ["", "## Results", "", _index_table(results)]
  return "\n".join(parts) + "\n"


def write(
  results: Sequence[dict],
  out_dir: str,
  title: str = "lcx report",
  baseline: str = "",
  tolerance: float | None = None,
  claims: Sequence[claims_lib.Claim] = (),
) -> dict[str, str]:
  """Writes out_dir/report.md, results.csv and the plots that have data; returns
  {"report": path, "csv": path, plot key: path, ...}."""
  for i, r in enumerate(results):
    check(r, f"results[{i}]")
  results = tables.as_seeds(results)
  os.makedirs(out_dir, exist_ok=True)
  paths = {}
  for kind in kinds.KINDS.values():
    chosen = tables.of_kind(results, kind.name)
    for plot in kind.plots:
      path = plot.draw(chosen, os.path.join(out_dir, plot.file)) if chosen else None
      if path:
        paths[plot.key] = path
  report = os.path.join(out_dir, "report.md")
  files.write_atomic(report, format_report(results, title, paths, baseline, tolerance, claims))
  table = os.path.join(out_dir, "results.csv")
  files.write_atomic(table, format_csv(results, baseline))
  return {"report": report, "csv": table, **paths}
