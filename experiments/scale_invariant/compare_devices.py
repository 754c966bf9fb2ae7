"""The same 24 `:full` runs trained and evaluated twice: on the 2-core CPU (full/results/) and on
one H200 (the shard archives in full/h200/, as they came back). Prints, over every result and
length both devices scored on the same windows, how far their mean losses and their paired
differences against RoPE of the same seed lie apart, in nats/token. A cell scored on other windows
(the CPU runs trained again after the evaluation began to score every token it asks for) is
counted, not compared: its loss differs by the windows, not by the device.

  python experiments/scale_invariant/compare_devices.py
"""

import io
import json
import pathlib
import statistics
import tarfile

HERE = pathlib.Path(__file__).parent / "full"


def _cells(results: dict) -> dict:
  """{(run, variant file, length): (mean loss, windows)}."""
  return {
    (run, name, n): (entry["loss"], entry["windows"])
    for (run, name), r in results.items()
    for n, entry in r["lengths"].items()
  }


def compare(cpu: dict, gpu: dict) -> list[str]:
  """The report's lines for two {(run, variant file): result} of the same runs."""
  a, b = _cells(cpu), _cells(gpu)
  same = [key for key in a if key in b and a[key][1] == b[key][1]]
  devices = [sorted({r["device"] for r in rs.values()}) for rs in (cpu, gpu)]
  lines = [
    f"{len(gpu)} results, {len(a)} (result, length) cells; devices: {devices[0]} vs {devices[1]}",
    f"scored on the same windows: {len(same)} cells; on other windows (not compared): "
    f"{len(a) - len(same)}",
  ]
  if not same:
    return lines
  diff = {key: abs(a[key][0] - b[key][0]) for key in same}
  worst = max(diff, key=diff.get)
  lines.append(
    f"|CPU - GPU| mean loss: median {statistics.median(diff.values()):.1e}, "
    f"max {diff[worst]:.1e} nats ({worst[0]}/{worst[1]} at {worst[2]})"
  )
  paired = []
  for run, name, n in same:
    base = (f"rope-s{run.rsplit('-s', 1)[1]}", "none.json", n)
    if run.startswith("rope-") or base not in diff:
      continue
    paired.append(abs((a[run, name, n][0] - a[base][0]) - (b[run, name, n][0] - b[base][0])))
  if paired:
    lines.append(
      f"|CPU - GPU| of each row minus RoPE of its seed: max {max(paired):.1e} nats over "
      f"{len(paired)} cells"
    )
  return lines


def main():
  gpu = {}
  for archive in sorted((HERE / "h200").glob("shard-*.tar.gz")):
    with tarfile.open(archive) as tar:
      for member in tar.getmembers():
        _, run, name = member.name.split("/")
        gpu[run, name] = json.load(io.TextIOWrapper(tar.extractfile(member)))
  cpu = {key: json.loads((HERE / "results" / key[0] / key[1]).read_text()) for key in gpu}
  print("\n".join(compare(cpu, gpu)))


if __name__ == "__main__":
  main()
