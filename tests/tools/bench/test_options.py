"""lcx.tools.bench.options: --quick, --full and overrides, --options rows, and bad flags as one
error line."""

import pytest

from lcx.model import positions
from lcx.tools import bench
from lcx.tools.bench import workload
from tests.helpers import bench_options, run_lcx


def test_flags_quick_full_and_overrides():
  full, quick = bench_options(), bench_options("--quick")
  assert full.sections == list(bench.SECTIONS) and full.eval_lengths[-1] == 65536
  assert full.schemes == list(positions.SCHEMES)  # every registered scheme, none typed here
  assert len(quick.schemes) < len(full.schemes) and quick.rounds < full.rounds
  opts = bench_options(
    "--quick", "--schemes=nope,fire", "--rounds=7", "--sections=eval", "--peak_sizes=64,128"
  )
  assert (opts.schemes, opts.rounds, opts.sections, opts.peak_sizes) == (
    ["nope", "fire"],
    7,
    ["eval"],
    [64, 128],
  )
  with pytest.raises(
    ValueError,
    match=r"^--sections='peak,speed' is not allowed; allowed: "
    r"comma lists of peak, train, positions, eval, peers$",
  ):
    bench_options("--sections=peak,speed")
  with pytest.raises(
    ValueError,
    match=r"^--eval_lengths='1k' is not allowed; allowed: comma "
    r"lists of integers$",
  ):
    bench_options("--eval_lengths=1k")


def test_options_flag_builds_rows_of_the_option_on_its_scheme():
  assert bench_options().options == list(workload.MODEL_OPTIONS)
  assert bench_options("--quick").options == [
    "stick_breaking",
    "scale_invariant",
    "llama4",
    "gate_elementwise",
    "resonance",
  ]
  opts = bench_options("--options=")
  assert opts.options == [] and workload.option_rows(opts.options) == []
  assert workload.option_rows(["stick_breaking", "qk_norm"]) == [
    "nope+stick_breaking",
    "rope+qk_norm",
  ]
  config = workload.options_config(opts, "nope+stick_breaking", "tiny")
  assert (config.model.position.name, config.model.attention.kind) == ("nope", "stick_breaking")
  config = workload.options_config(opts, "rope+ssmax", "tiny")
  assert (config.model.position.name, config.model.attention.temperature) == ("rope", "ssmax")
  assert workload.options_config(opts, "rope+nope_every", "tiny").model.nope_every == 2
  config = workload.options_config(opts, "p_rope+scale_invariant", "tiny")
  assert (config.model.position.name, config.model.attention.temperature) == (
    "p_rope",
    "scale_invariant",
  )
  llama4 = workload.options_config(opts, "rope+llama4", "tiny").model
  assert (llama4.attention.temperature, llama4.nope_every) == ("llama4", 2)
  for gate in ("elementwise", "headwise"):
    assert workload.options_config(opts, f"rope+gate_{gate}", "tiny").model.attention.gate == gate
  scaling = workload.options_config(opts, "rope+resonance", "tiny").model.position.scaling
  assert (scaling.rope_type, scaling.resonance) == ("yarn", True)
  assert workload.options_config(opts, "cope+cope_shared", "tiny").model.position.shared
  assert not workload.options_config(opts, "cope", "tiny").model.position.shared  # per layer
  sb = workload.options_config(opts, "nope+stick_breaking", "tiny").model.attention
  assert sb.remainder_bias  # the reference's remainder vector, the default
  plain = workload.options_config(opts, "nope", "tiny").model
  assert (plain.attention.kind, plain.qk_norm, plain.nope_every) == ("softmax", False, 0)
  with pytest.raises(
    ValueError,
    match=r"^--options='softmax' is not allowed; allowed: comma lists of stick_breaking, qk_norm",
  ):
    bench_options("--options=softmax")


@pytest.mark.slow
def test_cli_errors_are_one_line():
  proc = run_lcx(["--sections=peak,speed"], module="lcx.tools.bench", check=False, timeout=120)
  assert proc.returncode == 2 and proc.stdout == ""
  assert proc.stderr == (
    "error: --sections='peak,speed' is not allowed; allowed: "
    "comma lists of peak, train, positions, eval, peers\n"
  )


def test_out_in_a_missing_folder_is_made_before_anything_runs(tmp_path):
  # It used to fail only when writing, after every section had run: the results were lost.
  out = tmp_path / "new" / "folder" / "bench.json"
  assert bench_options(f"--out={out}").out == str(out)
  assert out.parent.is_dir()
  blocker = tmp_path / "file"
  blocker.write_text("")
  with pytest.raises(ValueError, match=r"^--out="):
    bench_options(f"--out={blocker / 'bench.json'}")
