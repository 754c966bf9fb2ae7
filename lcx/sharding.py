"""Mesh, logical-axis rules and multi-host start-up.

Parameters carry logical axis names (`logical_axes=("embed", "mlp")`); `config.sharding` maps
each logical name to mesh axes, so the parallelism layout is a config change, not a code change.
"""

from __future__ import annotations

import os

import jax
import numpy as np
from flax import nnx
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from lcx.metrics import say

MESH_AXES = ("data", "fsdp", "tensor")


def initialize_distributed(coordinator_address: str = "", num_processes: int = 0,
                           process_id: int = -1) -> None:
  """Joins a multi-process JAX run when there is one; a no-op on a single host.

  Explicit arguments (from flags) win; otherwise JAX's own cluster detection reads the
  environment of a TPU pod slice (TPU metadata) or a SLURM allocation (SLURM_* variables).
  """
  if coordinator_address:
    # CPU processes need gloo for cross-process collectives; the setting is inert on GPU/TPU.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=coordinator_address,
                               num_processes=num_processes, process_id=process_id)
  elif "SLURM_JOB_ID" in os.environ and int(os.environ.get("SLURM_NTASKS", "1")) > 1:
    jax.distributed.initialize()
  elif os.environ.get("TPU_WORKER_HOSTNAMES", "").count(",") > 0:
    jax.distributed.initialize()
  else:
    return
  say(f"process {jax.process_index()} of {jax.process_count()}, {jax.local_device_count()} "
      f"local / {jax.device_count()} global devices", every_process=True)


def mesh_shape(mesh_cfg, num_devices: int) -> tuple[int, int, int]:
  """Resolves one -1 entry of {data, fsdp, tensor} to fill the devices."""
  sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
  free = [i for i, s in enumerate(sizes) if s == -1]
  if len(free) > 1 or any(s == 0 or s < -1 for s in sizes):
    raise ValueError(f"mesh={dict(zip(MESH_AXES, sizes))}: sizes must be positive, "
                     "with at most one -1 (fill the remaining devices)")
  known = int(np.prod([s for s in sizes if s != -1]))
  if free:
    if num_devices % known:
      raise ValueError(f"mesh: {num_devices} devices are not divisible by {known}")
    sizes[free[0]] = num_devices // known
  if int(np.prod(sizes)) != num_devices:
    raise ValueError(f"mesh={dict(zip(MESH_AXES, sizes))} needs {int(np.prod(sizes))} "
                     f"devices, but {num_devices} are available")
  return tuple(sizes)


def make_mesh(mesh_cfg) -> jax.sharding.Mesh:
  # Auto axes: with the default Explicit axes an embedding lookup raises ShardingTypeError.
  return jax.make_mesh(mesh_shape(mesh_cfg, jax.device_count()), MESH_AXES,
                       axis_types=(AxisType.Auto,) * len(MESH_AXES))


def rules_from_config(sharding_cfg) -> dict[str, tuple[str, ...] | None]:
  """`{"batch": "data,fsdp", "kv": ""}` -> `{"batch": ("data", "fsdp"), "kv": None}`."""
  rules = {}
  for logical, axes in sharding_cfg.items():
    names = tuple(a for a in str(axes).split(",") if a)
    unknown = [a for a in names if a not in MESH_AXES]
    if unknown:
      raise ValueError(f"sharding.{logical}={axes!r}: mesh axis {unknown[0]!r} is not one of "
                       f"{MESH_AXES}")
    rules[logical] = names or None
  return rules


def logical_to_spec(logical_axes, rules) -> P:
  if logical_axes is None:
    return P()
  missing = [a for a in logical_axes if a is not None and a not in rules]
  if missing:
    raise ValueError(f"logical axis {missing[0]!r} has no rule in config.sharding; "
                     f"rules exist for {sorted(rules)}")
  return P(*[rules[a] if a is not None else None for a in logical_axes])


def param_shardings(state: nnx.State, mesh, rules):
  """NamedSharding for every variable of `state`, from its `logical_axes` metadata."""

  def one(v):
    return NamedSharding(mesh, logical_to_spec(v.get_metadata().get("logical_axes"), rules))

  return jax.tree.map(one, state, is_leaf=lambda x: isinstance(x, nnx.Variable))


def batch_sharding(mesh, rules) -> NamedSharding:
  return NamedSharding(mesh, logical_to_spec(("batch", None), rules))


def global_batch(local_batch: dict, mesh, rules) -> dict:
  """Assembles each process's rows into global arrays sharded over the batch axes."""
  sharding = batch_sharding(mesh, rules)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
