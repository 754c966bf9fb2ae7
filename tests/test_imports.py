"""lcx's import graph has no cycle, read statically (ast over lcx/**/*.py, nothing imported).

A node is a module (a package is its __init__.py); an edge is an import statement naming an lcx
module: `import lcx.a`, `from lcx import a`, `from lcx.a import name` (-> lcx.a), relative ones
too. Imports inside functions count as well: a deferred import hides a cycle at import time, it
does not remove it (both cycles of issue 29 were closed by one). So do a lazy package's
`importlib.import_module` calls (lcx.model.positions loads its scheme modules on first use): a
module that calls it imports every lcx module, or submodule of its own (for a package), that a
string in it names. Importing `lcx.p.m` runs the package `lcx.p`'s __init__ first, as Python does,
so it is an edge to `lcx.p` too, unless the importer is inside `lcx.p`: Python ran that __init__
before any of its modules, so `import lcx.p` there only binds it and is no edge (`from lcx.p import
name` there still is one: the name must be defined by then).

The same graph runs one way between lcx's layers (LAYERS, bottom to top): no module imports one
of a layer above its own.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

from tests.helpers import ROOT

PACKAGE = "lcx"


def modules(root: pathlib.Path = ROOT) -> dict[str, pathlib.Path]:
  """Dotted module name -> its file, for every .py file under root/lcx."""
  out = {}
  for path in sorted((root / PACKAGE).rglob("*.py")):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def _ancestors(name: str) -> list[str]:
  """The packages above a dotted module name, outermost first: lcx.p.m -> [lcx, lcx.p]."""
  parts = name.split(".")
  return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports_dynamically(tree) -> bool:
  """Whether the module calls importlib.import_module (a lazy package's __getattr__)."""
  return any(
    isinstance(node, ast.Call)
    and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
    for node in ast.walk(tree)
  )


def imports(name: str, source: str, known) -> set[str]:
  """The lcx modules that the module `name` (with `source`) imports, anywhere in its body, with
  the packages whose __init__ Python runs for them."""
  is_package = name in known and known[name].name == "__init__.py"
  package = name if is_package else name.rpartition(".")[0]
  inside = {name, *_ancestors(name)}  # packages already run when this module runs
  tree = ast.parse(source)
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      out.update(a.name for a in node.names if a.name in known and a.name not in inside)
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: up level - 1 packages from this module's package
        parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
      for alias in node.names:
        target = f"{base}.{alias.name}"
        if target in known:  # a submodule
          out.add(target)
        elif base in known:  # a name defined in the module `base`
          out.add(base)
  if _imports_dynamically(tree):
    for node in ast.walk(tree):
      if isinstance(node, ast.Constant) and isinstance(node.value, str):
        out.update(m for m in (node.value, f"{name}.{node.value}") if m in known)
  out |= {p for target in out for p in _ancestors(target) if p in known and p not in inside}
  out.discard(name)
  return out


def graph(root: pathlib.Path = ROOT) -> dict[str, set[str]]:
  known = modules(root)
  return {name: imports(name, path.read_text(), known) for name, path in known.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
  """One cycle as [a, b, ..., a] (each imports the next), or None: a depth-first search."""
  done, path, on_path = set(), [], set()

  def visit(node):
    path.append(node)
    on_path.add(node)
    for nxt in sorted(edges.get(node, ())):
      if nxt in on_path:
        return path[path.index(nxt) :] + [nxt]
      if nxt not in done:
        found = visit(nxt)
        if found:
          return found
    path.pop()
    on_path.discard(node)
    done.add(node)
    return None

  for node in sorted(edges):
    if node not in done:
      found = visit(node)
      if found:
        return found
  return None


# lcx's layers, bottom to top (issue 61): a module imports its own layer's modules and those of
# the layers below, never one above. A module is in the layer of the longest name here that is
# the module or a package above it.
LAYERS = (
  # "lcx": the package's own __init__ only; lcx.field: the Field/Section records every layer's
  # declarations use (lcx.model.options, lcx.data.config, lcx.config.fields).
  ("base", ("lcx", "lcx.errors", "lcx.files", "lcx.field")),
  ("model", ("lcx.model",)),
  ("data", ("lcx.data",)),
  (
    "config",
    (
      "lcx.config",
      "lcx.regime",
      "lcx.cli",  # parses --config: picks a section by name from lcx.config.defaults
    ),
  ),
  ("run", ("lcx.run",)),
  ("tools", ("lcx.tools",)),
  # The commands, a lower package's `python -m` ones too (they parse a whole config).
  ("entry", ("lcx.main", "lcx.command", "lcx.data.build", "lcx.data.stats")),
)

# Upward imports still there, each named with why, for the lead: (importer, imported).
UPWARD: set[tuple[str, str]] = set()


def layer_of(name: str, layers=LAYERS) -> int | None:
  """The index in `layers` of the module `name`'s layer (longest matching name), else None."""
  found = [
    (len(prefix), i)
    for i, (_, prefixes) in enumerate(layers)
    for prefix in prefixes
    if name == prefix or (prefix != PACKAGE and name.startswith(prefix + "."))
  ]
  return max(found)[1] if found else None


def upward(edges: dict[str, set[str]], layers=LAYERS) -> list[str]:
  """Each import from a lower layer to a higher one, as `importer (layer) -> imported (layer)`."""
  names = [name for name, _ in layers]
  return [
    f"{m} ({names[layer_of(m, layers)]}) -> {t} ({names[layer_of(t, layers)]})"
    for m in sorted(edges)
    for t in sorted(edges[m])
    if layer_of(t, layers) > layer_of(m, layers)
  ]


def test_every_module_has_a_layer():
  assert [m for m in graph() if layer_of(m) is None] == []


def test_imports_run_down_the_layers():
  edges = graph()
  for importer, imported in UPWARD:
    assert imported in edges[importer], f"{importer} no longer imports {imported}: drop it"
    edges[importer].discard(imported)
  assert upward(edges) == []


def test_upward_names_each_import_from_a_lower_layer_to_a_higher_one():
  layers = (("low", ("lcx.a",)), ("mid", ("lcx.p",)), ("high", ("lcx.p.top", "lcx.b")))
  edges = {"lcx.a": {"lcx.p"}, "lcx.p": {"lcx.a", "lcx.p.top"}, "lcx.p.top": {"lcx.p"}}
  edges["lcx.p.c"] = {"lcx.b", "lcx.a"}
  assert layer_of("lcx.p.c", layers) == 1 and layer_of("lcx.p.top.x", layers) == 2
  assert layer_of("lcx", layers) is None and layer_of("lcx.z", layers) is None
  assert upward(edges, layers) == [
    "lcx.a (low) -> lcx.p (mid)",
    "lcx.p (mid) -> lcx.p.top (high)",
    "lcx.p.c (mid) -> lcx.b (high)",
  ]


def test_lcx_has_no_import_cycle():
  cycle = find_cycle(graph())
  assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_module_level_deferred_and_relative_imports():
  """The graph is not vacuous: edges the tree is known to hold, and each import form."""
  edges = graph()
  assert "lcx.model.attention" in edges["lcx.model.stick_breaking"]  # from lcx import attention
  assert (
    "lcx.tools.evaluate.samples" in edges["lcx.tools.evaluate.lengths"]
  )  # from lcx.tools.evaluate import m
  assert (
    "lcx.tools.evaluate.runner" in edges["lcx.tools.evaluate"]
  )  # from lcx.tools.evaluate.runner import Runner
  assert "lcx.run.prepare" in edges["lcx.tools.generate"]  # inside main: deferred
  assert (
    "lcx.model.positions" in edges["lcx.model.attention"]
  )  # lcx.model.positions.documents runs its __init__
  assert "lcx.model.positions.randomized" in edges["lcx.model.positions"]  # importlib, on first use
  assert "lcx.data.pipeline" in edges["lcx.data"]  # importlib.import_module("lcx.data.pipeline")
  assert (
    "lcx.model.positions" not in edges["lcx.model.positions.base"]
  )  # `import lcx.model.positions` inside it
  known = {name: pathlib.Path(name.replace(".", "/") + ".py") for name in ("lcx.a", "lcx.b")}
  known["lcx.p"] = pathlib.Path("lcx/p/__init__.py")
  known["lcx.p.c"] = pathlib.Path("lcx/p/c.py")
  source = "import lcx.a\nfrom . import c\ndef f():\n  from ..b import x\n"
  assert imports("lcx.p.c2", source, known) == {"lcx.a", "lcx.p.c", "lcx.b"}
  # a submodule from outside its package: the package's __init__ too; from inside: no edge
  assert imports("lcx.a", "from lcx.p.c import x\n", known) == {"lcx.p.c", "lcx.p"}
  assert imports("lcx.p.c", "import lcx.p\nfrom lcx.p import c2\n", known) == {"lcx.p"}
  assert imports("lcx.p.c2", "import lcx.p\n", known) == set()
  lazy = (
    "import importlib\nNAMES = ('c', 'd')\ndef f(n):\n  importlib.import_module(f'lcx.p.{n}')\n"
  )
  assert imports("lcx.p", lazy, known) == {"lcx.p.c"}  # the strings naming its submodules
  assert imports("lcx.a", lazy, known) == set()  # a module's strings name no submodule of it


@pytest.mark.parametrize(
  "edges, cycle",
  [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, None),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, None),  # a diamond is no cycle
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, ["a", "b", "c", "a"]),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, ["b", "c", "b"]),
  ],
)
def test_find_cycle_names_the_cycle(edges, cycle):
  assert find_cycle(edges) == cycle
