"""The config's fields, one record each (lcx/field.py): the top level, training, evaluation and the
mesh here, the model's in lcx/model/options.py, the data's in lcx/data/config.py. The defaults
(lcx/config/defaults.py), the checks before jax (lcx/config/checks.py), `./launch.sh config` and its
markdown table (lcx/config/listing.py) are generated from `CONFIG`. Adding a field is adding its
record to its section here (or beside its owner), then using it."""

import ml_collections

from lcx.config import changes, protocols
from lcx.data import config as data_config
from lcx.field import Field, Section, at_least, numbers, positive
from lcx.model import options

DECAYS = ("cosine", "linear", "constant")  # train.decay (lcx/run/train.py's schedule)
RANDOM_BIAS = ("distances", "positions")  # train.random_bias (lcx/model/positions/randomized.py)
DOCUMENTS = ("stream", "long")  # eval.documents (lcx/tools/evaluate/samples.py)
# train.trackers' names (lcx/run/metrics.py's WRITERS open them; metrics.jsonl is always written)
# -> the package each needs beyond lcx's own, which the pip extra of that name installs.
TRACKERS = {"tensorboard": "", "wandb": "wandb"}


def items(text: str) -> list[str]:
  """'windows, sliding' -> ['windows', 'sliding']: a comma list field's names."""
  return [x.strip() for x in str(text).split(",") if x.strip()]


def _in_unit(v) -> bool:
  return 0 <= v < 1


def _names(allowed, *, empty: bool = False):
  """A comma list of names from `allowed` (at least one unless `empty`)."""
  return lambda v: (empty or bool(items(v))) and set(items(v)) <= set(allowed)


TRAIN = Section(
  "optimizer, schedule, checkpoints",
  (
    Field(
      "steps",
      2000,
      "optimizer steps in all",
      at_least(1),
      ">= 1 to train (--mode=eval evaluates alone)",
    ),
    Field(
      "stop_after",
      0,
      ">0: this invocation stops (with a checkpoint) at that step",
      at_least(0),
      ">= 0 (0: run to train.steps)",
    ),
    Field("lr", 1e-3, "peak learning rate (AdamW)", positive, "> 0"),
    Field("min_lr", 5e-5, "learning rate at the end of the decay", at_least(0), ">= 0"),
    Field("warmup_steps", 100, "linear warmup from 0", at_least(0), ">= 0"),
    Field("decay", "cosine", "cosine | linear | constant", allowed=DECAYS),
    Field("b1", 0.9, "AdamW beta1", _in_unit, "in [0, 1)"),
    Field("b2", 0.98, "AdamW beta2", _in_unit, "in [0, 1)"),
    Field("weight_decay", 0.1, "on matrices only", at_least(0), ">= 0"),
    Field(
      "clip_norm", 1.0, "global gradient-norm clip (0: none)", at_least(0), ">= 0 (0: no clipping)"
    ),
    Field(
      "random_positions",
      0,
      ">0: Ruoss 2023 randomized positions from [0, this)",
      at_least(0),
      ">= 0 (0: off)",
    ),
    Field(
      "random_bias",
      "distances",
      "with random_positions, a distance-only bias's input: sorted distances | sorted positions",
      lambda v: v in RANDOM_BIAS,
      f"one of {RANDOM_BIAS}",
    ),
    Field(
      "pose_target",
      0,
      ">0: PoSE (Zhu 2024) positions toward this length (not with random_positions)",
    ),
    Field("log_every", 50, "steps between metric lines", at_least(1), ">= 1"),
    Field(
      "trackers",
      "tensorboard",
      "trackers besides WORKDIR/metrics.jsonl, comma-separated: tensorboard | wandb",
      _names(TRACKERS, empty=True),
      f"comma-separated names from {', '.join(TRACKERS)}, or '' (metrics.jsonl only)",
    ),
    Field("wandb_project", "lcx", "the W&B project (the run is named after the workdir)"),
    Field("checkpoint_every", 500, "steps between checkpoints", at_least(1), ">= 1"),
    Field("keep_checkpoints", 3, "interval checkpoints kept", at_least(1), ">= 1"),
    Field(
      "resume_step",
      0,
      ">0: resume from this checkpoint step, not the latest (later steps are set aside)",
      at_least(0),
      ">= 0 (0: the latest checkpoint)",
    ),
    Field(
      "allow_changes",
      "",
      "comma list of schedule fields a resume may change, from the resumed step on",
      _names(changes.SCHEDULE_FIELDS, empty=True),
      f"comma-separated names from {', '.join(changes.SCHEDULE_FIELDS)}, or '' (none)",
    ),
    Field(
      "init_from",
      "",
      "DIR[@STEP]: a fresh run starts from another run's parameters with a fresh optimizer",
    ),
    Field(
      "init_from_any_scheme",
      False,
      "True: init_from may change model.position.name and model.attention.temperature (DroPE)",
    ),
    Field(
      "scaling_file",
      "",
      'a JSON file whose RoPE scaling replaces model.position.scaling ("": off)',
    ),
    Field(
      "eval_every",
      0,
      ">0: score eval.during_train lengths every N steps",
      at_least(0),
      ">= 0 (0: off)",
    ),
  ),
)

BETA_FIT = Section(
  "beta@fit (lcx/tools/evaluate/beta_fit.py): DroPE's temperature with C fitted per variant",
  (
    Field("fitted", False, "set by the fit: C was fitted, not given"),
    Field(
      "grid",
      (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0),
      "the values of C tried",
      lambda v: len(v) >= 1 and all(isinstance(c, (int, float)) and c >= 0 for c in v),
      "a tuple of one or more numbers >= 0 (the values of C tried)",
    ),
    Field("seed", 1009, "the held-out draw the fit scores on", at_least(0), ">= 0"),
  ),
)

LONGROPE = Section(
  "the LongRoPE search (`./launch.sh longrope`, lcx/tools/longrope.py)",
  (
    Field(
      "target_len",
      0,
      "the length searched for (s = this / L); 0: off",
      at_least(0),
      ">= 0 (0: off)",
    ),
    Field(
      "documents", 8, "long documents of the search split (never evaluated)", at_least(1), ">= 1"
    ),
    Field("seed", 1, "which documents, and every random choice of the search", at_least(0), ">= 0"),
    Field(
      "population",
      64,
      "first generation: PI, NTK, YaRN and their mutations",
      at_least(3),
      ">= 3 (the seeds PI, NTK and YaRN)",
    ),
    Field(
      "parents",
      32,
      "the best kept each generation (elitism), parents of the rest",
      at_least(1),
      ">= 1",
    ),
    Field("mutations", 16, "children by mutation per generation", at_least(0), ">= 0"),
    Field("crossovers", 16, "children by crossover per generation", at_least(0), ">= 0"),
    Field(
      "generations",
      40,
      "raise it and run again to continue a finished search",
      at_least(0),
      ">= 0",
    ),
    Field(
      "mutation_rate",
      0.3,
      "each pair (and n_hat) resampled with this chance",
      lambda v: 0 < v <= 1,
      "in (0, 1]",
    ),
    Field(
      "crossover_rate",
      0.5,
      "each pair taken from the second parent",
      lambda v: 0 < v < 1,
      "in (0, 1)",
    ),
    Field("step", 0.01, "the grid mutations draw lambda from", positive, "> 0"),
    Field(
      "max_factor",
      0.0,
      "the largest lambda; 0: 1.25 s (the paper's space)",
      lambda v: v == 0 or v >= 1,
      "0 (1.25 x the scale) or >= 1",
    ),
    Field("search_n_hat", True, "False: n_hat = 0 (every position scaled)"),
  ),
)

PASSKEY = Section(
  "passkey retrieval through generation (lcx/tools/evaluate/passkey.py), text runs only",
  (
    Field(
      "lengths",
      (),
      "prompt lengths in tokens (empty: off)",
      lambda v: numbers(v, at_least(1)),
      "prompt lengths in tokens, >= 1 (empty: off)",
    ),
    Field(
      "depths",
      (0.0, 0.25, 0.5, 0.75, 1.0),
      "needle depths",
      lambda v: len(v) >= 1 and numbers(v, lambda d: 0 <= d <= 1),
      "at least one depth, each in [0, 1]",
    ),
    Field("examples", 8, "keys per length and depth", at_least(1), ">= 1"),
    Field("digits", 5, "digits of each key", lambda v: 1 <= v <= 18, "in [1, 18]"),
    Field("seed", 0, "which keys", at_least(0), ">= 0"),
  ),
)

EVAL = Section(
  "evaluation by length (lcx/tools/evaluate/)",
  (
    Field(
      "multipliers",
      (1, 2, 4, 8),
      "eval lengths as multiples of the training length L",
      lambda v: numbers(v, positive),
      "positive numbers",
    ),
    Field(
      "lengths",
      (),
      "explicit eval lengths; override multipliers when set",
      lambda v: numbers(v, at_least(1)),
      ">= 1 each",
    ),
    Field(
      "protocol",
      "windows",
      "how windows are cut (lcx/tools/evaluate/samples.py): windows | sliding | last_k",
      _names(protocols.PROTOCOLS),
      f"{', '.join(protocols.PROTOCOLS)}, or several comma-separated",
    ),
    Field(
      "documents",
      "stream",
      "stream (concatenated as training packs them) | long (each long document on its own)",
      _names(DOCUMENTS),
      f"{', '.join(DOCUMENTS)}, or both comma-separated",
    ),
    Field(
      "stride",
      0,
      "sliding: tokens scored per window after the first (0: L)",
      at_least(0),
      ">= 0 (0: the training length)",
    ),
    Field(
      "last_k",
      0,
      "last_k: tokens scored at each document prefix's end (0: L / 4)",
      at_least(0),
      ">= 0 (0: a quarter of the training length)",
    ),
    Field("num_tokens", 65536, "validation tokens scored at every length", at_least(1), ">= 1"),
    Field(
      "sample_seed",
      0,
      "which validation documents (a seeded draw across the split)",
      at_least(0),
      ">= 0",
    ),
    Field(
      "random_positions",
      -1,
      ">0: score at randomized positions from [0, this); 0: 0..n-1; -1: as trained",
    ),
    Field(
      "bootstrap",
      1000,
      "resamples of documents for 95% confidence intervals (0: none)",
      at_least(0),
      ">= 0 (0: no confidence intervals)",
    ),
    Field("buckets_per_octave", 4, "loss-by-position buckets, log-spaced", at_least(1), ">= 1"),
    Field(
      "longppl", False, "LongPPL (Fang et al. 2025) per length past L: ~4x the scoring compute"
    ),
    Field("batch_tokens", 16384, "tokens per forward pass", at_least(1), ">= 1"),
    Field("chunked_from", 4096, "lengths >= this use the chunked kernel", at_least(1), ">= 1"),
    Field(
      "variants",
      "none",
      "comma list of extension methods evaluated on one checkpoint (lcx/config/variants.py)",
    ),
    Field("beta_fit", BETA_FIT, BETA_FIT.doc),
    Field("named_variants", ml_collections.ConfigDict, "name -> {dotted.field: value}"),
    Field(
      "during_train",
      (1, 4),
      "train.eval_every: these multiples of L",
      lambda v: numbers(v, positive),
      "positive numbers",
    ),
    Field(
      "during_train_tokens",
      8192,
      "train.eval_every: tokens scored per length",
      at_least(1),
      ">= 1",
    ),
    Field("longrope", LONGROPE, LONGROPE.doc),
    Field("passkey", PASSKEY, PASSKEY.doc),
  ),
)

MESH = Section(
  "devices per mesh axis (-1: the rest)",
  (
    Field("data", -1, "devices on the data axis (-1: the rest)"),
    Field("fsdp", 1, "devices on the fsdp axis (-1: the rest)"),
    Field("tensor", 1, "devices on the tensor axis (-1: the rest)"),
  ),
)

SHARDING = Section(
  "mesh axes each logical axis is sharded over (comma list; empty: replicated)",
  tuple(
    Field(axis, mesh_axes, f"mesh axes the {axis} axis is sharded over (empty: replicated)")
    for axis, mesh_axes in (
      ("batch", "data,fsdp"),
      ("vocab", "tensor"),
      ("embed", "fsdp"),
      ("heads", "tensor"),
      ("kv_heads", "tensor"),
      ("head_dim", ""),
      ("mlp", "tensor"),
    )
  ),
)

# Every field of the config, in the order it lists them.
CONFIG = Section(
  "an experiment's config",
  (
    Field(
      "seed",
      0,
      "parameter init and sampled training positions (data.seed: data order)",
      at_least(0),
      ">= 0",
    ),
    Field("data", data_config.DATA, data_config.DATA.doc),
    Field("model", options.MODEL, options.MODEL.doc),
    Field("train", TRAIN, TRAIN.doc),
    Field("eval", EVAL, EVAL.doc),
    Field("mesh", MESH, MESH.doc),
    Field("sharding", SHARDING, SHARDING.doc),
  ),
)
