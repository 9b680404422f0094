"""What the paths given to ``knowledge ingest`` hold: the files, their media types, their document
identity, and what cannot be read.

Each file is one document, its id derived from the tenant and the file's identity
(`document_identity`). By default that is where the file really is, its resolved absolute path
(the id versions before 0.2 gave: `legacy_document_id`): the same file reached through a parent
folder, a symbolic link or a relative path is the same document, and two folders of the same name
are two sets of documents — a bare folder name never names anything. A stable logical key is
stated instead, for a folder that moves: ``--as NAME`` for the one path given (a folder's files are
``NAME/<path inside it>``, a file given alone is ``NAME``) or ``--root DIR`` (each file is its path
from ``DIR``); ingested again from elsewhere under the same key, the files keep their documents.
Those keys share the namespace in which 0.2 named every file by its folder's own name and its path
inside it (`Found.folder_key`), so ``--as docs`` on a folder named ``docs`` (or ``--root`` its
parent) finds the documents 0.2 ingested from it. Without ``--as``/``--root`` such a document is
never touched; the command only says how many files match one (`earlier_document_id`).

Media types come from content and extension (`knowledge.parsers.sniff`): ``%PDF-`` is
``application/pdf`` whatever the name, a ZIP is a Word document only when its structure says so,
a page that opens as HTML is ``text/html``, an ``.html``/``.docx`` name is taken at its word
unless its bytes are something else; ``.md``/``.markdown``
is ``text/markdown``; UTF-8 text (no NUL) is ``text/plain`` only under a text-like name
(`is_text_like`: no extension, a ``text/*`` type, or a config or markup extension) or with
``--as-text``; anything else keeps its guessed type (or ``application/octet-stream``) and the service
refuses it with ``unsupported_media_type`` — an ``.svg``, a ``.json`` or five bytes named ``.pdf``
are not ingested as plain text. Hidden files and folders (``.name``) are skipped inside folders;
``--glob`` / ``--exclude`` select by path inside the folder; FIFOs, sockets and devices are refused
(``not_a_regular_file``), never read; a folder that cannot be read is an ``unreadable`` outcome,
never skipped in silence.
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
from knowledge.parsers.sniff import DOCX, HTML, XHTML, sniff_media_type

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
    guessed = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    sniffed = sniff_media_type(data, guessed)  # what the bytes are: a signature, a ZIP's structure, HTML
    if sniffed != guessed or sniffed in (HTML, XHTML, DOCX):
        return sniffed
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
    return guessed


def document_id_for(tenant: str, key: str, stdin_name: str | None = None) -> uuid.UUID:
    """The document a logical key names within a tenant (``--as`` / ``--root``: `Found.key`, and
    the keys 0.2 gave every file, `Found.folder_key`); what standard input carried, the same
    ``--name``."""
    if stdin_name is not None:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:stdin:{stdin_name}")
    return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:path:{key}")


def location_document_id(tenant: str, real: Path) -> uuid.UUID:
    """The document a file is by default: the one at ``real``, its resolved absolute path (no
    filesystem access here: `Found.real` was resolved when the file was found)."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"knowledge-cli:{tenant}:{real}")


def legacy_document_id(tenant: str, file: Path) -> uuid.UUID:
    """The id versions before 0.2 gave a file, from its resolved absolute path — the default
    identity again (`location_document_id`), so a store ingested then keeps its documents."""
    return location_document_id(tenant, file.resolve())


def document_identity(tenant: str, found: Found) -> uuid.UUID:
    """The document a file is: its logical key's under ``--as`` / ``--root``, else its real
    location's (see the module docstring)."""
    if found.key is not None:
        return document_id_for(tenant, found.key)
    return location_document_id(tenant, found.real)


def earlier_document_id(tenant: str, found: Found) -> uuid.UUID | None:
    """The document 0.2 named a file by (its folder's name and its path inside the folder), when
    the file is named by its location now: only looked up, to say that ``--as`` finds it."""
    if found.key is not None or found.folder_key is None:
        return None
    return document_id_for(tenant, found.folder_key)


def logical_name(name: str) -> str:
    """An ``--as`` NAME as a key (``docs``, ``team/docs``: slashes at either end dropped); a bad
    argument if empty or with an empty, ``.`` or ``..`` part."""
    key = name.strip("/")
    if not key or any(part in ("", ".", "..") for part in key.split("/")):
        raise CliError(f"--as takes a name such as docs or team/docs, not {name!r}")
    return key


def _key_under(root: Path, real_root: Path, found: Found) -> str:
    """A file's key under ``--root``: its path from the root as given (absolute, not resolved),
    else from the resolved root; a file under neither is a bad argument."""
    for base, path in ((root, Path(os.path.abspath(found.file))), (real_root, found.real)):
        if path != base and path.is_relative_to(base):
            return path.relative_to(base).as_posix()
    raise CliError(f"--root: {found.file} is not under {root}")


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
    """A file to ingest: where it is (``file``, as reached; ``real``, its resolved absolute path),
    its default title (its path inside the folder given, or its name), its logical key under
    ``--as`` / ``--root`` (None: it is named by ``real``), and the key 0.2 gave it (``folder_key``:
    the folder's own name and the path inside it; a file given alone: its folder's name and its
    own) with the ``--as`` NAME that gives that key again (``folder_as``). ``error``: a folder that
    could not be read (listed among the outcomes as ``unreadable``, never silently skipped)."""

    file: Path
    title: str
    real: Path
    key: str | None = None
    folder_key: str | None = None
    folder_as: str | None = None
    error: str | None = None


def _matches(rel: str, name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(rel, g) or fnmatch.fnmatch(name, g) for g in patterns)


def _walk(folder: Path, include: Sequence[str], exclude: Sequence[str]) -> list[Found]:
    """A folder's files (hidden ones and symbolic links to folders skipped), and its subfolders
    that could not be read."""
    name = folder.resolve().name
    found: list[Found] = []

    def unreadable(error: OSError) -> None:
        where = Path(error.filename or folder)
        rel = where.relative_to(folder).as_posix() if where != folder else "."
        found.append(Found(where, rel, where.resolve(), error=error.strerror or type(error).__name__))

    for top, dirs, files in os.walk(folder, onerror=unreadable):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for file_name in files:
            file = Path(top) / file_name
            rel = file.relative_to(folder).as_posix()
            if file_name.startswith(".") or (include and not _matches(rel, file_name, include)) or \
                    _matches(rel, file_name, exclude):
                continue
            found.append(Found(file, rel, file.resolve(), folder_key=f"{name}/{rel}", folder_as=name))
    return sorted(found, key=lambda f: f.file.parts)


def collect(paths: list[Path], include: Sequence[str] = (), exclude: Sequence[str] = (), *,
            as_name: str | None = None, root: Path | None = None) -> list[Found]:
    """Every file to ingest (a folder's files: kept if their path inside it matches an ``include``
    glob, when any, and no ``exclude`` glob), each with its identity (see the module docstring:
    ``as_name`` names the one path given, ``root`` every file by its path from it). A path that
    does not exist, a ``root`` that is not a folder or a file not under it is a bad argument.
    Entries that are not regular files or folders (FIFOs, sockets, devices) are kept:
    `read_source` refuses them without reading."""
    if root is not None and not root.is_dir():
        raise CliError(f"--root must be a folder: {root}")
    found: list[Found] = []
    for path in paths:
        if not path.exists():
            raise CliError(f"no such file or directory: {path}")
        if path.is_dir():
            entries = _walk(path, include, exclude)
            if as_name is not None:
                entries = [f if f.error else f._replace(key=f"{as_name}/{f.title}") for f in entries]
        else:
            real = path.resolve()
            entries = [Found(path, path.name, real, as_name, f"{real.parent.name}/{path.name}",
                             f"{real.parent.name}/{path.name}")]
        found += entries
    if root is not None:
        given, real_root = Path(os.path.abspath(root)), root.resolve()
        found = [f if f.error else f._replace(key=_key_under(given, real_root, f)) for f in found]
    seen: set[Path] = set()
    unique = []
    for entry in found:
        if entry.real not in seen:
            seen.add(entry.real)
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
