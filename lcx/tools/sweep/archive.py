"""A sweep's results: copied to OUT/results/ (`collect`), or a shard's packed into one archive
to bring back (`pack_shard`) and the shards' merged (`unpack`, `coverage`), then the report."""

from __future__ import annotations

import glob
import gzip
import json
import os
import re
import shutil
import sys
import tarfile

from lcx import files
from lcx.tools import report
from lcx.tools.sweep.markers import done
from lcx.tools.sweep.plan import Sweep


def _pack_finished(sweep: Sweep, shard: tuple[int, int], chosen: list[str]) -> None:
  """A shard stopping early packs the runs it finished (nothing to pack: nothing written)."""
  finished = [r for r in chosen if done(sweep, r)]
  if shard[1] > 1 and finished:
    try:
      print(pack_shard(sweep, shard, finished, partial=True), file=sys.stderr, flush=True)
    except ValueError as error:
      print(f"[sweep] {error}", file=sys.stderr, flush=True)


def collect(sweep: Sweep) -> list[str]:
  """Copies every run's eval/*.json to OUT/results/RUN/ (overwriting); returns the copies. A
  result already in OUT/results/RUN/ that the run's evaluation no longer holds and that scored
  another checkpoint (a retrained run: another seed's weights, or another runs_dir's variant
  name) would sit beside the new weights' results in every report: it moves to
  OUT/results/RUN/history/ (which the report skips), said on stderr."""
  copied = []
  for run in (r for r, spec in sweep.runs.items() if not spec.on):  # `on` runs: with theirs
    sources = sorted(glob.glob(os.path.join(sweep.workdir(run), "eval", "*.json")))
    for source in sources:
      target = os.path.join(sweep.out_dir, "results", run, os.path.basename(source))
      os.makedirs(os.path.dirname(target), exist_ok=True)
      with open(source, "rb") as f, files.atomic_open(target, "wb") as out:  # whole or absent
        shutil.copyfileobj(f, out)
      copied.append(target)
    if sources:
      _set_aside_stale(os.path.join(sweep.out_dir, "results", run), sources)
  return copied


def _checkpoint(path: str) -> str | None:
  try:
    with open(path, encoding="utf-8") as f:
      found = json.load(f)
  except (OSError, ValueError):
    return None
  return found.get("checkpoint") if isinstance(found, dict) else None


def _set_aside_stale(results: str, sources: list[str]) -> None:
  """Moves the results in `results` that no source has the name of and whose checkpoint is none
  of the sources' (or unrecorded) to results/history/, never over a file there."""
  current = {_checkpoint(s) for s in sources} - {None}
  names = {os.path.basename(s) for s in sources}
  for path in sorted(glob.glob(os.path.join(results, "*.json"))):
    name = os.path.basename(path)
    if name in names:
      continue
    scored = _checkpoint(path)
    if scored in current:
      continue
    history = os.path.join(results, report.HISTORY)
    os.makedirs(history, exist_ok=True)
    stem, n = name[: -len(".json")], 1
    target = os.path.join(history, name)
    while os.path.exists(target):
      n += 1
      target = os.path.join(history, f"{stem}.{n}.json")
    os.replace(path, target)
    print(
      f"[sweep] {path}: scored checkpoint {scored or '(unrecorded)'}, not the run's "
      f"{', '.join(sorted(current)) or '(unrecorded)'}: moved to {target}",
      file=sys.stderr,
      flush=True,
    )


MAX_ARCHIVE_BYTES = 16 * 2**20  # what one shard may bring back from a lent machine and commit
RESULT_MEMBER = re.compile(r"^results/([A-Za-z0-9][A-Za-z0-9_.-]*)/([^/]+\.json)$")
ARCHIVE_NAME = re.compile(r"^shard-([0-9]+)-of-([0-9]+)(-partial)?\.tar\.gz$")


def archive_path(sweep: Sweep, shard: tuple[int, int], partial: bool = False) -> str:
  """A shard's archive; `partial` for a shard stopped before its last run (superseded, and
  removed, once the whole shard packs)."""
  name = f"shard-{shard[0]}-of-{shard[1]}{'-partial' if partial else ''}.tar.gz"
  return os.path.join(sweep.out_dir, "shards", name)


def pack_shard(sweep: Sweep, shard: tuple[int, int], runs: list[str], partial: bool) -> str:
  """Packs `runs` as shard `shard` (partial: the ones that finished before it stopped) and
  returns the line that says so; over the size limit, a ValueError (pack)."""
  path = archive_path(sweep, shard, partial)
  members = pack(sweep, runs, path)
  if not partial and os.path.exists(archive_path(sweep, shard, partial=True)):
    os.remove(archive_path(sweep, shard, partial=True))
  state = f"stopped early, {len(runs)} finished runs" if partial else f"{len(runs)} runs"
  return (
    f"[sweep] shard {shard[0]}/{shard[1]} ({state}): packed {len(members)} result files into "
    f"{path} ({os.path.getsize(path) / 2**20:.2f} MiB); once every shard's archive is in "
    f"{os.path.dirname(path)}, `--merge_shards` writes the report"
  )


def pack(sweep: Sweep, runs: list[str], path: str) -> list[str]:
  """Every eval/*.json of `runs` (a run `on` another: that run's) into one gzipped tar at `path`,
  members `results/RUN/NAME.json` sorted, with no times or owners, so the same results give the
  same bytes. Written atomically; over MAX_ARCHIVE_BYTES it is a ValueError and nothing is
  written (the results stay in the runs' workdirs). Returns the member names."""
  members = []
  for run in sorted({sweep.runs[r].on or r for r in runs}):
    for source in sorted(glob.glob(os.path.join(sweep.workdir(run), "eval", "*.json"))):
      members.append((f"results/{run}/{os.path.basename(source)}", source))
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with files.atomic_open(path, "wb") as raw:  # an archive over the limit is never written
    with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as zipped:
      with tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, source in members:
          info = tar.gettarinfo(source, arcname=name)
          info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
          with open(source, "rb") as f:
            tar.addfile(info, f)
    size = raw.tell()
    if size > MAX_ARCHIVE_BYTES:
      raise ValueError(
        f"{path}: {len(members)} results pack to {size / 2**20:.1f} MiB, over the "
        f"{MAX_ARCHIVE_BYTES // 2**20} MiB one shard may bring back; split the sweep into more "
        "shards (--shard=i/n with a larger n); the results are still in the runs' eval/"
      )
  return [name for name, _ in members]


def unpack(sweep: Sweep) -> list[str]:
  """Every shard archive under OUT/shards/ into OUT/results/ (members results/RUN/NAME.json
  of this sweep's runs only; anything else is refused naming it). A result already in
  OUT/results/RUN/ that no archive holds and that scored other weights moves to history/, as in
  `collect`, so a merge never leaves an earlier training's results beside the shards'. Returns
  the files written."""
  archives = sorted(glob.glob(os.path.join(sweep.out_dir, "shards", "*.tar.gz")))
  if not archives:
    raise ValueError(
      f"--merge_shards: no shard archive (shard-i-of-n.tar.gz) in "
      f"{os.path.join(sweep.out_dir, 'shards')}; run the shards with --shard=i/n first"
    )
  splits = {m.group(2) for m in (ARCHIVE_NAME.match(os.path.basename(a)) for a in archives) if m}
  if len(splits) > 1:
    raise ValueError(
      f"--merge_shards: archives of {len(splits)} splits (of {', '.join(sorted(splits))}) in "
      f"{os.path.dirname(archives[0])}: remove the stale split's, whose results the other's "
      "would overwrite"
    )
  for path in archives:  # every member checked before any is written
    with tarfile.open(path, "r:gz") as tar:
      for info in tar.getmembers():
        match = RESULT_MEMBER.match(info.name)
        if not (info.isfile() and match and match.group(1) in sweep.runs):
          raise ValueError(
            f"{path}: member {info.name!r} is not results/RUN/NAME.json of a run of "
            f"{sweep.name}; runs: {', '.join(sweep.runs)}"
          )
  written = []
  for path in archives:
    with tarfile.open(path, "r:gz") as tar:
      for info in tar.getmembers():
        target = os.path.join(sweep.out_dir, info.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tar.extractfile(info) as f, files.atomic_open(target, "wb") as out:
          shutil.copyfileobj(f, out)
        written.append(target)
  for run_dir in sorted({os.path.dirname(w) for w in written}):
    _set_aside_stale(run_dir, [w for w in written if os.path.dirname(w) == run_dir])
  return written


def coverage(sweep: Sweep) -> str:
  """Which shards the archives under OUT/shards/ hold, and which are partial or missing, so a
  report merged from some of the shards says so."""
  whole, partial, counts = set(), set(), set()
  for path in glob.glob(os.path.join(sweep.out_dir, "shards", "*.tar.gz")):
    match = ARCHIVE_NAME.match(os.path.basename(path))
    if match:
      (partial if match.group(3) else whole).add(int(match.group(1)))
      counts.add(int(match.group(2)))
  if not counts:
    return "[sweep] no archive named shard-i-of-n[-partial].tar.gz: which shards ran is unknown"
  if len(counts) > 1:  # unpack refuses them
    return f"[sweep] shard archives of {len(counts)} different splits: {sorted(counts)}"
  (n,) = counts
  partial -= whole
  missing = sorted(set(range(n)) - whole - partial)
  if not partial and not missing:
    return f"[sweep] all {n} shards merged"
  return (
    f"[sweep] {len(whole)} of {n} shards merged whole; partial: "
    f"{', '.join(map(str, sorted(partial))) or 'none'}; missing: "
    f"{', '.join(map(str, missing)) or 'none'}: the report covers their finished runs only"
  )


def write_report(sweep: Sweep) -> dict[str, str]:
  results_dir = os.path.join(sweep.out_dir, "results")
  results = report.load([results_dir], allow_empty=True) if os.path.isdir(results_dir) else []
  if not results:
    print(
      f"[sweep] no lcx result JSON (schema {report.SCHEMA}) under {results_dir} yet", flush=True
    )
  else:
    print(report.format_tables(results), flush=True)
  for warning in filter(None, (report.corpus_warning(results), report.checkpoint_warning(results))):
    print(f"[sweep] {warning}", file=sys.stderr, flush=True)
  title = f"{sweep.name}{':' + sweep.arg if sweep.arg else ''}"
  return report.write(results, sweep.out_dir, title=title)
