"""Position schemes, RoPE extension methods and remaps, found by name (sparse attention
patterns, which are masks, not positions, live in lcx.model.patterns).

The flax modules load on first use of a name below (PEP 562), not on `import lcx.model.positions`,
so the jax-free declarations (`lcx.model.positions.fields`) load without jax: the configs and their
checks run before jax is imported."""

import importlib

# absolute, biases, cope, fox, nope, path and rotary register their schemes on import; remaps is
# a public sub-module. name -> the module that defines it.
_SUBMODULES = ("absolute", "biases", "cope", "fox", "nope", "path", "remaps", "rotary")
_FROM = {
  "base": (
    "SCHEMES",
    "Dims",
    "Scheme",
    "build",
    "check_eval_length",
    "default_config",
    "register",
    "spec",
    "validate",
  ),
  "biases": ("alibi_slopes", "t5_bucket"),
  "randomized": ("pose_positions", "random_distances", "randomized_positions"),
  "scaling": ("rope_frequencies",),
}


_loaded = False


def _load() -> None:
  """Imports every scheme module (registering its schemes) and binds the names above, once:
  the registries call it on every lookup, and binding again would undo a name replaced since
  (a test's monkeypatch of `positions.random_distances`)."""
  global _loaded
  if _loaded:
    return
  for name in _SUBMODULES:
    globals()[name] = importlib.import_module(f"{__name__}.{name}")
  for module, names in _FROM.items():
    loaded = importlib.import_module(f"{__name__}.{module}")
    globals()[module] = loaded
    for name in names:
      globals()[name] = getattr(loaded, name)
  _loaded = True


_NAMES = {*_SUBMODULES, *_FROM, *(n for names in _FROM.values() for n in names)}


def __getattr__(name: str):
  """Any other name raises, so `from lcx.model.positions import fields` imports that module
  alone."""
  if name not in _NAMES:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  _load()
  return globals()[name]
