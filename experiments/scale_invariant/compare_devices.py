"""The same 24 `:full` runs trained and evaluated twice: on the 2-core CPU (full/results/) and on
one H200 (the shard archives in full/h200/, as they came back). Prints, over every result and
length, how far the two devices' mean losses and their paired differences against RoPE of the
same seed lie apart, in nats/token.

  python experiments/scale_invariant/compare_devices.py
"""

import io
import json
import pathlib
import statistics
import tarfile

HERE = pathlib.Path(__file__).parent / "full"


def _losses(results: dict) -> dict:
  """{(run, variant file, length): mean loss}."""
  return {
    (run, name, n): entry["loss"]
    for (run, name), r in results.items()
    for n, entry in r["lengths"].items()
  }


def main():
  gpu = {}
  for archive in sorted((HERE / "h200").glob("shard-*.tar.gz")):
    with tarfile.open(archive) as tar:
      for member in tar.getmembers():
        _, run, name = member.name.split("/")
        gpu[run, name] = json.load(io.TextIOWrapper(tar.extractfile(member)))
  cpu = {key: json.loads((HERE / "results" / key[0] / key[1]).read_text()) for key in gpu}
  a, b = _losses(cpu), _losses(gpu)
  diff = {key: abs(a[key] - b[key]) for key in a}
  worst = max(diff, key=diff.get)
  devices = [sorted({r["device"] for r in rs.values()}) for rs in (cpu, gpu)]
  print(
    f"{len(gpu)} results, {len(diff)} (result, length) cells; devices: {devices[0]} vs {devices[1]}"
  )
  print(
    f"|CPU - GPU| mean loss: median {statistics.median(diff.values()):.1e}, "
    f"max {diff[worst]:.1e} nats ({worst[0]}/{worst[1]} at {worst[2]})"
  )
  paired = []
  for run, name, n in a:
    base = (f"rope-s{run.rsplit('-s', 1)[1]}", "none.json", n)
    if run.startswith("rope-") or base not in a:
      continue
    paired.append(abs((a[run, name, n] - a[base]) - (b[run, name, n] - b[base])))
  print(
    f"|CPU - GPU| of each row minus RoPE of its seed: max {max(paired):.1e} nats over "
    f"{len(paired)} cells"
  )


if __name__ == "__main__":
  main()
