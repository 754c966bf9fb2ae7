"""model.attention.impl: auto | xla | pallas, checked before anything compiles."""

from __future__ import annotations

import pytest
from flax import nnx

from lcx.config import checks as config_lib
from lcx.model import attention, decoder as model
from lcx.model.kernels import impl
from tests.helpers import TINY_FLAGS, run_lcx, tiny_config


@pytest.mark.parametrize(
  "fields, message",
  [
    (
      {"impl": "triton"},
      r"^model.attention.impl='triton' is not allowed; allowed: auto, xla, pallas$",
    ),
    ({"block_size": 24}, r"^model.attention.block_size=24 is not allowed; allowed: a power of two"),
    (
      {"impl": "pallas", "kind": "stick_breaking"},
      r"^model.attention.impl='pallas' is not allowed; allowed: auto, xla \(the Pallas kernel "
      r"does not run model.attention.kind='stick_breaking'\)$",
    ),
  ],
)
def test_bad_impl_fields_name_the_field(fields, message):
  config = tiny_config()
  for field, value in fields.items():
    config.model.attention[field] = value
  with pytest.raises(ValueError, match=message):
    config_lib.check_fields(config)


def test_pallas_with_cope_is_one_error_line_before_compiling(tmp_path):
  workdir = tmp_path / "run"
  flags = ["--config=configs/base.py:pos=cope,size=tiny", *TINY_FLAGS[1:]]
  flags += [f"--workdir={workdir}", "--config.model.attention.impl=pallas"]
  proc = run_lcx(flags, check=False, timeout=120)
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: model.attention.impl='pallas' is not allowed; allowed: auto, xla (the Pallas "
    "kernel does not run model.position.name='cope' (a contextual hook))"
  )
  assert "Traceback" not in proc.stderr
  assert not workdir.exists()


@pytest.mark.parametrize(
  "pos, kind, backend, want",
  [
    ("rope", "softmax", "cpu", "xla"),
    ("rope", "softmax", "gpu", "pallas"),
    ("alibi", "softmax", "tpu", "xla"),  # the Mosaic kernel waits for a TPU device check
    ("t5", "softmax", "gpu", "pallas"),  # the bucket lookup without a gather
    ("sandwich", "softmax", "gpu", "xla"),  # its kernel lowers, but ran 24x NoPE on an H200
    ("sandwich", "softmax", "tpu", "xla"),
    ("fire", "softmax", "tpu", "xla"),  # the MLP's weight gradient: a 3-axis contraction
    ("fire", "softmax", "gpu", "xla"),  # the bias MLP: a 4-D matmul
    ("fire", "softmax", "cpu", "xla"),
    ("cope", "softmax", "gpu", "xla"),  # the contextual hook: the XLA path
    ("fox", "softmax", "gpu", "pallas"),  # its prefix sums c are kernel inputs
    ("rope", "stick_breaking", "gpu", "xla"),
  ],
)
def test_auto_is_pallas_on_accelerators_unless_the_kernel_cannot_run_it(pos, kind, backend, want):
  cfg = tiny_config(pos).model
  cfg.attention.kind = kind
  assert impl.resolve_impl(cfg, backend) == want
  cfg.attention.impl = "xla"
  assert impl.resolve_impl(cfg, backend) == "xla"


def test_decoder_picks_the_kernel_and_a_kv_cache_stays_on_xla():
  cfg = tiny_config("alibi").model
  auto = model.Decoder(cfg, rngs=nnx.Rngs(0))  # CPU: auto is xla
  assert auto.kernel("dense").attend.__wrapped__ is attention.attend_dense  # output named
  cfg.attention.impl = "pallas"
  pallas = model.Decoder(cfg, rngs=nnx.Rngs(0))
  for name in ("dense", "chunked"):
    assert pallas.kernel(name).attend.func is impl.attend_flash
  pallas.init_cache(1, 8)
  assert pallas.kernel("dense").attend.__wrapped__ is attention.attend_dense


def test_a_scheme_measured_slower_in_the_kernel_keeps_xla_under_auto_but_pallas_runs_it():
  cfg = tiny_config("sandwich").model
  assert impl.resolve_impl(cfg, "gpu") == "xla"
  cfg.attention.impl = "pallas"
  impl.check_impl(
    cfg, "gpu"
  )  # allowed: the kernel lowers it (tests/model/kernels/test_triton_lowering)
  assert impl.resolve_impl(cfg, "gpu") == "pallas"
