"""Mesh sizing, logical rules, 4-fake-device equivalence and a real 2-process run."""

import socket
import subprocess
import sys

import pytest
from ml_collections import ConfigDict

from lcx import sharding
from tests.helpers import ROOT, TINY_FLAGS, read_metrics, run_lcx


def test_mesh_shape_fills_one_axis():
  assert sharding.mesh_shape(ConfigDict({"data": -1, "fsdp": 2, "tensor": 1}), 8) == (4, 2, 1)
  with pytest.raises(ValueError, match="at most one -1"):
    sharding.mesh_shape(ConfigDict({"data": -1, "fsdp": -1, "tensor": 1}), 8)
  with pytest.raises(ValueError, match="needs 4 devices, but 8 are available"):
    sharding.mesh_shape(ConfigDict({"data": 2, "fsdp": 2, "tensor": 1}), 8)


def test_rules_name_bad_mesh_axis():
  with pytest.raises(ValueError, match=r"sharding.mlp='model': mesh axis 'model' is not one of"):
    sharding.rules_from_config(ConfigDict({"mlp": "model"}))
  rules = sharding.rules_from_config(ConfigDict({"batch": "data,fsdp", "kv": ""}))
  assert rules == {"batch": ("data", "fsdp"), "kv": None}
  assert sharding.logical_to_spec(("batch", "kv"), rules) == sharding.P(("data", "fsdp"), None)


def test_four_fake_devices_match_one_device(tmp_path):
  common = [*TINY_FLAGS, "--config.train.steps=3", "--config.model.mlp_dim=256"]
  run_lcx([*common, f"--workdir={tmp_path / 'one'}"], env={"JAX_PLATFORMS": "cpu"})
  run_lcx([*common, f"--workdir={tmp_path / 'four'}", "--config.mesh.data=2",
           "--config.mesh.fsdp=2"],
          env={"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
  one, four = read_metrics(tmp_path / "one"), read_metrics(tmp_path / "four")
  for step in (1, 2, 3):
    assert four[step]["loss"] == pytest.approx(one[step]["loss"], abs=1e-5)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_two_processes_train_together(tmp_path):
  port = _free_port()
  procs = [subprocess.Popen(
      [sys.executable, "-m", "lcx.main", *TINY_FLAGS, f"--workdir={tmp_path}",
       "--config.train.steps=4", "--config.train.checkpoint_every=2",
       f"--coordinator_address=127.0.0.1:{port}", "--num_processes=2", f"--process_id={i}"],
      cwd=ROOT, env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"},
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
  outs = [p.communicate(timeout=240) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-4000:]
  assert "process 0 of 2" in outs[0][1] and "process 1 of 2" in outs[1][1]
  metrics = read_metrics(tmp_path)
  assert sorted(metrics) == [1, 2, 3, 4]
  assert (tmp_path / "checkpoints" / "4").is_dir()
