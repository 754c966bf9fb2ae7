"""lcx's import graph has no cycle, read statically (ast over lcx/**/*.py, nothing imported).

A node is a module (a package is its __init__.py); an edge is an import statement naming an lcx
module: `import lcx.a`, `from lcx import a`, `from lcx.a import name` (-> lcx.a), relative ones
too. Imports inside functions count as well: a deferred import hides a cycle at import time, it
does not remove it (both cycles of issue 29 were closed by one). The parent packages Python
also runs for `from lcx.p import m` are not edges: every submodule would then close a cycle
with a package __init__ that imports it.
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


def imports(name: str, source: str, known) -> set[str]:
  """The lcx modules that the module `name` (with `source`) imports, anywhere in its body."""
  is_package = name in known and known[name].name == "__init__.py"
  package = name if is_package else name.rpartition(".")[0]
  out = set()
  for node in ast.walk(ast.parse(source)):
    if isinstance(node, ast.Import):
      out.update(alias.name for alias in node.names if alias.name in known)
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


def test_lcx_has_no_import_cycle():
  cycle = find_cycle(graph())
  assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_graph_sees_module_level_deferred_and_relative_imports():
  """The graph is not vacuous: edges the tree is known to hold, and each import form."""
  edges = graph()
  assert "lcx.attention" in edges["lcx.stick_breaking"]  # from lcx import attention
  assert "lcx.evaluate.samples" in edges["lcx.evaluate.lengths"]  # from lcx.evaluate import m
  assert "lcx.evaluate.runner" in edges["lcx.evaluate"]  # from lcx.evaluate.runner import Runner
  assert "lcx.prepare" in edges["lcx.generate"]  # inside _main: deferred
  known = {name: pathlib.Path(name.replace(".", "/") + ".py") for name in ("lcx.a", "lcx.b")}
  known["lcx.p"] = pathlib.Path("lcx/p/__init__.py")
  known["lcx.p.c"] = pathlib.Path("lcx/p/c.py")
  source = "import lcx.a\nfrom . import c\ndef f():\n  from ..b import x\n"
  assert imports("lcx.p.c2", source, known) == {"lcx.a", "lcx.p.c", "lcx.b"}


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
