"""The model options' allowed values, declared without jax: lcx.config checks a run's fields
against them before jax is imported, and the modules that implement each option (attention,
temperature, gating, kernels, model) read them from here, below both, so no import cycle forms."""

SINKS = ("none", "learned")  # model.attention.sink (lcx/model/attention.py's _softmax)
DTYPES = ("float32", "bfloat16")  # model.dtype (lcx/model/decoder.py's DTYPES)
TEMPERATURES = ("none", "log_n", "ssmax", "scale_invariant", "llama4")  # lcx/model/temperature.py
SSMAX_N = ("keys", "position")  # model.attention.ssmax_n: what SSMax's n counts
GATES = ("none", "elementwise", "headwise")  # model.attention.gate (lcx/model/gating.py's GATES)
KINDS = ("softmax", "stick_breaking")  # model.attention.kind: which attend the kernels run
IMPLS = ("auto", "xla", "pallas")  # model.attention.impl (lcx/model/kernels/impl.py)
# model.qk_norm_over: one RMSNorm per head (Qwen 3, Gemma 3) | one over all heads' features at once
# (OLMo 2; the DroPE reference's recalibration), each with a learned scale from 1
QK_NORM_OVER = ("head", "heads")
# model.remat: what the backward pass recomputes (lcx/model/decoder.py's REMAT_POLICIES):
#   none     nothing: autodiff keeps every intermediate it needs
#   block    everything: each block keeps only its input and runs again in the backward
#   matmuls  the elementwise steps: each block keeps its matmuls' outputs (q, k, v, the
#            attention's output and log-sum-exp, the output projection, the MLP's
#            pre-activations: decoder.KEPT) and recomputes the norms, the rotations (no rotated q
#            or k is kept), the MLP's activation and, on the XLA path, the T x T probabilities
REMATS = ("none", "block", "matmuls")


def is_block_size(value) -> bool:
  """A power of two >= 1 (the GPU lowering's block shapes): model.attention.block_size."""
  return (
    isinstance(value, int)
    and not isinstance(value, bool)
    and value >= 1
    and not value & (value - 1)
  )
