"""Secret-scan rules that read structure and undo one layer of encoding (issue 32): the shapes the
format rules of `knowledge.core.scan_rules` never see as written.

- **Decoded layers.** A base64 run that decodes to printable text is scanned again as that text (a
  Kubernetes Secret's ``data:`` holding a whole credentials file, a ``.dockerconfigjson``); one that
  decodes to ``user:password`` with a generated password is a basic-auth credential (a registry's
  ``auth``, npm's ``_auth``). A line with URL escapes (``%3D``) or JSON string escapes (``\\"``) is
  scanned again unescaped. A finding in a decoded layer is reported over the encoded run (or line)
  that holds it.
- **Keys without a separator.** A word that names a secret followed by its value — ``password
  s3cr3t…`` (netrc), "the password is s3cr3t…" (prose), a table column headed ``token``, an XML
  element ``<password>`` or ``<add key="ApiKey" value="…"/>``, string literals concatenated after a
  secret's key (``"abc" + "def"``), a URL query parameter (``?sig=…``, ``&access_token=…``), a URL
  whose user part is a generated key (a Sentry DSN), the value alone on the line after a question
  about a secret (a chat log: "what's the admin password?" — "bob: …"). The value must look generated
  (`scan_rules.looks_random`, and not a name, host or path: `generated`), as for every free-form
  rule. All of them start where the lower-cased text holds one of a few anchor words
  (`_ANCHORS`, found with the other literals in one pass: `knowledge.core.scan_marks`), so a
  document without them costs nothing more.
- **Key containers** the PEM rule does not cover: PuTTY ``.ppk`` private lines and age secret keys.
- **Ciphertext is not a credential**: values under a Sealed Secret's ``encryptedData:`` or SOPS's
  ``sops:``, and SOPS ``ENC[…]`` values, are left alone (`is_ciphertext_context`) — the spec blocks
  credentials, and a committed ciphertext is what a team commits instead of one.

Every pattern starts with a literal or a cheap character class and the costly checks run on the
rare candidates; decoded layers are scanned once (no layer inside a layer's layer).
"""

from __future__ import annotations

import base64
import binascii
import bisect
import itertools
import re
from collections.abc import Callable, Iterator
from urllib.parse import unquote

from knowledge.core.scan_marks import Marks
from knowledge.core.scan_words import PROSE_WORD, SECRET_NAME, names_secret

Span = tuple[int, int]
Scan = Callable[[str], Iterator[tuple[str, int, int]]]

#: A base64 value long enough to hold a credential (24 characters: 18 bytes), after a key's
#: separator (YAML, JSON, .env, INI), or alone on its line (a wrapped blob: consecutive lines join).
# One pattern per separator: a literal first character is searched for at memory speed, where ``[:=]``
# makes ``re`` test every character (4x the time on the docs corpora).
_B64_VALUES = tuple(re.compile(sep + r"[ \t]*[\"']?(?P<v>[A-Za-z0-9+/]{24,}={0,2})(?![A-Za-z0-9+/_-])", re.ASCII)
                    for sep in ":=")
# Any run, near where the text says it decodes base64 ("echo … | base64 -d", "b64decode(…)"): on that
# line and the next five (its output).
_B64_ANY = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{32,}={0,2}", re.ASCII)
# Found from a line break (a literal: ``re`` searches for it at memory speed), then the whole line.
_B64_LINE = re.compile(r"\n[ \t]*(?P<v>[A-Za-z0-9+/]{24,}={0,2})[ \t]*(?=\n|$)", re.ASCII)
MAX_DECODED = 65_536
_USER_PASS = re.compile(r"[A-Za-z0-9._@+\\-]{1,128}:(\S{8,256})", re.ASCII)  # a user name, not '{"alg"'
_ESCAPED = re.compile(r"%(?:2[0-9A-Fa-f]|3[A-Fa-f]|40|5[BDbd]|7[BDbd])|\\[\"'nt/]")


def _escapes(text: str) -> list[re.Match[str]]:
    """`_ESCAPED`'s matches in order, found from each ``%`` and ``\\`` by ``str.find`` (both rare)."""
    found = []
    for mark in ("%", "\\"):
        at = text.find(mark)
        while at >= 0:
            match = _ESCAPED.match(text, at)
            if match is not None:
                found.append(match)
            at = text.find(mark, at + 1)
    return sorted(found, key=lambda m: m.start())


def _printable(raw: bytes) -> str | None:
    """Printable ASCII, or UTF-16LE of it (PowerShell's ``-EncodedCommand``, Windows tools' base64)."""
    if raw and len(raw) % 2 == 0 and not any(raw[1::2]) and all(raw[0::2]):
        raw = raw[0::2]
    if raw and all(32 <= b < 127 or b in (9, 10, 13) for b in raw):
        return raw.decode("ascii")
    return None


def decode_base64(run: str) -> str | None:
    """The printable text a base64 or base64url run (padded or not) encodes, up to `MAX_DECODED`
    bytes; None for anything else."""
    body = run.rstrip("=")
    if "-" in body or "_" in body:
        body = body.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return _printable(raw) if len(raw) <= MAX_DECODED else None


def decoded_layers(text: str, marks: Marks, scan: Scan, random: Callable[[str, int], bool]
                   ) -> Iterator[tuple[str, int, int]]:
    """Findings in what ``text``'s base64 runs and escaped lines decode to (see the module docstring):
    each reported over the run or line that holds it. ``scan`` is the format and assignment scan,
    ``random`` `scan_rules.looks_random`."""
    runs = sorted({m.span("v") for pattern in _B64_VALUES for m in pattern.finditer(text)})
    done = 0
    for at in marks.at(*_DECODES):  # where the text decodes base64: any run, on that line and the next five
        if at < done:
            continue
        start, done = text.rfind("\n", 0, at) + 1, at
        for _ in range(6):
            done = text.find("\n", done + 1)
            if done < 0:
                done = len(text)
                break
        runs += [m.span() for m in _B64_ANY.finditer(text, start, done)]
    block: list[Span] = []
    for m in _B64_LINE.finditer("\n" + text):  # consecutive lines of one blob are decoded together
        span = (m.start("v") - 1, m.end("v") - 1)  # offsets in ``text``
        if block and text.count("\n", block[-1][1], span[0]) == 1:
            block.append(span)
            continue
        if block:
            runs.append((block[0][0], block[-1][1]))
        block = [span]
    if block:
        runs.append((block[0][0], block[-1][1]))
    for start, end in runs:
        decoded = decode_base64("".join(text[start:end].split()))
        if decoded is None:
            continue
        pair = _USER_PASS.fullmatch(decoded.strip())
        if pair is not None and random(pair.group(1), 8):
            yield "basic_auth", start, end
            continue
        for kind, _, _ in scan(decoded):
            yield f"{kind}_base64", start, end
            break
    # Every escaped line, unescaped, scanned in one text: a finding maps back to its line.
    spans: list[Span] = []
    plains: list[str] = []
    done = -1
    for match in _escapes(text):
        if match.start() < done:
            continue  # this line was read
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.start())
        end = end if end >= 0 else len(text)
        done = end
        line = text[start:end]
        plain = unquote(line.replace('\\"', '"').replace("\\'", "'").replace("\\t", "\t").replace("\\/", "/"))
        if plain != line:
            spans.append((start, end))
            plains.append(plain.replace("\\n", " "))
    if not plains:
        return
    joined = "\n".join(plains)
    starts = list(itertools.accumulate((len(p) + 1 for p in plains[:-1]), initial=0))
    reported: set[int] = set()
    for kind, at, _ in scan(joined):
        index = bisect.bisect_right(starts, at) - 1
        if index not in reported:
            reported.add(index)
            yield f"{kind}_escaped", *spans[index]


# --- keys without a separator ---------------------------------------------------------------------

#: What every rule of this section starts from: these substrings of the lower-cased text, found with
#: ``str.find`` (a pass each at memory speed), so the rules' own patterns run only where one occurs.
_ANCHORS = ("pass", "pw", "secret", "token", "key", "cred", "login", "sig=", "signature=")
#: The literals this module's rules start from, for `knowledge.core.scan_marks`: as written, and lower-cased.
LAYER_LITERALS = ("://", "PuTTY-User-Key-File-", "AGE-SECRET-KEY-1")
#: What a text says when it decodes base64 somewhere: ``base64 -d``, ``b64decode``, PowerShell's
#: ``-EncodedCommand`` and ``FromBase64String``, JavaScript's ``atob(``.
_DECODES = ("base64", "b64", "encodedcommand", "atob(")
LAYER_WORDS = (*_ANCHORS, *_DECODES, "pgpass")
# "password s3cr3t…" (netrc), "the password is s3cr3t…" — matched at an anchor: at most 40
# characters to a verb, then the value after white space (an assignment's ``=``/``:`` is not here).
_PROSE = re.compile(
    rf"(?i:{PROSE_WORD})\b(?:(?:[^\n.;:=]|\.(?=\S)){{0,40}}?\b(?:is|was|are|were|use|using|set\s+to|to|now)\b)?"
    r":?[ \t`*\"']{1,4}"
    r"(?P<v>[^\s`\"'<>,;)]{12,256})", re.ASCII)
_QUALIFIER = re.compile(r"(?i:api|access|license|secret|private|master|signing|encryption|auth)[ _-]?$", re.ASCII)
_QUALIFIERS = tuple(q + sep for q in ("api", "access", "license", "secret", "private", "master", "signing",
                                      "encryption", "auth") for sep in ("", " ", "_", "-"))
_TRAILING = ",;:!?)]}*_`'\""
_NAME_LIKE = re.compile(r"[a-z0-9]+(?:[-_./][a-z0-9]+)+|[A-Za-z0-9.-]+\.[a-z]{2,}(?:/\S*)?", re.ASCII)
_PATH_PART = re.compile(r"/[a-z][a-z0-9-]{2,}(?:\.[a-z]{2,4})?/|\.(?:ya?ml|json|md|txt|conf|toml|ini)\b", re.ASCII)
_HEADER_WORD = re.compile(rf"(?i:\b(?:{PROSE_WORD}|pass|credential|creds?)s?\b)", re.ASCII)
_TABLE_RULE = re.compile(r"[ \t]*\|[ \t:|-]+\|?[ \t]*")
_XML_ELEMENT = re.compile(r"<(?P<k>[A-Za-z_:.-]{2,64})>(?P<v>[^<\s]{12,256})</(?P=k)>", re.ASCII)
_XML_ADD = re.compile(r"[Kk]ey=\"(?P<k>[^\"\n]{1,64})\"\s+[Vv]alue=\"(?P<v>[^\"\n]{12,256})\"", re.ASCII)
_CONCAT = re.compile(r"([\"'])([^\"'\n]{1,128})\1(?:\s*\+\s*([\"'])([^\"'\n]{1,128})\3){1,8}"
                     r"|([\"'])([^\"'\n]{1,128})\5(?:\s*\n\s*([\"'])([^\"'\n]{1,128})\7){1,8}", re.ASCII)
_LITERAL = re.compile(r"([\"'])([^\"'\n]{1,128})\1", re.ASCII)
_QUERY = re.compile(
    r"[?&](?i:sig|signature|access_token|token|api_key|apikey|key|secret|client_secret|password|pwd)="
    r"(?P<v>[^&\s#\"'<>]{16,512})", re.ASCII)
_URL_USER_KEY = re.compile(r"://(?P<v>[A-Za-z0-9_-]{24,128})@[A-Za-z0-9.-]+", re.ASCII)


def generated(value: str, random: Callable[[str, int], bool], min_len: int = 12) -> bool:
    """``random`` (`scan_rules.looks_random`), and none of what prose puts after a secret's word: a
    name in lower case with separators (``argocd-repo-server-tls``), a host or URL path, a relative
    path or a Markdown link, an elision."""
    return (random(value, min_len) and _NAME_LIKE.fullmatch(value) is None and "](" not in value
            and _PATH_PART.search(value) is None
            and not value.startswith(("/", "./", "../", "~/", "--", "#")) and not value.endswith(".."))


def _line(text: str, at: int) -> Span:
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return start, (end if end >= 0 else len(text))


def _prose_value(text: str, at: int, random: Callable[[str, int], bool]) -> Span | None:
    """A secret's word at ``at``, then its value after white space (netrc) or a verb."""
    if text.startswith(("key", "Key", "KEY"), at):  # "API key", "signing key": the name starts at its qualifier
        if not text[max(0, at - 13):at].lower().endswith(_QUALIFIERS):
            return None
        qualifier = _QUALIFIER.search(text, max(0, at - 16), at)
        if qualifier is None:
            return None
        at = qualifier.start()
    if at > 0 and (text[at - 1].isalnum() or text[at - 1] == "_"):
        return None  # inside a word ("bypass"); "DB_PASSWORD=" is the assignment rule's
    match = _PROSE.match(text, at)
    if match is None:
        return None
    value = match["v"]
    value = value[:-1] if value.endswith(".") and not value.endswith("..") else value
    value = value.rstrip(_TRAILING)
    if len(value) >= 12 and generated(value, random):
        return match.start("v"), match.start("v") + len(value)
    return None


def _table(text: str, header: Span, random: Callable[[str, int], bool], walked: list[int]) -> Iterator[Span]:
    """Cells below a Markdown table header in a column the header names a secret in. ``walked``
    holds the end of the last table read: a header inside it is not read again (a text of nothing
    but header rows stays linear)."""
    if header[0] <= walked[0]:
        return
    head = text[header[0]:header[1]]
    if not head.lstrip().startswith("|"):
        return
    rule_line = _line(text, header[1] + 1) if header[1] < len(text) else header
    if rule_line == header or _TABLE_RULE.fullmatch(text, *rule_line) is None:
        return
    columns = {k for k, cell in enumerate(head.strip().strip("|").split("|")) if _HEADER_WORD.search(cell)}
    pos = rule_line[1] + 1
    while columns and pos < len(text):
        start, end = _line(text, pos)
        row = text[start:end]
        if not row.lstrip().startswith("|"):
            break
        offset = start + row.index("|") + 1
        for k, cell in enumerate(row.strip().strip("|").split("|")):
            value = cell.strip().strip("`")
            pair = _PAIR.fullmatch(value)  # "alice / s3cr3t…", "deploy : s3cr3t…": a user and the secret
            if pair is not None:
                value = pair["v"]
            if k in columns and value and generated(value, random):
                at = text.find(value, offset, end)
                yield at, at + len(value)
            offset += len(cell) + 1
        pos = end + 1
    walked[0] = pos


_PAIR = re.compile(r"[A-Za-z0-9_.@-]{1,64}[ \t]*[:/][ \t]*(?P<v>[^\s]{8,256})", re.ASCII)
# "creds for db01: admin / s3cr3t…", "login: deploy / s3cr3t…": a user, a slash, the secret.
_CREDS = re.compile(r"(?i:\bcreds?\b|credentials?|\blogin\b|\buser(?:name)?\b)", re.ASCII)
_USER_SLASH = re.compile(r"(?<![/\w])[A-Za-z0-9_.@-]{2,40}[ \t]+/[ \t]+(?P<v>[^\s/\"'`,;]{12,256})", re.ASCII)
# A chat message: "[10:03] bob: …", "bob: …", "<bob> …", "> …", or the bare line.
_SPEAKER = re.compile(r"[ \t>]*(?:\[[^\]\n]{1,40}\][ \t]*)?(?:<[^>\n]{1,40}>|[A-Za-z0-9_.@-]{1,40}:)?[ \t]*", re.ASCII)


#: A shell prompt before a command: what follows the command is its output.
_PROMPTS = ("$ ", "% ", "PS> ", "PS C:\\")
_LEADS = frozenset({"it's", "its", "it is", "use", "try", "here", "sure", "sure,", "ok", "ok,"})
_ASSIGNED = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*[ \t]*[:=][ \t]*[^=\s]", re.ASCII)  # not base64's padding


def _answer(text: str, pos: int, random: Callable[[str, int], bool]) -> Span | None:
    """The value alone on one of the four non-blank lines after a question or a lead-in about a secret
    ("what's the admin password?" — "one sec" — "bob: s3cr3t…"), in a chat log or a transcript, or
    after a shell command that prints one (``$ kubectl get secret … -o jsonpath='{.data.password}'``)."""
    lines = 0
    while lines < 4:
        if pos >= len(text):
            return None
        start, end = _line(text, pos)
        if not text[start:end].strip():
            pos = end + 1
            continue
        if text.startswith(("```", "~~~"), start):
            return None  # the lead-in belongs to the text before a code block, not to its lines
        lines += 1
        speaker = _SPEAKER.match(text, start, end)
        at = speaker.end() if speaker is not None else start
        value = text[at:end].strip().strip("`\"',").rstrip(".")
        lead, _, last = value.rpartition(" ")
        if lead and len(lead.split()) <= 4 and (lead.endswith(":") or lead.lower() in _LEADS):
            value = last.strip("`\"',").rstrip(".")  # "here you go: s3cr3t…", "it's s3cr3t…": a short lead-in
        if value and " " not in value and not _ASSIGNED.match(value) and generated(value, random):
            first = text.find(value, at, end)
            return first, first + len(value)
        pos = end + 1
    return None


def _key_matters(text: str, low: str, at: int) -> bool:
    """A "key" at ``at`` that a rule here may read: part of a name (``apiKey``, ``api_key``), after a
    qualifier ("API key"), or a field's name (``key=``, ``key="…"``, ``keys=``)."""
    before = text[at - 1] if at else " "
    return (before.isalnum() or before in "_-." or low[max(0, at - 13):at].endswith(_QUALIFIERS)
            or text.startswith(("=", "s=", '"', ":"), at + 3))


def keyed_values(text: str, marks: Marks, random: Callable[[str, int], bool]) -> Iterator[tuple[str, int, int]]:
    """Values a secret's word names without an assignment's separator (see the module docstring):
    prose and netrc values, table columns, XML elements and ``key=/value=`` pairs, literals
    concatenated after a secret's key, URL query parameters; and URL user parts that are keys."""
    line_end, walked = -1, [-1]
    low = marks.low
    for at in marks.at(*_ANCHORS):
        if low.startswith("key", at) and not _key_matters(text, low, at):
            continue  # "key" as a word of prose ("the key point"): nothing here reads it
        span = _prose_value(text, at, random)
        if span is not None:
            yield "generic_secret", *span
        if at <= line_end:
            continue  # its line was read (each line once: a line of nothing but anchors stays linear)
        line = _line(text, at)
        line_end = line[1]
        yield from _on_line(text, line, random, walked)
    for at in marks.at("://"):
        match = _URL_USER_KEY.match(text, at)
        if match is not None and generated(match["v"], random, 24):
            yield "url_key", *match.span("v")


def _on_line(text: str, line: Span, random: Callable[[str, int], bool], walked: list[int]
             ) -> Iterator[tuple[str, int, int]]:
    """The rules that read a whole line holding an anchor, each only where its mark is on the line."""
    seg = text[line[0]:line[1]]
    if seg.lstrip().startswith("|") and _HEADER_WORD.search(seg):
        for cell in _table(text, line, random, walked):
            yield "table_secret", *cell
    if "</" in seg or "alue=" in seg:
        for match in _XML_ELEMENT.finditer(text, *line):
            named = _HEADER_WORD.search(match["k"].replace("_", " ")) or names_secret(match["k"])
            if named and generated(match["v"], random):
                yield "xml_secret", *match.span("v")
        for match in _XML_ADD.finditer(text, *line):
            if (_HEADER_WORD.search(match["k"]) or names_secret(match["k"])) and generated(match["v"], random):
                yield "xml_secret", *match.span("v")
    if "+" in seg or seg.rstrip().endswith(("(", "[")):
        for match in _CONCAT.finditer(text, line[0], min(len(text), line[1] + 1024)):  # may run over lines
            if SECRET_NAME.search(text, line[0], match.start()):
                joined = "".join(m.group(2) for m in _LITERAL.finditer(match.group()))
                if generated(joined, random):
                    yield "concatenated_secret", *match.span()
    if "=" in seg and ("?" in seg or "&" in seg):
        for match in _QUERY.finditer(text, *line):
            if generated(unquote(match["v"]), random, 16):
                yield "url_query_secret", *match.span("v")
    if "/" in seg and _CREDS.search(seg):
        for match in _USER_SLASH.finditer(text, *line):
            if generated(match["v"].rstrip(_TRAILING), random):
                yield "generic_secret", match.start("v"), match.start("v") + len(match["v"].rstrip(_TRAILING))
    asks = seg.rstrip().endswith("?") or "? " in seg or (seg.rstrip().endswith(":") and "(" not in seg)  # not code
    if (asks or seg.lstrip().startswith(_PROMPTS)) \
            and (_HEADER_WORD.search(seg) or _CREDS.search(seg)):
        answer = _answer(text, line[1] + 1, random)
        if answer is not None:
            yield "generic_secret", *answer


# --- key containers -------------------------------------------------------------------------------

_PUTTY = re.compile(r"PuTTY-User-Key-File-[0-9]+:[^\n]*\n(?:[^\n]*\n){0,40}?Private-Lines:[ \t]*(?P<n>[0-9]{1,3})"
                    r"[ \t]*\r?\n", re.ASCII)
_AGE = re.compile(r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}(?![A-Z0-9])", re.ASCII)


# A PostgreSQL password file's line: hostname:port:database:username:password (``*`` for any field).
_PGPASS_LINE = re.compile(r"\n[ \t]*[^:\s#]{1,253}:(?:[0-9]{1,5}|\*):[^:\s]{1,63}:[^:\s]{1,63}:"
                          r"(?P<v>[^\s]{8,256})[ \t]*(?=\n|$)", re.ASCII)


def key_containers(text: str, marks: Marks, body_ok: Callable[[str], bool], part_ok: Callable[[str], bool],
                   random: Callable[[str, int], bool] | None = None) -> Iterator[tuple[str, int, int]]:
    """PuTTY private lines that hold key material, age secret keys, and the passwords of a
    PostgreSQL password file's lines (where the text names the file: ``pgpass``)."""
    if random is not None and marks.has("pgpass"):
        for match in _PGPASS_LINE.finditer("\n" + text):
            value = match["v"].replace("\\:", ":")
            if random(value, 8):
                yield "pgpass_password", match.start("v") - 1, match.end("v") - 1
    for match in _PUTTY.finditer(text) if marks.has("PuTTY-User-Key-File-") else ():
        lines = text[match.end():].split("\n", int(match["n"]))[: int(match["n"])]
        body = "\n".join(lines)
        if body_ok(body) or (len(body.strip()) >= 40 and part_ok(body.strip())):
            yield "private_key", match.start(), match.end() + len(body)
    for match in _AGE.finditer(text) if marks.has("AGE-SECRET-KEY-1") else ():
        if part_ok(match.group()[16:]):
            yield "private_key", *match.span()


# --- ciphertext -----------------------------------------------------------------------------------

_CIPHERTEXT_KEYS = ("encryptedData", "sops", "encrypted_data", "ciphertext", "CiphertextBlob", "encrypted_value",
                    "encryptedValue", "cipher_text", "EncryptedData", "CipherValue",
                    "sealedSecrets", "sealed_secrets")  # the last two: `kubeseal --raw` output kept in Helm values
# How encryption tools mark what they wrote: SOPS and hiera-eyaml (``ENC[…]``), Jasypt (``ENC(…)``),
# Spring Cloud Config (``{cipher}``), Vault transit (``vault:v1:``), Ansible Vault, AWS KMS ciphertext
# blobs (base64 of a KMS envelope: ``AQICAH``/``AQIBAH``/``AQIDAH``), XML encryption's CipherValue,
# OpenSSL's salted format (``openssl enc -a``: base64 of "Salted__", ``U2FsdGVkX1``).
_CIPHER_PREFIX = ("ENC[", "ENC(", "{cipher}", "vault:v", "$ANSIBLE_VAULT", "AQICAH", "AQIBAH", "AQIDAH", "U2FsdGVkX1")
_CIPHER_MARK = re.compile(r"\$ANSIBLE_VAULT;|!vault\b|<CipherValue>|-----BEGIN (?:PGP|AGE ENCRYPTED)|"
                          r"\bkind:\s*SealedSecret\b|ENC\[(?:AES256_GCM|PKCS7)", re.ASCII)
_INDENT = re.compile(r"[ \t]*")
# A value an encryption tool wrapped: ``ENC(…)``, ``ENC[…]``, a custom ``ENC@[…]`` (jasypt's configurable prefix).
_ENC_WRAPPED = re.compile(r"ENC[^A-Za-z0-9\s]{0,2}[\[(]", re.ASCII)
# Fields of a cipher string: an IV or nonce, the ciphertext, perhaps a MAC — joined by "|" (Bitwarden's
# ``2.iv|ct|mac``) or "--" (Rails' ``credentials.yml.enc``, ``ct--iv--tag``), each base64.
_CIPHER_FIELDS = re.compile(r"(?:[0-9]\.)?([A-Za-z0-9+/]{16,}={0,2})(?:\||--)([A-Za-z0-9+/]{16,}={0,2})"
                            r"(?:(?:\||--)([A-Za-z0-9+/]{16,}={0,2}))?", re.ASCII)


def _openpgp_message(value: str) -> bool:
    """Base64 of an OpenPGP message: its first packet a public-key encrypted session key (tag 1,
    version 3, then a key id and a public-key algorithm) or a symmetric-key one (tag 3, version 4,
    then a cipher and an S2K type), old or new format — how ``gpg --encrypt`` output and Vault's
    PGP-wrapped unseal keys start. A random value passes about once in 10^5; a private key's packets
    are tags 5 and 7, so no secret key passes."""
    if len(value) < 64:
        return False
    try:
        head = base64.b64decode(value[:24], validate=True)
    except (binascii.Error, ValueError):
        return False
    first = head[0]
    if first & 0xC0 == 0xC0:  # new format: the tag in the low six bits, then a length of 1, 2 or 5 octets
        tag, at = first & 0x3F, 2 if head[1] < 192 else 3 if head[1] < 224 else 6
    elif first & 0xC0 == 0x80:  # old format: the tag in bits 2-5, the length's size in bits 0-1
        tag, at = (first >> 2) & 0x0F, 1 + (1, 2, 4, 0)[first & 3]
    else:
        return False
    if tag == 1:
        return head[at] in (3, 6) and at + 9 < len(head) and head[at + 9] in (1, 2, 3, 16, 18, 22)
    if tag == 3:
        return head[at] in (4, 5, 6) and head[at + 1] in range(1, 14) and head[at + 2] in (0, 1, 3, 4)
    return False


def _cipher_string(value: str) -> bool:
    """Fields of a cipher string (`_CIPHER_FIELDS`) one of which decodes to a 12- or 16-byte IV or nonce."""
    match = _CIPHER_FIELDS.fullmatch(value)
    if match is None:
        return False
    for field in match.groups():
        if field is not None:
            try:
                if len(base64.b64decode(field, validate=True)) in (12, 16):
                    return True
            except (binascii.Error, ValueError):
                continue
    return False


def is_ciphertext_context(text: str, start: int, value: str) -> bool:
    """``value`` at ``start`` is committed ciphertext, not a credential: it carries an encryption
    tool's mark (`_CIPHER_PREFIX`, an ``ENC…(`` wrapper), is the base64 of an OpenPGP message or a
    cipher string's fields (`_openpgp_message`, `_cipher_string`), the few lines before it do (an
    Ansible ``!vault |`` block, an XML ``<CipherValue>``, a PGP or age armor), or it is nested under
    a key that holds ciphertext in YAML (a Sealed Secret's ``encryptedData:``, SOPS's ``sops:``,
    `_CIPHERTEXT_KEYS`)."""
    bare = value.lstrip("\"'")
    if bare.startswith(_CIPHER_PREFIX) or text.startswith(_CIPHER_PREFIX, start) or _ENC_WRAPPED.match(bare) \
            or _openpgp_message(bare) or _cipher_string(bare):
        return True
    window = text.rfind("\n", 0, max(0, text.rfind("\n", 0, max(0, text.rfind("\n", 0, start))))) + 1
    if _CIPHER_MARK.search(text, window, start) is not None:
        return True
    line_start = text.rfind("\n", 0, start) + 1
    if any(key in text[line_start:start] for key in _CIPHERTEXT_KEYS):  # "ciphertext": "…" on its own line
        return True
    indent = len(_INDENT.match(text, line_start).group())  # type: ignore[union-attr]
    pos, seen = line_start, 0
    while pos > 0 and seen < 200:
        prev = text.rfind("\n", 0, pos - 1) + 1
        line = text[prev:pos - 1]
        pos, seen = prev, seen + 1
        if not line.strip():
            continue
        here = len(_INDENT.match(line).group())  # type: ignore[union-attr]
        if here < indent:
            key = line.strip().split(":", 1)[0].strip("\"' -")
            if key in _CIPHERTEXT_KEYS or _CIPHER_MARK.search(line) is not None:
                return True
            indent = here
            if here == 0:
                return False
    return False
