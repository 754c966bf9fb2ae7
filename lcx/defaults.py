"""Every config field with its default: a 4-layer d=256 byte-level decoder on the Python
standard library. `configs/base.py:pos=alibi,size=tiny` is `get_config("pos=alibi,size=tiny")`;
the package builds its own configs here (never from the top-level `configs/`), so an installed
lcx works from any directory. `pos` picks the position scheme, so its config sub-dict comes with
every field and default.
"""

import ml_collections

from lcx import errors
from lcx.model import patterns
from lcx.model.positions import fields  # the schemes' and remaps' fields, declared without jax
from lcx.run import data

# Sections picked whole by name, replaced by that name's fields and defaults: on the command line
# (`--config.model.remap.name=X`, lcx.cli.select_sections) and by a variant (lcx.variants).
SECTIONS = {
  "model.remap": fields.remap_config,
  "model.attention.pattern": patterns.default_config,
}

SIZES = {  # d_model, num_layers, num_heads, mlp_dim
  "tiny": (64, 2, 4, 256),
  "small": (128, 4, 4, 512),
  "default": (256, 4, 4, 1024),
  "large": (512, 8, 8, 2048),
}


def parse_arg(arg, **defaults):
  """'pos=alibi,size=small' -> ConfigDict over `defaults`; unknown keys fail loudly."""
  out = ml_collections.ConfigDict(defaults)
  for kv in filter(None, (arg or "").split(",")):
    key, _, value = kv.partition("=")
    if key not in defaults:
      raise errors.unknown_field(f"config argument {key}", defaults)
    out[key] = type(defaults[key])(value)
  return out


def get_config(arg=None):
  arg = parse_arg(arg, pos="rope", size="default")
  if arg.size not in SIZES:
    raise errors.not_allowed("config argument size", arg.size, SIZES)
  d_model, num_layers, num_heads, mlp_dim = SIZES[arg.size]

  config = ml_collections.ConfigDict()
  config.seed = 0  # parameter init and sampled training positions (data.seed: data order)
  config.data = data.default_config()  # the corpus, tokenizer and rows (lcx/run/data/config.py)

  # The decoder: every field but the eval-time ones (lcx/variants.py) is trained.
  config.model = ml_collections.ConfigDict()
  config.model.vocab_size = 0  # 0: the tokenizer's vocabulary size
  config.model.d_model = d_model  # residual width (size=)
  config.model.num_layers = num_layers  # decoder blocks (size=)
  config.model.num_heads = num_heads  # query heads (size=)
  config.model.num_kv_heads = num_heads  # fewer for grouped-query attention
  config.model.head_dim = d_model // num_heads  # features per head
  config.model.mlp = "gelu"  # gelu | swiglu
  config.model.mlp_dim = mlp_dim  # MLP hidden width (size=)
  config.model.tie_embeddings = False  # True: the output layer reuses the input embedding
  config.model.dtype = "float32"  # compute dtype; parameters stay float32
  # none | block | matmuls: keep every activation for the backward pass; only each block's input
  # and recompute the block (least memory, about a third more compute); or each block's matmul
  # outputs and recompute the elementwise steps between them: norms, rotated q and k, activations
  # (lcx/options.py REMATS)
  config.model.remat = "none"
  config.model.norm_eps = 1e-6  # RMSNorm epsilon
  config.model.qk_norm = False  # True: RMSNorm (learned scale) on q and k per head, before RoPE
  # head: each head's q and k normalized on their own (Qwen 3, Gemma 3) | heads: all heads'
  # features at once, one scale per feature (OLMo 2; the DroPE reference's recalibration).
  config.model.qk_norm_over = "head"
  config.model.max_len = config.data.get_ref("seq_len")  # the training length L
  # The position scheme picked by pos=, with its fields.
  config.model.position = fields.default_config(arg.pos)
  # A training-free position remap; --config.model.remap.name=X brings X's fields.
  config.model.remap = fields.remap_config("none")
  # Per-layer schedule (lcx/model/decoder.py): every nope_every-th block without positions (0:
  # none), and the other blocks attending only to the last position_window keys (0: all).
  config.model.nope_every = 0
  config.model.position_window = 0
  config.model.attention = ml_collections.ConfigDict()  # the attention kernel and its options
  # A sparse attention pattern; --config.model.attention.pattern.name=X brings X's fields.
  config.model.attention.pattern = patterns.default_config("dense")
  config.model.attention.chunk_size = 512  # query chunk of the chunked kernel
  # Logit temperature (lcx/model/temperature.py): none | log_n | ssmax | scale_invariant | llama4
  # (trained; scale_invariant's length scale tau: si_tau, the paper's 10), and C of the
  # eval-time factor 1 + C ln(T/L) past the training length (variant beta@C; 0: off).
  config.model.attention.temperature = "none"
  config.model.attention.si_tau = 10.0
  config.model.attention.beta_c = 0.0
  # SSMax's n: keys (the keys each query sees, the paper's) | position (position + 1).
  config.model.attention.ssmax_n = "keys"
  config.model.attention.sink = "none"  # none | learned: a per-head sink logit (gpt-oss)
  # none | elementwise | headwise: a sigmoid gate from the block input on each head's output
  # (gated attention, lcx/model/gating.py; elementwise is the paper's best).
  config.model.attention.gate = "none"
  # softmax | stick_breaking (lcx/model/stick_breaking.py: each query breaks a stick over its keys
  # from the nearest back, weights summing to <= 1; no sink).
  config.model.attention.kind = "softmax"
  # auto | xla | pallas (lcx/model/kernels/impl.py): auto runs the Pallas flash kernel on GPU, the
  # XLA kernels on CPU and TPU; block_size: the Pallas kernel's query and key block (a power of
  # two).
  config.model.attention.impl = "auto"
  config.model.attention.block_size = 128
  # stick_breaking only: the stick's remainder times a learned vector per head (from 0) joins
  # the output, as the reference model's `rem * head_bias`; False: the remainder goes nowhere.
  config.model.attention.remainder_bias = True

  config.train = ml_collections.ConfigDict()  # optimizer, schedule, checkpoints
  config.train.steps = 2000  # optimizer steps in all
  config.train.stop_after = 0  # >0: this invocation stops (with a checkpoint) at that step
  config.train.lr = 1e-3  # peak learning rate (AdamW)
  config.train.min_lr = 5e-5  # learning rate at the end of the decay
  config.train.warmup_steps = 100  # linear warmup from 0
  config.train.decay = "cosine"  # cosine | linear | constant
  config.train.b1 = 0.9  # AdamW beta1
  config.train.b2 = 0.98  # AdamW beta2
  config.train.weight_decay = 0.1  # on matrices only
  config.train.clip_norm = 1.0  # global gradient-norm clip (0: none)
  config.train.random_positions = 0  # >0: Ruoss 2023 randomized positions from [0, this)
  # With random_positions, a distance-only bias (ALiBi, T5, KERPLE, Sandwich): distances
  # (the paper's sorted distances, offset k -> the k-th) | positions (sorted positions).
  config.train.random_bias = "distances"
  # >0: PoSE (Zhu 2024) positions toward this length: each document's positions in two chunks,
  # the second shifted by a random skip, all below this (not with random_positions).
  config.train.pose_target = 0
  config.train.log_every = 50  # steps between metric lines
  # Trackers besides WORKDIR/metrics.jsonl, comma-separated: tensorboard | wandb. tensorboard:
  # event files in WORKDIR/tensorboard; wandb: Weights & Biases (the `wandb` extra; under
  # WANDB_MODE=offline, files in WORKDIR/wandb). Each gets training curves, evaluation during
  # training and the final evaluation.
  config.train.trackers = "tensorboard"
  config.train.wandb_project = "lcx"  # the W&B project (the run is named after the workdir)
  config.train.checkpoint_every = 500  # steps between checkpoints
  config.train.keep_checkpoints = 3  # interval checkpoints kept
  # >0: resume from this checkpoint step, not the latest (e.g. the one before an unreadable
  # checkpoint); the later steps are moved to WORKDIR/checkpoints_set_aside/, not deleted (a
  # step number set aside again is kept beside the earlier one, as STEP.1, STEP.2, ...).
  config.train.resume_step = 0
  # Comma list of schedule fields a resume may change (train.steps, lr, min_lr, warmup_steps,
  # decay), from the resumed step on; each change is recorded in WORKDIR/config_history.jsonl.
  # Any other trained field (seed, data.*, model.*, ...) never changes on resume
  # (lcx/run/resume.py); eval, logging and checkpoint settings change freely.
  config.train.allow_changes = ""

  # DIR[@STEP]: a fresh run starts from another run's parameters (latest step, or STEP) with a
  # fresh optimizer and schedule: fine-tuning at a new data.seq_len / position scaling.
  config.train.init_from = ""
  # True: init_from may change model.position.name and model.attention.temperature (DroPE).
  config.train.init_from_any_scheme = False
  # A JSON file whose RoPE scaling replaces model.position.scaling before anything is built: a HF
  # config.json, a bare scaling dict, or the LongRoPE search's WORKDIR/longrope/factors.json (to
  # fine-tune with searched factors). "": off.
  config.train.scaling_file = ""
  config.train.eval_every = 0  # >0: score eval.during_train lengths every N steps

  config.eval = ml_collections.ConfigDict()  # evaluation by length (lcx/tools/evaluate/)
  config.eval.multipliers = (1, 2, 4, 8)  # eval lengths as multiples of the training length L
  config.eval.lengths = ()  # explicit eval lengths; override multipliers when set
  # How windows are cut (lcx/tools/evaluate/samples.py): windows | sliding | last_k.
  config.eval.protocol = "windows"
  # Which documents: stream (documents concatenated as training packs them) | long (only
  # documents longer than the longest eval length, each scored on its own prefix).
  config.eval.documents = "stream"
  config.eval.stride = 0  # sliding: tokens scored per window after the first (0: L)
  config.eval.last_k = 0  # last_k: tokens scored at each document prefix's end (0: L / 4)
  config.eval.num_tokens = 65536  # validation tokens scored at every length
  config.eval.sample_seed = 0  # which validation documents (a seeded draw across the split)
  # >0: score at randomized positions, a sorted sample of [0, this) per document (Ruoss 2023's
  # reference samples at test time too), drawn with eval.sample_seed; 0: positions 0..n-1;
  # -1: as trained (train.random_positions, so a randomized run is scored as Ruoss et al. do).
  # Every evaluator's scoring (lcx/tools/evaluate/runner.py), not the passkey probe's generation.
  config.eval.random_positions = -1
  config.eval.bootstrap = 1000  # resamples of documents for 95% confidence intervals (0: none)
  config.eval.buckets_per_octave = 4  # loss-by-position buckets, log-spaced
  # LongPPL (Fang et al. 2025) per length past L: perplexity on the key tokens, those whose
  # loss with at most L tokens of context exceeds their loss with the whole window by > 2 nats
  # while the latter is < 2 (the paper's thresholds); ~4x the scoring compute.
  config.eval.longppl = False
  config.eval.batch_tokens = 16384  # tokens per forward pass
  config.eval.chunked_from = 4096  # lengths >= this use the chunked kernel
  # Comma list of extension methods evaluated on one checkpoint in one process
  # (lcx/variants.py): none, linear@F, ntk@F, dynamic@F, yarn@F, llama3@F,
  # longrope@PATH.json, hf@PATH.json, self_extend@W/G, rerope@W, beta@C, beta@fit, sink@S/W, or
  # a name from named_variants.
  config.eval.variants = "none"
  # beta@fit (lcx/tools/evaluate/beta_fit.py): DroPE's temperature 1 + C ln(T/L) with C fitted
  # per variant, the grid value scoring best on held-out data (a task run: examples drawn with
  # data.seed = seed, a stream the evaluation does not draw; a text run: the search split's
  # documents) past the training length; the result records every grid value's score.
  config.eval.beta_fit = ml_collections.ConfigDict(
    {"fitted": False, "grid": (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0), "seed": 1009}
  )
  config.eval.named_variants = ml_collections.ConfigDict()  # name -> {dotted.field: value}
  config.eval.during_train = (1, 4)  # train.eval_every: these multiples of L
  config.eval.during_train_tokens = 8192  # train.eval_every: tokens scored per length
  # The LongRoPE search (`./launch.sh longrope`, lcx/tools/longrope.py): per-pair rescale factors
  # lambda_i (non-decreasing, in [1, max_factor]) and n_hat for one target length, by the
  # paper's evolutionary search; writes WORKDIR/longrope/{state,factors}.json. The defaults are
  # the paper's code's (population 64, 32 parents, 16 mutations + 16 crossovers, 40
  # generations): 1,344 candidates, 7 minutes for configs/base.py:size=small at L=64 searched
  # to 256 on 2 shared CPU cores; a size=tiny model at L=32 to 128 takes under a minute
  # (docs/commands.md, "LongRoPE search").
  config.eval.longrope = ml_collections.ConfigDict()  # the LongRoPE search
  config.eval.longrope.target_len = 0  # the length searched for (s = this / L); 0: off
  config.eval.longrope.documents = 8  # long documents of the search split (never evaluated)
  config.eval.longrope.seed = 1  # which documents, and every random choice of the search
  config.eval.longrope.population = 64  # first generation: PI, NTK, YaRN and their mutations
  config.eval.longrope.parents = 32  # the best kept each generation (elitism), parents of the rest
  config.eval.longrope.mutations = 16  # children by mutation per generation
  config.eval.longrope.crossovers = 16  # children by crossover per generation
  config.eval.longrope.generations = 40  # raise it and run again to continue a finished search
  config.eval.longrope.mutation_rate = 0.3  # each pair (and n_hat) resampled with this chance
  config.eval.longrope.crossover_rate = 0.5  # each pair taken from the second parent
  config.eval.longrope.step = 0.01  # the grid mutations draw lambda from
  config.eval.longrope.max_factor = 0.0  # the largest lambda; 0: 1.25 s (the paper's space)
  config.eval.longrope.search_n_hat = True  # False: n_hat = 0 (every position scaled)
  # Passkey retrieval through generation (lcx/tools/evaluate/passkey.py), text runs only: prompt
  # lengths in tokens (empty: off) x needle depths, `examples` keys of `digits` digits each.
  config.eval.passkey = ml_collections.ConfigDict(
    {"lengths": (), "depths": (0.0, 0.25, 0.5, 0.75, 1.0), "examples": 8, "digits": 5, "seed": 0}
  )

  # Devices per mesh axis (-1: the rest).
  config.mesh = ml_collections.ConfigDict({"data": -1, "fsdp": 1, "tensor": 1})
  # Mesh axes each logical axis is sharded over (comma list; empty: replicated).
  config.sharding = ml_collections.ConfigDict(
    {
      "batch": "data,fsdp",
      "vocab": "tensor",
      "embed": "fsdp",
      "heads": "tensor",
      "kv_heads": "tensor",
      "head_dim": "",
      "mlp": "tensor",
    }
  )
  return config


def quickstart_config(arg=None):
  """A 0.8M-parameter byte model (the CPU pilot's shape) trained at L=64 for a few minutes on
  2 CPU cores; `pos` picks the scheme, `steps` the training steps, `size` the model (the
  notebooks' tests train tiny ones)."""
  arg = parse_arg(arg, pos="rope", steps=300, size="small")
  config = get_config(f"pos={arg.pos},size={arg.size}")
  config.data.seq_len = 64
  config.data.batch_size = 32
  config.train.steps = arg.steps
  config.train.warmup_steps = 50
  config.train.log_every = 50
  config.train.checkpoint_every = 100
  config.eval.num_tokens = 32768
  return config
