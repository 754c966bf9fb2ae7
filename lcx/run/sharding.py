"""Mesh, logical-axis rules and multi-host start-up.

Parameters carry logical axis names (`logical_axes=("embed", "mlp")`); `config.sharding` maps
each logical name to mesh axes, so the parallelism layout is a config change, not a code change.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from typing import NamedTuple

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from lcx import cli, data, errors
from lcx.config import checks
from lcx.run.metrics import say

MESH_AXES = ("data", "fsdp", "tensor")


class Sign(NamedTuple):
  """How `--distributed=auto` recognises a cluster: a test of the environment, and whether the
  run must fail when jax.distributed.initialize() then finds no cluster (False: a single host is
  possible, so the run goes on as one process)."""

  test: Callable[[Mapping[str, str]], bool]
  must_join: bool


# On a match, jax.distributed.initialize() with no arguments reads the same environment (and, on
# a Cloud TPU VM, the metadata server) to find the coordinator and the other processes. A GCE TPU
# pod slice reached by `gcloud compute tpus tpu-vm ssh --worker=all` sets none of TPU_ENV_VARS:
# JAX's own TPU VM check is what recognises it; it also holds on a single-host TPU VM outside
# GCE's TPU API, where JAX finds no cluster.
TPU_ENV_VARS = (
  "TPU_WORKER_HOSTNAMES",
  "TPU_PROCESS_ADDRESSES",
  "TPU_WORKER_ID",
  "TPU_ACCELERATOR_TYPE",
  "CLOUD_TPU_TASK_ID",
  "MEGASCALE_COORDINATOR_ADDRESS",
)


def _slurm(env) -> bool:
  return "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1


def _tpu_env(env) -> bool:
  return any(env.get(name) for name in TPU_ENV_VARS)


def _cloud_tpu_vm(env) -> bool:
  del env  # JAX's own check reads the machine, not the environment
  return _jax_detects_cloud_tpu_vm()


CLUSTER_SIGNS = {
  "slurm": Sign(_slurm, must_join=True),
  "tpu_env": Sign(_tpu_env, must_join=True),
  "cloud_tpu_vm": Sign(_cloud_tpu_vm, must_join=False),
}
DISTRIBUTED_MODES = cli.DISTRIBUTED_MODES


def _jax_detects_cloud_tpu_vm() -> bool:
  """JAX's own check, made at `import jax`: TPU chips on the PCI bus and libtpu installed.

  The flag lives in a private module (no public API says this): a JAX without it counts as no.
  """
  try:
    from jax._src import cloud_tpu_init
  except ImportError:
    return False
  return bool(getattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False))


def detect_cluster(env: Mapping[str, str]) -> str | None:
  """The first CLUSTER_SIGNS entry `env` matches (None: a single process)."""
  return next((name for name, sign in CLUSTER_SIGNS.items() if sign.test(env)), None)


def initialize_distributed(
  mode: str = "auto",
  coordinator_address: str = "",
  num_processes: int = 0,
  process_id: int = -1,
  env: Mapping[str, str] | None = None,
) -> None:
  """Joins a multi-process JAX run when there is one (see DISTRIBUTED_MODES); else a no-op.

  Explicit arguments (from flags) win over `mode`, which decides whether to call
  jax.distributed.initialize() and let JAX read the cluster from the environment.
  """
  if mode not in DISTRIBUTED_MODES:
    raise errors.not_allowed("--distributed", mode, DISTRIBUTED_MODES)
  cluster = detect_cluster(os.environ if env is None else env)
  if coordinator_address:
    if mode == "off":
      raise ValueError("--distributed=off contradicts --coordinator_address; drop one")
    # CPU processes need gloo for cross-process collectives; the setting is inert on GPU/TPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
      coordinator_address=coordinator_address, num_processes=num_processes, process_id=process_id
    )
  elif mode == "on" or (mode == "auto" and cluster is not None):
    try:
      jax.distributed.initialize()
    except ValueError as e:  # JAX found no cluster it knows in the environment
      if mode == "auto" and not CLUSTER_SIGNS[cluster].must_join:
        say(f"--distributed=auto: {cluster} seen, but JAX finds no cluster ({e}); one process")
        return
      raise ValueError(
        f"--distributed={mode}: jax.distributed.initialize() could not read a "
        f"cluster from the environment ({e}); pass --coordinator_address, "
        "--num_processes and --process_id, or --distributed=off"
      ) from e
  else:
    return
  say(
    f"process {jax.process_index()} of {jax.process_count()}, {jax.local_device_count()} "
    f"local / {jax.device_count()} global devices",
    every_process=True,
  )


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int]:
  """Resolves one -1 entry of {data, fsdp, tensor} to fill the devices."""
  sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
  free = [i for i, s in enumerate(sizes) if s == -1]
  if len(free) > 1 or any(s == 0 or s < -1 for s in sizes):
    raise errors.not_allowed(
      "mesh",
      dict(zip(MESH_AXES, sizes)),
      "positive sizes, with at most one -1 (fill the remaining devices)",
    )
  known = math.prod(s for s in sizes if s != -1)
  if free:
    if num_devices % known:
      raise ValueError(
        f"mesh={dict(zip(MESH_AXES, sizes))}: the {num_devices} devices do not "
        f"divide by the other axes' product {known}, so mesh."
        f"{MESH_AXES[free[0]]}=-1 cannot fill them"
      )
    sizes[free[0]] = num_devices // known
  if math.prod(sizes) != num_devices:
    raise ValueError(
      f"mesh={dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} "
      f"devices, but {num_devices} are available"
    )
  return tuple(sizes)


def make_mesh(mesh_cfg) -> jax.sharding.Mesh:
  # Auto axes: with the default Explicit axes an embedding lookup raises ShardingTypeError.
  return jax.make_mesh(
    mesh_shape(mesh_cfg, jax.device_count()),
    MESH_AXES,
    axis_types=(AxisType.Auto,) * len(MESH_AXES),
  )


def rules_from_config(sharding_cfg) -> dict[str, tuple[str, ...] | None]:
  """`{"batch": "data,fsdp", "kv": ""}` -> `{"batch": ("data", "fsdp"), "kv": None}`."""
  rules = {}
  for logical, axes in sharding_cfg.items():
    names = tuple(a for a in str(axes).split(",") if a)
    unknown = [a for a in names if a not in MESH_AXES]
    if unknown:
      raise errors.not_allowed(
        f"sharding.{logical}", axes, f"comma lists of the mesh axes {', '.join(MESH_AXES)}"
      )
    rules[logical] = names or None
  return rules


def logical_to_spec(logical_axes, rules) -> P:
  if logical_axes is None:
    return P()
  missing = [a for a in logical_axes if a is not None and a not in rules]
  if missing:
    raise ValueError(
      f"logical axis {missing[0]!r} has no rule in config.sharding; rules exist for {sorted(rules)}"
    )
  return P(*[rules[a] if a is not None else None for a in logical_axes])


def check_divisible(named_dims, mesh_sizes: dict[str, int], rules) -> None:
  """Raises ValueError naming the field of the first dimension its mesh axes do not divide.

  `named_dims` holds (config field, logical axis, size). Checked with the config, because JAX
  raises the same (IndivisibleError) only at compilation, after the run directory was written.
  """
  for field, logical, size in named_dims:
    axes = rules.get(logical) or ()
    shards = math.prod(mesh_sizes[a] for a in axes)
    if size % shards:
      mesh = "*".join(f"mesh.{a}" for a in axes)
      raise ValueError(
        f"{field}={size} is not divisible by {mesh}={shards} (sharding.{logical}="
        f"{','.join(axes)!r}); set --config.sharding.{logical}='' to replicate "
        f"it, or make {field} a multiple of {shards}"
      )


def batch_sharding(mesh, rules) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(("batch", None), rules))


def global_batch(local_batch: dict, mesh, rules) -> dict:
  """Assembles each process's rows into global arrays sharded over the batch axes."""
  sharding = batch_sharding(mesh, rules)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}


# The config field that sets each logical axis's size (lcx.model.decoder names the axes). A
# parameter axis missing here is reported by its parameter path.
AXIS_FIELDS = {
  "vocab": "model.vocab_size",
  "embed": "model.d_model",
  "heads": "model.num_heads",
  "kv_heads": "model.num_kv_heads",
  "head_dim": "model.head_dim",
  "mlp": "model.mlp_dim",
  "batch": "data.batch_size",
}


def sharded_dims(config, params=None) -> list[tuple[str, str, int]]:
  """(field, logical axis, size) of the global batch and of every sharded parameter dimension.

  Parameter shapes come from the abstract Decoder (`params`, else traced here; nothing is
  allocated), so a parameter added to the model is checked too. Ordered as AXIS_FIELDS, so the
  vocabulary is reported first.
  """
  from lcx.model import decoder as model_lib  # the model imports no sharding; traced only if needed

  if params is None:
    _, params = model_lib.abstract(config.model)
  dims = {("batch", config.data.batch_size): AXIS_FIELDS["batch"]}
  for path, var in jax.tree.leaves_with_path(params, is_leaf=model_lib.is_variable):
    for logical, size in zip(var.get_metadata().get("logical_axes") or (), var.get_value().shape):
      if logical is not None:
        where = f"parameter {jax.tree_util.keystr(path)} axis {logical}"
        dims.setdefault((logical, size), AXIS_FIELDS.get(logical, where))
  rank = {logical: i for i, logical in enumerate(AXIS_FIELDS)}
  return sorted(
    ((field, logical, size) for (logical, size), field in dims.items()),
    key=lambda d: rank.get(d[1], len(rank)),
  )


def check_mesh(config, num_devices: int, params=None) -> None:
  """Raises ValueError unless the mesh fits `num_devices` and divides every sharded dimension
  (vocabulary resolved; `params`: the abstract model's, if traced already); the processes'
  share of the batch is data.validate's check."""
  sizes = dict(zip(MESH_AXES, mesh_shape(config.mesh, num_devices)))
  check_divisible(sharded_dims(config, params), sizes, rules_from_config(config.sharding))


def validate(config) -> None:
  """Raises ValueError on the first bad field, the mesh's last; call before building anything,
  and after jax.distributed.initialize (the mesh is checked against the global device count).
  `lcx.run.prepare.prepare` runs the same two steps, sharing the model trace it needs anyway."""
  checks.check_fields(config)
  check_mesh(checks.resolve(config, data.vocab_size(config.data)), jax.device_count())
