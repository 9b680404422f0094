"""What the paths given to ``knowledge ingest`` hold: the files, their media types, their document
identity, and what cannot be read.

Each file is one document whose id is derived from the tenant and the file's key: its path from the
folder given, that folder's name included (a file given alone: its folder's name and its own), so
a moved folder is not a second copy (`identity_candidates`). Media types come from content and
extension: ``%PDF-`` is ``application/pdf``; ``.md``/``.markdown`` is ``text/markdown``; UTF-8 text
(no NUL) is ``text/plain`` only under a text-like name (`is_text_like`: no extension, a ``text/*``
type, or a config or markup extension) or with ``--as-text``; anything else keeps its guessed type
(or ``application/octet-stream``) and the service refuses it with ``unsupported_media_type`` — an
``.svg``, a ``.json`` or five bytes named ``.pdf`` are not ingested as plain text. Hidden files and
folders (``.name``) are skipped inside folders; ``--glob`` / ``--exclude`` select by path inside the
folder; FIFOs, sockets and devices are refused (``not_a_regular_file``), never read; a folder that
cannot be read is an ``unreadable`` outcome, never skipped in silence.
"""

from __future__ import annotations

import atexit
import fnmatch
import mimetypes
import os
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from knowledge.cli import signals
from knowledge.cli.context import EXIT_REFUSED, CliError
from knowledge.errors import ArtifactTooLarge, NotARegularFile

#: Extensions read as plain text although their guessed type is not ``text/*`` (configuration and
#: lightweight markup that runbooks are written in).
TEXT_LIKE_SUFFIXES = frozenset({".text", ".log", ".rst", ".adoc", ".asciidoc", ".org", ".yaml", ".yml", ".toml",
                                ".ini", ".cfg", ".conf", ".env.example"})


def is_text_like(path: Path) -> bool:
    """A name under which UTF-8 text is plain text: no extension, a ``text/*`` type, or one of
    `TEXT_LIKE_SUFFIXES`."""
    suffix = path.suffix.lower()
    guessed = mimetypes.guess_type(path.name)[0] or ""
    return not suffix or guessed.startswith("text/") or suffix in TEXT_LIKE_SUFFIXES


def detect_media_type(path: Path, data: bytes, *, as_text: bool = False) -> str:
    """The media type of a file from its content and extension (see the module docstring)."""
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if path.suffix.lower() in (".md", ".markdown"):
        return "text/markdown"
    if as_text or is_text_like(path):
        if b"\x00" not in data:
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return "text/plain"
        if path.suffix.lower() == ".txt":
            return "text/plain"  # by name: the extractor refuses what is not text
    return mimetypes.guess_type(path.name)[0] or "application/octet-stream"


def document_id_for(tenant: str, key: str, stdin_name: str | None = None) -> uuid.UUID:
    """The document a file is, within a tenant: the same `Found.key` (its path from the folder
    given, that folder's name included), the same document — a moved folder is not a second copy;
    what standard input carried, the same ``--name``."""
    if stdin_name is not None:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:stdin:{stdin_name}")
    return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:path:{key}")


def legacy_document_id(tenant: str, file: Path) -> uuid.UUID:
    """The id versions before 0.2 gave a file (from its absolute path): a store ingested then keeps
    its documents when the same files are ingested again."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:{file.resolve()}")


def identity_candidates(tenant: str, found: Found) -> list[uuid.UUID]:
    """The ids the file may already have, the most specific first: its path under each enclosing
    folder with at least as many parts as its own key (an ingest of a parent folder named it so:
    ``b/docs/x.md`` is found again when ``b/docs`` is ingested), then its pre-0.2 id. Shorter
    keys are never tried: ``docs/x.md`` may be another project's."""
    parts = found.file.resolve().parts[1:]
    own = len(found.key.split("/"))
    keys = ["/".join(parts[-n:]) for n in range(len(parts), own - 1, -1)]
    if found.key not in keys:
        keys.append(found.key)
    return [*(document_id_for(tenant, key) for key in keys), legacy_document_id(tenant, found.file)]


def stdin_file(name: str, limit: int) -> Path:
    """Standard input (at most ``limit`` bytes: more is refused) in a file named ``name`` of a
    private temporary folder, removed when the process exits."""
    with signals.raising():  # Ctrl-C ends a read from a terminal at once
        data = sys.stdin.buffer.read(limit + 1)
    if len(data) > limit:
        raise CliError(f"standard input exceeds the {limit}-byte limit", EXIT_REFUSED)
    folder = Path(tempfile.mkdtemp(prefix="knowledge-stdin-"))
    atexit.register(shutil.rmtree, folder, True)
    (folder / name).write_bytes(data)
    return folder / name


class Found(NamedTuple):
    """A file to ingest: where it is, its default title (its path inside the folder given, or its
    name), and its identity key (that path with the folder's own name in front; a file given
    alone: its folder's name and its own); ``error``: a folder that could not be read (listed
    among the outcomes as ``unreadable``, never silently skipped)."""

    file: Path
    title: str
    key: str
    error: str | None = None


def _matches(rel: str, name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in patterns)


def _walk(folder: Path, include: Sequence[str], exclude: Sequence[str]) -> list[Found]:
    """A folder's files (hidden ones and symbolic links to folders skipped), and its subfolders
    that could not be read."""
    root = folder.resolve().name
    found: list[Found] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or folder)
        rel = where.relative_to(folder).as_posix() if where != folder else "."
        found.append(Found(where, rel, f"{root}/{rel}", error.strerror or type(error).__name__))

    for top, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            file = Path(top) / name
            rel = file.relative_to(folder).as_posix()
            if name.startswith(".") or (include and not _matches(rel, name, include)) or \
                    _matches(rel, name, exclude):
                continue
            found.append(Found(file, rel, f"{root}/{rel}"))
    return sorted(found, key=lambda f: f.file.parts)


def collect(paths: list[Path], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Found]:
    """Every file to ingest (a folder's files: kept if their path inside it matches an ``include``
    glob, when any, and no ``exclude`` glob). A path that does not exist is a bad argument. Entries
    that are not regular files or folders (FIFOs, sockets, devices) are kept: `read_source` refuses
    them without reading."""
    found: list[Found] = []
    for path in paths:
        if not path.exists():
            raise CliError(f"no such file or directory: {path}")
        if path.is_dir():
            found += _walk(path, include, exclude)
        else:
            found.append(Found(path, path.name, f"{path.resolve().parent.name}/{path.name}"))
    seen: set[Path] = set()
    unique = []
    for entry in found:
        if entry.file.resolve() not in seen:
            seen.add(entry.file.resolve())
            unique.append(entry)
    return unique


def read_source(file: Path, limit: int) -> bytes:
    """A file's bytes; `ArtifactTooLarge` above the artifact store's limit (checked before reading);
    `NotARegularFile` for a FIFO, socket or device (never opened: a FIFO would be read forever)."""
    info = file.stat()
    if not stat.S_ISREG(info.st_mode):
        kind = "a FIFO" if stat.S_ISFIFO(info.st_mode) else "a socket" if stat.S_ISSOCK(info.st_mode) else "a device"
        raise NotARegularFile(message=f"{kind}, not a regular file: not read")
    size = info.st_size
    if size > limit:
        raise ArtifactTooLarge(message=f"{size} bytes exceeds the {limit}-byte limit")
    return file.read_bytes()
