"""The "passkey" kind: retrieval accuracy, length x needle depth."""

from __future__ import annotations

from collections.abc import Sequence

from lcx.tools.report import tables


def passkey_tables(results: Sequence[dict]) -> str:
  """(e): passkey retrieval accuracy, length x depth, one table per result."""
  out = []
  for r in tables.of_kind(results, "passkey"):
    depths = sorted({float(d) for d in r["depths"]})
    lengths = sorted({int(n) for n in r["lengths"]})
    cells = {(int(c["length"]), float(c["depth"])): c for c in r["cells"]}
    rows = [
      [tables.times(n, r["train_len"])]
      + [tables.f3(cells[n, d]["accuracy"]) if (n, d) in cells else "-" for d in depths]
      for n in lengths
    ]
    examples = tables.span(c.get("examples") for c in r["cells"])
    out.append(
      f"{tables.label(r)}: passkey retrieval accuracy by length and needle depth; train "
      f"length {r['train_len']}; {examples} examples per cell.\n\n"
      + tables.markdown_table(["length"] + [f"depth {d:g}" for d in depths], rows)
    )
  return "\n\n".join(out)


def csv_rows(r: dict) -> list[dict]:
  """One accuracy row per (length, depth) cell."""
  return [
    tables.row(
      tables.row_base(r),
      length=c["length"],
      depth=c["depth"],
      metric="accuracy",
      value=c["accuracy"],
      examples=c.get("examples"),
    )
    for c in sorted(r["cells"], key=lambda c: (int(c["length"]), float(c["depth"])))
  ]
