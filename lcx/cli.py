"""Command-line plumbing shared by the entry points. Nothing here imports jax, so the light
entry points (report, sweep) can use it; the config-file helpers serve the jax ones (lcx.main,
lcx.tools.longrope), which start from a run's own config the same way."""

from __future__ import annotations

import contextlib
import math
import os
import pathlib
import re
import signal
import sys
import threading
import traceback
from typing import Callable

from absl import flags

from lcx import errors

# `--config=RUN_CONFIG:WORKDIR` is a run's own config (lcx/config/run_config.py's get_config),
# named by path so that this module need not import it (and jax).
RUN_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config", "run_config.py")
# --distributed (lcx.run.sharding): call jax.distributed.initialize() without arguments when a
# cluster is detected (auto), always (on) or never (off). Here, so the flag is defined before jax
# loads.
DISTRIBUTED_MODES = ("auto", "on", "off")
OVERRIDE = re.compile(r"^--?(?:no)?config\.([^=]+)")
# Where a relative `configs/...` or `experiments/...` not found in the caller's directory is
# looked for: the installed package (a wheel ships configs/ as lcx/configs/), then the checkout.
SHIPPED = (pathlib.Path(__file__).resolve().parent, pathlib.Path(__file__).resolve().parents[1])


# Flags that name a directory lcx creates: an existing file there is refused at parse time.
DIRECTORY_FLAGS = ("workdir", "runs_dir")


def fail(message: str, status: int = 2):
  """Exits after one `error: ...` line, no traceback: the user's input was bad (status 2)."""
  print(f"error: {' '.join(str(message).split())}", file=sys.stderr, flush=True)
  sys.exit(status)


def parse_flags(argv):
  """absl's flag parsing (for app.run's flags_parser), each error as one `error:` line."""
  try:
    rest = flags.FLAGS(argv)
  except flags.Error as error:
    fail(str(error))
  check_directory_flags()
  return rest


def check_directory_flags() -> None:
  """Fails naming the first of DIRECTORY_FLAGS that names an existing file."""
  for name in DIRECTORY_FLAGS:
    value = flags.FLAGS[name].value if name in flags.FLAGS else None
    error = value and errors.not_a_directory(f"--{name}", value)
    if error:
      fail(str(error))


def config_arguments(argv) -> list[str | None]:
  """Every --config=PATH[:ARGS] (or --config PATH) value, in order."""
  return [
    arg.split("=", 1)[1] if "=" in arg else (argv[i + 1] if i + 1 < len(argv) else None)
    for i, arg in enumerate(argv)
    if re.match(r"^--?config(=|$)", arg)
  ]


def config_argument(argv) -> str | None:
  """The last --config=PATH[:ARGS] (or --config PATH) value; absl keeps the last too."""
  return ([None] + config_arguments(argv))[-1]


def shipped(path: str) -> str:
  """`path` itself when it exists where the user ran the command (or is absolute); else lcx's
  own file of that name (configs/base.py, experiments/NAME), so the docs' commands work
  from any directory while outputs stay relative to the caller's directory."""
  if not path or os.path.isabs(path) or os.path.exists(path):
    return path
  for home in SHIPPED:
    if (home / path).exists():
      return str(home / path)
  return path


def with_shipped_config(argv):
  """--config=PATH[:ARGS] with PATH resolved by `shipped`."""
  out = list(argv)
  for i, arg in enumerate(out):
    match = re.match(r"^(--?config=)([^:]*)(.*)$", arg)
    if match:
      out[i] = match[1] + shipped(match[2]) + match[3]
    elif re.match(r"^--?config$", arg) and i + 1 < len(out):
      path, sep, rest = out[i + 1].partition(":")
      out[i + 1] = shipped(path) + sep + rest
  return out


def with_run_config(argv):
  """Adds --config=lcx/config/run_config.py:WORKDIR when --config is absent and WORKDIR is a run."""
  if config_argument(argv) is not None:
    return argv
  workdir = None
  for i, arg in enumerate(argv):
    if arg.startswith("--workdir="):
      workdir = arg.split("=", 1)[1]
    elif arg == "--workdir" and i + 1 < len(argv):
      workdir = argv[i + 1]
  if workdir and os.path.exists(os.path.join(workdir, "config.json")):
    return [argv[0], f"--config={RUN_CONFIG}:{workdir}", *argv[1:]]
  return argv


def field_path_error(config, dotted: str) -> str | None:
  """`train.lrr is not a known field; allowed: ...` for a path `config` lacks, else None."""
  import ml_collections

  node, walked = config, []
  for key in dotted.split("."):
    if not isinstance(node, ml_collections.ConfigDict) or key not in node:
      allowed = node.keys() if isinstance(node, ml_collections.ConfigDict) else []
      return str(errors.unknown_field(".".join([*walked, key]), allowed))
    node, walked = node[key], [*walked, key]
  return None


def leaves(config, prefix: str = "") -> list[tuple[str, object]]:
  """(dotted field, value) of every leaf of a ConfigDict, in its order (an empty sub-dict, such
  as eval.named_variants, is a leaf)."""
  import ml_collections

  out = []
  for key, value in config.items():
    if isinstance(value, ml_collections.ConfigDict) and len(value):
      out += leaves(value, f"{prefix}{key}.")
    else:
      out.append((f"{prefix}{key}", value))
  return out


def _unknown_flag_hint(name: str, path: str | None) -> str:
  """`; did you mean --config.train.steps?` for a flag named like a config field."""
  if path is None:
    return ""
  try:
    fields = [field for field, _ in leaves(flags.FLAGS["config"].parser.parse(path))]
  except Exception:  # a config that does not load: its own error comes with --config.*
    return ""
  return errors.did_you_mean(name, fields, prefix="--config.")


def explain(error: Exception, argv) -> str:
  """The error's text, with four rewordings: an unknown --config.PATH names the section that
  lacks it and what it has; an unknown flag named like a config field suggests it; an override
  before --config says to reorder; an error in get_config() drops the traceback ml_collections
  adds."""
  path = config_argument(argv)
  if isinstance(error, flags.UnrecognizedFlagError):
    return f"{error}{_unknown_flag_hint(error.flagname, path)}"
  if isinstance(error, (AttributeError, KeyError)) and path:
    config = flags.FLAGS["config"].parser.parse(path)
    for match in filter(None, map(OVERRIDE.match, argv)):
      message = field_path_error(config, match.group(1))
      if message:
        return message
  if "before a value for --config was specified" in str(error):  # ml_collections' FlagOrderError
    return f"{error}; give --config={path} first, then the --config.FIELD=VALUE overrides"
  if "Error whilst parsing config file" in str(error):
    root = error
    while root.__cause__ or root.__context__:
      root = root.__cause__ or root.__context__
    return f"--config={path}: {root}"
  return str(error)


def given_overrides(argv) -> dict[str, list[str | None]]:
  """{dotted field: its values in order} of every --config.FIELD=VALUE (or --config.FIELD
  VALUE)."""
  out: dict[str, list[str | None]] = {}
  for i, arg in enumerate(argv):
    match = OVERRIDE.match(arg)
    if match:
      value = arg.split("=", 1)[1] if "=" in arg else (argv[i + 1 :] or [None])[0]
      out.setdefault(match.group(1), []).append(value)
  return out


def overrides(argv) -> dict[str, str | None]:
  """{dotted field: value} of every --config.FIELD=VALUE (or --config.FIELD VALUE), the last
  of each field winning as absl's does."""
  return {field: values[-1] for field, values in given_overrides(argv).items()}


def last_tuple_wins(argv) -> None:
  """A tuple field given more than once takes its last value, as every other flag does:
  ml_collections joins a tuple's repetitions (`(1,2)` then `(4,)` was `(1, 2, 4)`)."""
  for field, values in given_overrides(argv).items():
    name = f"config.{field}"
    flag = flags.FLAGS[name] if name in flags.FLAGS else None
    if len(values) > 1 and isinstance(flag, flags.MultiFlag):
      from ml_collections.config_flags import config_path

      flag.value = list(flag.parser.parse(values[-1]))
      config_path.set_value(field, flags.FLAGS.config, tuple(flag.value))


def select_sections(config, argv):
  """`config` with each section picked by name on the command line (`--config.model.remap.name=
  self_extend`) replaced by that name's fields and defaults, so that the section's own fields
  (`--config.model.remap.window=64`) exist when ml_collections applies the overrides. A section
  already of that name keeps its values; an unknown name is left for the checks to name."""
  import ml_collections

  from lcx.config import defaults  # the sections a name picks whole (jax: lazily)

  if not isinstance(config, ml_collections.ConfigDict):
    return config  # a config file that failed to load: its error surfaces on first read
  given = overrides(argv)
  for section, default_config in defaults.SECTIONS.items():
    name = given.get(f"{section}.name")
    *parents, leaf = section.split(".")
    node = config
    for key in parents:
      node = node[key] if key in node else None
      if node is None:
        break
    if node is None or leaf not in node or name is None or node[leaf].get("name") == name:
      continue
    try:
      node[leaf] = default_config(name)
    except ValueError:
      continue  # not a registered name: the config checks refuse it, naming the field
    node[leaf].lock()
  return config


class ConfigFileError(Exception):
  """The user's config file raised while it loaded (a syntax error, a NameError in it): one
  line naming the file and line, instead of a traceback through importlib and absl."""


def _file_error(path: str, error: Exception) -> ConfigFileError:
  if isinstance(error, SyntaxError):
    where, what = f"{error.filename}:{error.lineno}", f"{error.msg}: {(error.text or '').strip()}"
  else:
    frame = traceback.extract_tb(error.__traceback__)[-1]
    where, what = f"{frame.filename}:{frame.lineno}", f"{type(error).__name__}: {error}"
  return ConfigFileError(f"--config={path}: {where}: {what}")


def _non_finite_literal(text: str):
  """`text` as a Python literal in which inf and nan (any case, signed) are floats."""
  import ast

  class Floats(ast.NodeTransformer):
    def visit_Name(self, node):
      return ast.Constant(float(node.id)) if node.id.lower() in ("inf", "nan") else node

  return ast.literal_eval(Floats().visit(ast.parse(text.strip(), mode="eval")))


def read_non_finite_tuples() -> None:
  """Makes a tuple override read inf and nan as floats, so that the finite-number check names
  them: ml_collections' literal_eval knows neither, and kept `(1,inf)` as the one string
  '(1,inf)' (an error then showed `('(1,inf)',)`)."""
  from ml_collections.config_flags import config_flags, tuple_parser

  class Parser(tuple_parser.TupleParser):
    def parse(self, argument):
      if isinstance(argument, str) and re.search(r"(?i)\b(inf|nan)\b", argument):
        try:
          return super().parse(_non_finite_literal(argument))
        except (ValueError, SyntaxError):
          pass  # not a literal with them: as ml_collections reads it
      return super().parse(argument)

  config_flags.register_flag_parser_for_type(tuple, Parser())


def select_sections_on_parse(argv, flag_values=None) -> None:
  """Makes the --config flag's parser (of `flag_values`, default absl's FLAGS) apply
  `select_sections` to each config it loads, and word an error of the file as one line."""
  parser = (flag_values or flags.FLAGS)["config"].parser
  load = type(parser).parse.__get__(parser)

  def parse(path):
    try:
      config = load(path)
    except (OSError, TypeError, ValueError):
      raise  # ml_collections' own: a missing file raises when read, the rest `explain` words
    except Exception as error:
      raise _file_error(path, error) from None
    return select_sections(config, argv)

  parser.parse = parse


def non_finite_flag() -> str | None:
  """`--temperature=nan is not allowed; ...` for the first float flag holding NaN or inf."""
  for name, value in flags.FLAGS.flag_values_dict().items():
    if isinstance(value, float) and not math.isfinite(value):
      return str(errors.not_allowed(f"--{name}", value, "a finite number"))
  return None


def parse_config_flags(argv, missing: Callable[[], str] | None):
  """absl's flag parsing for an entry point with a `--config` file flag (ml_collections) and
  `--workdir`: without --config, a run's own WORKDIR/config.json is the config; `missing()` is
  the error when there is neither (None: --config is optional). Each error (config file,
  override, type) is one line."""
  argv = with_run_config(with_shipped_config(argv))
  given = config_arguments(argv)
  if len(given) > 1:
    fail(f"--config is given {len(given)} times ({', '.join(map(str, given))}); give it once")
  select_sections_on_parse(argv)
  read_non_finite_tuples()
  try:
    rest = flags.FLAGS(argv)
    check_directory_flags()
    message = non_finite_flag()
    if message:
      fail(message)
    if flags.FLAGS.config is None:
      if missing is not None:
        fail(missing())
      return rest
    flags.FLAGS.config.keys()  # a missing config file raises only when the config is first read
    last_tuple_wins(argv)
    return rest
  except (flags.Error, AttributeError, KeyError, ValueError, OSError) as error:
    fail(explain(error, argv))
  except ConfigFileError as error:
    fail(str(error))


@contextlib.contextmanager
def sigint_exits(message: str):
  """Ctrl-C ends the process at once with `message` on one line, exit status 130, even while
  the main thread waits in a long XLA compilation or computation (a Python handler would run
  only when that returns): a thread waits on the signal's wakeup fd. For work whose results are
  written atomically as they finish (evaluation), so stopping anywhere loses only the current
  one."""
  read_fd, write_fd = os.pipe()
  os.set_blocking(write_fd, False)
  previous = signal.signal(signal.SIGINT, lambda *_: None)  # the wakeup fd needs a handler
  previous_fd = signal.set_wakeup_fd(write_fd)

  def watch():
    while True:
      received = os.read(read_fd, 64)
      if not received:  # the block ended: the write end was closed
        return
      if signal.SIGINT in received:
        print(message, file=sys.stderr, flush=True)
        os._exit(128 + signal.SIGINT)

  watcher = threading.Thread(target=watch, daemon=True)
  watcher.start()
  try:
    yield
  finally:
    signal.set_wakeup_fd(previous_fd)
    signal.signal(signal.SIGINT, previous)
    os.close(write_fd)
    watcher.join()
    os.close(read_fd)
