"""The "passkey" kind: length x depth accuracy."""

from lcx.tools import report
from tests.tools.report.results import passkey_result, row_cells


def test_passkey_table_is_length_by_depth():
  text = report.passkey_tables([passkey_result()])
  lines = text.splitlines()
  assert lines[0] == (
    "rope/none: passkey retrieval accuracy by length and needle depth; train "
    "length 64; 8 examples per cell."
  )
  assert row_cells(lines[2]) == [
    "length",
    "depth 0",
    "depth 0.5",
    "depth 1",
  ]
  assert row_cells(lines[5]) == [
    "128 (2x)",
    "0.250",
    "0.250",
    "0.250",
  ]
