"""One typed loader per stored format: every artifact a stage reads (parquet, JSON, JSON lines, npz,
safetensors, torch state) goes through here, so a missing, truncated or garbled file becomes an
`ArtifactError` naming the file and what is wrong, never a library's traceback (`ArrowInvalid`,
`BadZipFile`, `SafetensorError`, `UnpicklingError`, `JSONDecodeError`).

Readers check shape as well as format: `read_parquet(path, columns=...)` and `read_json(path, keys=...)`
refuse a file that parses but lacks what the caller needs (a probe table without `valid`).

Parquet is written with page checksums (`write_parquet`) and read with their verification, so a garbled data
page is found, not decoded into wrong numbers. A folder of files written together (an RL checkpoint) carries a
manifest of sha256 sums (`write_manifest`, `verify_manifest`): a file of it that was cut short or changed on
disk is named before anything of it is loaded.

Heavy libraries (torch, safetensors, pyarrow) are imported inside the functions that need them: importing
this module costs nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from alphagym.errors import ArtifactError

MANIFEST = "manifest.json"


def _exists(path: Path, what: str) -> None:
    if not path.is_file():
        raise ArtifactError(path, f"{what} not found", rule="missing_file")


def read_json(path: str | Path, *, keys: Iterable[str] = (), what: str = "JSON file") -> dict[str, Any]:
    """A JSON object as Python writes it (NaN allowed: the stages' metrics can be NaN); `keys` must all be
    present."""
    path = Path(path)
    return _mapping(path, _json_value(path, what), keys, what, "a JSON object")


def _json_value(path: Path, what: str) -> Any:
    _exists(path, what)
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ArtifactError(path, f"{what} is not valid JSON (truncated or garbled?): {exc}") from None


def _mapping(path: Path, value: Any, keys: Iterable[str], what: str, kind: str) -> dict[str, Any]:
    """`value` if it is a mapping holding every key in `keys`; else an ArtifactError naming what lacks."""
    if not isinstance(value, dict):
        raise ArtifactError(path, f"{what} must hold {kind}, holds a {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ArtifactError(path, f"{what} lacks {', '.join(map(repr, missing))}")
    return value


def read_jsonl(path: str | Path, *, keys: Iterable[str] = (), what: str = "JSON-lines file") -> list[dict[str, Any]]:
    """One JSON object a line (blank lines skipped); each must hold `keys`."""
    path = Path(path)
    _exists(path, what)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(path, f"{what} is not UTF-8 text: {exc}") from None
    keys = tuple(keys)
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ArtifactError(path, f"{what}, line {n}: not valid JSON (truncated or garbled?): {exc}") from None
        if not isinstance(row, dict) or any(k not in row for k in keys):
            raise ArtifactError(path, f"{what}, line {n}: not an object with {', '.join(keys) or 'fields'}")
        out.append(row)
    return out


def write_parquet(df: Any, path: str | Path) -> None:
    """A data frame as parquet with page checksums (zstd), written atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    table = pa.Table.from_pandas(df, preserve_index=False)
    pq.write_table(table, tmp, compression="zstd", write_page_checksum=True)
    tmp.replace(path)


def read_parquet(path: str | Path, *, columns: Iterable[str] = (), what: str = "parquet file") -> Any:
    """A pandas frame from a parquet file (page checksums verified where written); `columns` must be there."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    _exists(path, what)
    try:
        table = pq.read_table(path, page_checksum_verification=True)
        df = table.to_pandas()
    except (pa.ArrowException, OSError, ValueError, EOFError, UnicodeDecodeError) as exc:
        raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                  f"{exc}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ArtifactError(path, f"{what} lacks the column(s) {', '.join(map(repr, missing))}")
    return df


def read_npz(path: str | Path, *, keys: Iterable[str] = (), what: str = "npz file") -> dict[str, Any]:
    """Every array of an npz file, read eagerly (the zip's CRCs checked); `keys` must be there."""
    import numpy as np

    path = Path(path)
    _exists(path, what)
    try:
        with np.load(path, allow_pickle=False) as z:
            out = {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as exc:
        raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                  f"{exc}") from None
    return _mapping(path, out, keys, what, "arrays")


def read_safetensors(path: str | Path, *, what: str = "safetensors file") -> dict[str, Any]:
    """The tensors of a safetensors file."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    path = Path(path)
    _exists(path, what)
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                  f"{exc}") from None


def read_torch(path: str | Path, *, keys: Iterable[str] = (), what: str = "torch state") -> dict[str, Any]:
    """A `torch.save`d mapping of tensors and plain values (weights only: no pickled code runs)."""
    import torch

    path = Path(path)
    _exists(path, what)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:   # noqa: BLE001 - damaged bytes raise from the unpickler, the zip reader or the
        # tensor rebuild, in types torch does not document; each is the file's fault and named as such here
        raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    return _mapping(path, state, keys, what, "a mapping")


def check_readable(path: str | Path, *, what: str | None = None) -> None:
    """A cheap check, by the file's suffix, that a stored file can be read at all: JSON and JSON lines parse,
    a parquet file's footer (its schema and row groups) reads, an npz file opens as a zip. A file cut short
    fails it; a garbled byte inside a parquet page or an npz member is left to the full read. A folder, or a
    file of another format, passes. Raises the ArtifactError the full reader would."""
    path = Path(path)
    suffix = path.suffix.lower()
    kinds = {".json": "JSON file", ".jsonl": "JSON-lines file", ".parquet": "parquet file", ".npz": "npz file"}
    if path.is_dir() or suffix not in kinds:
        return
    what = what or kinds[suffix]
    _exists(path, what)
    if suffix == ".json":
        _json_value(path, what)
    elif suffix == ".jsonl":
        read_jsonl(path, what=what)
    elif suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pq.read_metadata(path)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                      f"{exc}") from None
    else:
        try:
            with zipfile.ZipFile(path) as z:
                z.namelist()
        except (OSError, zipfile.BadZipFile, ValueError) as exc:
            raise ArtifactError(path, f"{what} cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                      f"{exc}") from None


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def digest(path: str | Path) -> str:
    """sha256 of a file, or of a folder's files (their relative paths and contents); "" when absent."""
    path = Path(path)
    if path.is_file():
        return sha256(path)
    if not path.is_dir():
        return ""
    h = hashlib.sha256()
    for p in sorted(q for q in path.rglob("*") if q.is_file()):
        h.update(p.relative_to(path).as_posix().encode() + b"\0" + sha256(p).encode())
    return h.hexdigest()


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def write_manifest(folder: str | Path) -> Path:
    """`manifest.json` in `folder`: the sha256 of every file under it. Written last, so a folder whose
    manifest is there was complete when it was written."""
    folder = Path(folder)
    sums = {p.relative_to(folder).as_posix(): sha256(p) for p in _files(folder)}
    out = folder / MANIFEST
    out.write_text(json.dumps(sums, indent=1, sort_keys=True))
    return out


def verify_manifest(folder: str | Path, *, what: str = "folder") -> None:
    """Every file the manifest lists is there with its recorded sha256; an ArtifactError names the first that
    is missing or differs (a file cut short or changed after it was written)."""
    folder = Path(folder)
    sums = read_json(folder / MANIFEST, what=f"the manifest of {what}")
    for name, digest in sorted(sums.items()):
        p = folder / name
        if not p.is_file():
            raise ArtifactError(p, f"{what}: a file its manifest lists is missing", rule="missing_file")
        if not isinstance(digest, str) or sha256(p) != digest:
            raise ArtifactError(p, f"{what}: the file differs from its manifest's sha256 (truncated or garbled)")
