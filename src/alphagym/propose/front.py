"""The front door of `alphagym propose`: what a user gives (catalogue fields, a catalogue brief's text, free
text, or a file of them) read into brief records, the objects the decoder and the checks take. Kept apart
from the policy and the verifier (`propose.propose`), which import torch and transformers: a malformed brief
or option is refused in about a second, before any model loads.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alphagym.briefs.catalogue import CHECKS, FIELD_PART, FIELDS, Catalogue
from alphagym.briefs.generate import contradicts, json_object, read_fields, read_text, render
from alphagym.errors import BriefError, PolicyError
from alphagym.policy import META

# catalogue fields of a brief given as options; risk is not checked (it only words the brief)
# the most answers `propose` samples a brief: a minute or so of the tiny policy on 2 cores, and every answer is
# kept and scored in memory (RL's answers_per_brief has the same bound)
MAX_K = 1024


def brief_from_fields(cat: Catalogue, fields: Mapping[str, Any]) -> dict[str, Any]:
    """A catalogue brief (its fields and rendered text) from field values; risk defaults to the catalogue's
    first. A missing or unknown field, a horizon outside 1..2520, or fields that contradict each other is a
    BriefError naming it (a value given wrong before a value not given)."""
    b: dict[str, Any] = {}
    for key in FIELDS:
        value = fields.get(key)
        if value in (None, ""):
            continue
        if key == "horizon":
            if not isinstance(value, int) or not 1 <= value <= 2520:
                raise BriefError(f"horizon must be a number of days in 1..2520, not {value!r}")
            b[key] = value
            continue
        cat.row(FIELD_PART[key], str(value))                 # a BriefError listing the ids when unknown
        b[key] = str(value)
    missing = [k for k in CHECKS if k not in b]
    if missing:
        need = ", ".join(f"--{k.replace('_', '-')}" for k in missing)
        raise BriefError(f"a brief from catalogue fields needs {need}")
    b.setdefault("risk", cat.ids("risks")[0])
    b = {k: b[k] for k in FIELDS}
    if contradicts(cat, b):
        raise BriefError("these fields contradict each other (one forbids every field or operator another "
                         f"requires): {', '.join(f'{k}={b[k]}' for k in CHECKS)}")
    return {**b, "text": render(cat, b)}


def read_brief_file(path: Path, cat: Catalogue) -> list[dict[str, Any]]:
    """Briefs from a file, one a line: a JSON object (a brief record with `text`, or catalogue fields), or
    plain text. Blank lines are skipped; a file without briefs, or a bad line, is a BriefError naming it."""
    path = Path(path)
    if not path.is_file():
        raise BriefError("brief file not found", file=str(path))
    out = []
    for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        if line.lstrip().startswith("{"):
            row = json_object(line, path, i)
            if isinstance(row.get("text"), str) and row["text"].strip():
                out.append(brief_from_text(cat, row["text"]))
            else:
                try:
                    out.append(brief_from_fields(cat, row))
                except BriefError as exc:
                    raise BriefError(str(exc), file=str(path), line=i) from None
        else:
            out.append(brief_from_text(cat, line))
    if not out:
        raise BriefError("no briefs in file", file=str(path))
    return out


def brief_from_text(cat: Catalogue, text: str) -> dict[str, Any]:
    """A brief from a user's text, the one place text is read back into fields (`generate.read_fields`): a
    catalogue brief's text reads whole; in other words, the fields it names unambiguously are read. When
    every checked field is read (risk defaults to the catalogue's first), the brief is that catalogue brief,
    asked in the catalogue's own wording (the text the policy was trained on; `asked_as` keeps the user's);
    otherwise the text alone, answered under the grammar, with what was read (`read`) and what was not
    (`unread`). An empty text, or fields read that contradict each other, is a BriefError."""
    if not isinstance(text, str) or not text.strip():
        raise BriefError("empty brief: give its text, or catalogue fields (--mechanism, --horizon, ...)")
    whole = read_text(cat, text)
    if whole is not None:
        return {**whole, "text": text}
    fields, unread = read_fields(cat, text)
    if all(k in fields for k in CHECKS):
        return {**brief_from_fields(cat, fields), "asked_as": text.strip()}
    return {"text": text.strip(), "read": fields, "unread": [k for k in unread if k in CHECKS]}


def policy_folder(shipped: Path, sft_folder: Path, checkpoint: Path | None = None) -> Path:
    """The folder `propose` loads its policy from, checked before any model library is imported: `checkpoint`
    when given, else the shipped adapter (`shipped`), or the SFT policy (`sft_folder`) when the report shipped
    step 0 (a model card without an adapter). A missing folder, or one without a policy's metadata file, is a
    PolicyError naming it."""
    folder = Path(checkpoint) if checkpoint is not None else Path(shipped)
    if not folder.is_dir():
        if checkpoint is not None:
            raise PolicyError(f"{folder} is not a folder (give a checkpoint or policy folder)")
        raise PolicyError(f"no shipped policy at {folder}: run the pipeline through `alphagym report` (`make run`; "
                          "after `make smoke`, add --set profile=smoke to this command), or give --checkpoint DIR")
    if checkpoint is None and not (folder / META).is_file() and (folder / "README.md").is_file():
        folder = Path(sft_folder)       # the report ships no adapter when `probe.selector` picked step 0
    if not (folder / META).is_file():
        raise PolicyError(f"{folder} is not a policy or checkpoint folder (no {META})")
    return folder
