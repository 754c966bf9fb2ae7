"""Mesh sizing, logical rules, cluster detection, 4-fake-device equivalence and a real
2-process run."""

import os
import socket
import subprocess
import sys

import jax
import pytest
from ml_collections import ConfigDict

from lcx.run import sharding
from tests.helpers import ROOT, TINY_FLAGS, fake_devices, read_metrics, run_lcx


def test_mesh_shape_fills_one_axis():
  assert sharding.mesh_shape(ConfigDict({"data": -1, "fsdp": 2, "tensor": 1}), 8) == (4, 2, 1)
  with pytest.raises(
    ValueError,
    match=r"^mesh=\{'data': -1, 'fsdp': -1, 'tensor': 1\} is not "
    r"allowed; allowed: positive sizes, with at most one -1",
  ):
    sharding.mesh_shape(ConfigDict({"data": -1, "fsdp": -1, "tensor": 1}), 8)
  with pytest.raises(ValueError, match="needs 4 devices, but 8 are available"):
    sharding.mesh_shape(ConfigDict({"data": 2, "fsdp": 2, "tensor": 1}), 8)
  with pytest.raises(
    ValueError,
    match=r"the 8 devices do not divide by the other axes' product "
    r"3, so mesh\.data=-1 cannot fill them",
  ):
    sharding.mesh_shape(ConfigDict({"data": -1, "fsdp": 3, "tensor": 1}), 8)


def test_check_divisible_names_field_axes_and_rule():
  rules = {"batch": ("data", "fsdp"), "vocab": None}
  sizes = {"data": 2, "fsdp": 3, "tensor": 1}
  sharding.check_divisible(
    [("model.vocab_size", "vocab", 259), ("data.batch_size", "batch", 12)], sizes, rules
  )
  with pytest.raises(
    ValueError,
    match=r"^data\.batch_size=8 is not divisible by "
    r"mesh\.data\*mesh\.fsdp=6 \(sharding\.batch='data,fsdp'\); set "
    r"--config\.sharding\.batch='' to replicate it, or make data\.batch_size a "
    r"multiple of 6$",
  ):
    sharding.check_divisible([("data.batch_size", "batch", 8)], sizes, rules)


def test_rules_name_bad_mesh_axis():
  with pytest.raises(
    ValueError,
    match=r"^sharding.mlp='model' is not allowed; allowed: comma "
    r"lists of the mesh axes data, fsdp, ",
  ):
    sharding.rules_from_config(ConfigDict({"mlp": "model"}))
  rules = sharding.rules_from_config(ConfigDict({"batch": "data,fsdp", "kv": ""}))
  assert rules == {"batch": ("data", "fsdp"), "kv": None}
  assert sharding.logical_to_spec(("batch", "kv"), rules) == sharding.P(("data", "fsdp"), None)


@pytest.fixture(autouse=True)
def _no_tpu_vm(monkeypatch):
  """This machine's answer to JAX's Cloud TPU VM check must not decide the detection tests."""
  monkeypatch.setattr(sharding, "_jax_detects_cloud_tpu_vm", lambda: False)


@pytest.mark.parametrize(
  "env, cluster",
  [
    ({}, None),
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}, None),  # one task: nothing to join
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}, "slurm"),
    ({"TPU_WORKER_HOSTNAMES": "t0,t1"}, "tpu_env"),  # GKE
    ({"TPU_WORKER_ID": "1", "TPU_ACCELERATOR_TYPE": "v4-32"}, "tpu_env"),  # GCE TPU VM shell
    ({"CLOUD_TPU_TASK_ID": "0"}, "tpu_env"),
    ({"TPU_WORKER_ID": ""}, None),  # set but empty: no sign
  ],
)
def test_detect_cluster_from_environment(env, cluster):
  assert sharding.detect_cluster(env) == cluster


def test_gce_tpu_pod_without_env_vars_is_found_by_jax_detection(monkeypatch):
  # `gcloud compute tpus tpu-vm ssh --worker=all` sets none of the TPU variables.
  monkeypatch.setattr(sharding, "_jax_detects_cloud_tpu_vm", lambda: True)
  assert sharding.detect_cluster({}) == "cloud_tpu_vm"


@pytest.fixture
def calls(monkeypatch):
  """Records jax.distributed.initialize and jax.config.update calls instead of running them."""
  seen = []
  monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: seen.append(("init", kw)))
  monkeypatch.setattr(jax.config, "update", lambda *a: seen.append(("config", a)))
  return seen


@pytest.mark.parametrize(
  "mode, env, initialized",
  [
    ("auto", {}, False),
    ("auto", {"TPU_WORKER_ID": "0", "TPU_ACCELERATOR_TYPE": "v5litepod-16"}, True),
    ("auto", {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}, True),
    ("on", {}, True),
    ("off", {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}, False),
  ],
)
def test_initialize_distributed_modes(calls, mode, env, initialized):
  sharding.initialize_distributed(mode, env=env)
  assert calls == ([("init", {})] if initialized else [])  # no arguments: JAX reads the cluster


def test_explicit_coordinator_wins(calls):
  sharding.initialize_distributed("auto", "10.0.0.1:1234", 2, 1, env={})
  assert calls == [
    ("config", ("jax_cpu_collectives_implementation", "gloo")),
    ("init", {"coordinator_address": "10.0.0.1:1234", "num_processes": 2, "process_id": 1}),
  ]
  with pytest.raises(ValueError, match="--distributed=off contradicts --coordinator_address"):
    sharding.initialize_distributed("off", "10.0.0.1:1234", 2, 1, env={})


@pytest.fixture
def no_cluster(monkeypatch):
  """jax.distributed.initialize() as JAX runs it where it recognises no cluster."""

  def initialize(**kw):
    raise ValueError("coordinator_address should be defined.")

  monkeypatch.setattr(jax.distributed, "initialize", initialize)


def test_on_without_a_cluster_says_what_to_pass(no_cluster):
  with pytest.raises(
    ValueError,
    match=r"^--distributed=on: jax\.distributed\.initialize\(\) could "
    r"not read a cluster .*pass --coordinator_address, --num_processes and "
    r"--process_id, or --distributed=off$",
  ):
    sharding.initialize_distributed("on", env={})


def test_auto_on_a_single_host_tpu_vm_goes_on_as_one_process(no_cluster, monkeypatch):
  # JAX's TPU VM check holds on any TPU VM; outside GCE's TPU API JAX then finds no cluster.
  monkeypatch.setattr(sharding, "_jax_detects_cloud_tpu_vm", lambda: True)
  sharding.initialize_distributed("auto", env={})  # no error
  with pytest.raises(ValueError, match=r"^--distributed=auto: jax\.distributed\.initialize"):
    sharding.initialize_distributed("auto", env={"TPU_WORKER_ID": "0"})  # a pod: must join


FOUR_DEVICES = fake_devices(4)


@pytest.mark.slow
def test_indivisible_mesh_fails_before_writing_anything(tmp_path):
  proc = run_lcx(
    [
      *TINY_FLAGS,
      f"--workdir={tmp_path / 'run'}",
      "--config.mesh.data=2",
      "--config.mesh.tensor=2",
    ],
    env=FOUR_DEVICES,
    check=False,
    timeout=120,
  )
  assert proc.returncode == 2, proc.stderr[-3000:]
  assert proc.stderr.strip().splitlines()[-1] == (
    "error: model.vocab_size=259 is not divisible by mesh.tensor=2 (sharding.vocab='tensor'); "
    "set --config.sharding.vocab='' to replicate it, or make model.vocab_size a multiple of 2"
  )
  assert "Traceback" not in proc.stderr
  assert not (tmp_path / "run").exists()


MESH_RUN = [*TINY_FLAGS, "--config.train.steps=3", "--config.model.mlp_dim=256"]


@pytest.fixture(scope="module")
def one_device_run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("one_device")
  run_lcx([*MESH_RUN, f"--workdir={workdir}"], env={"JAX_PLATFORMS": "cpu"})
  return workdir


@pytest.mark.slow
@pytest.mark.parametrize(
  "mesh",
  [
    ("--config.mesh.data=2", "--config.mesh.fsdp=2"),
    ("--config.mesh.data=2", "--config.mesh.tensor=2", "--config.sharding.vocab="),
  ],
  ids=["data2_fsdp2", "data2_tensor2"],
)
def test_four_fake_devices_match_one_device(tmp_path, one_device_run, mesh):
  run_lcx([*MESH_RUN, f"--workdir={tmp_path}", *mesh], env=FOUR_DEVICES)
  one, four = read_metrics(one_device_run), read_metrics(tmp_path)
  for step in (1, 2, 3):
    assert four[step]["loss"] == pytest.approx(one[step]["loss"], abs=1e-5)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_train_together(tmp_path):
  port = _free_port()
  procs = [
    subprocess.Popen(
      [
        sys.executable,
        "-m",
        "lcx.main",
        *TINY_FLAGS,
        f"--workdir={tmp_path}",
        "--config.train.steps=4",
        "--config.train.checkpoint_every=2",
        f"--coordinator_address=127.0.0.1:{port}",
        "--num_processes=2",
        f"--process_id={i}",
      ],
      cwd=ROOT,
      env={**os.environ, "JAX_PLATFORMS": "cpu"},
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  try:
    outs = [p.communicate(timeout=240) for p in procs]
  except subprocess.TimeoutExpired:  # a hang: both processes' last words, not just the first's
    for p in procs:
      p.kill()
    tails = [f"process {i}:\n{p.communicate()[1][-2000:]}" for i, p in enumerate(procs)]
    pytest.fail("the two processes hung past 240 s\n" + "\n".join(tails))
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err[-4000:]
  assert "process 0 of 2" in outs[0][1] and "process 1 of 2" in outs[1][1]
  metrics = read_metrics(tmp_path)
  assert sorted(metrics) == [1, 2, 3, 4]
  assert (tmp_path / "checkpoints" / "4").is_dir()
