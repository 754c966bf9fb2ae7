"""`python -m lcx.tools.report` (what `./launch.sh report` runs): see lcx.tools.report.cli."""

from absl import app

from lcx import cli
from lcx.tools.report import cli as report_cli

report_cli.define_flags()
app.run(report_cli.main, flags_parser=cli.parse_flags)
