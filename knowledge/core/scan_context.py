"""Secret-scan rules for values a secret's name governs without standing right after it (issue 32).

`knowledge.core.scan_rules` reads ``<secret key> [:=] <value>``; these rules read the other ways code,
commands and prose tie a value to a name that says it is secret:

- **Code.** The first string literals on the line after an identifier that names a secret, with only
  code between (``.password("…")``, ``WithAuthToken("…")``, ``$pass = ConvertTo-SecureString "…"``,
  ``const SIGNING_SECRET: &str = "…"``, ``NetworkCredential("app", "…")``); where the line holds no
  literal and opens a block (``variable "admin_password" {``, ``DBPassword:``), the block's ``default``
  or ``value`` in the next lines (Terraform, CloudFormation); where the name is the value of a record's
  ``name``/``key`` field, the record's ``value`` (a container's env, Consul's KV export, SSM
  parameters); PowerShell's ``ConvertTo-SecureString "…" -AsPlainText``.
- **Commands.** A flag that names a secret and its value (``--client-secret …``, ``--token=…``), the
  conventional password flags of database and directory clients (``mysql -p…``, ``sqlcmd -P …``,
  ``redis-cli -a …``, ``ldapsearch -w …``), and ``user:password`` after a user flag (``curl -u``,
  ``--user``, ``http -a``).
- **Prose.** The value before its name ("log in with … as the password") and after "authenticates
  with".

Every value must look generated and not be a name, host or path (`scan_layers.generated`), as for
every free-form rule; each rule starts at a literal of `knowledge.core.scan_marks`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from knowledge.core.scan_layers import generated
from knowledge.core.scan_marks import Marks
from knowledge.core.scan_words import HINTS, names_secret

Random = Callable[[str, int], bool]

#: The literals these rules start from: as written, and lower-cased.
CONTEXT_LITERALS = (" -p", " -P", " -w", " -a", " -u", "--user", "--auth", "--basic", "--proxy-user")
CONTEXT_WORDS = ("authenticat", "convertto-securestring", "thin:", "sqlplus", "identified")

_NAME_CHAR_STR = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.$-"
_QUOTES = "\"'`"
#: What may stand between a secret's name and its literal on a line of code: punctuation, and one type,
#: constructor or conversion call (``= new NetworkCredential(``, ``: &str =``, ``= []byte(``).
_CODE_GAP = re.compile(r"[^\w\n\"'`]*(?:(?:new[ \t]+)?[\w.$:<>\[\]&*-]+[^\w\n\"'`]*)?", re.ASCII)
_SPACED_KEYWORDS = ("ENV ", "setenv ", "env ")
_SPACED_VALUE = re.compile(r"[ \t]+(?P<q>[\"']?)(?P<v>[^\s\"'`]{12,256})(?P=q)[ \t]*(?=\n|$)", re.ASCII)
_SECTION_VALUE = re.compile(r"[ \t]*[\w.-]{1,64}[ \t]*[:=][ \t]*(?P<q>[\"']?)(?P<v>[^\s\"'`]{12,256})(?P=q)[ \t]*$",
                            re.ASCII)
#: SQL's password clauses: ``IDENTIFIED BY '…'`` (MySQL, Oracle), ``PASSWORD '…'`` (PostgreSQL, in
#: ``CREATE ROLE``/``ALTER USER``) — found from the name-rules' quoted literal after "password" too.
_IDENTIFIED_BY = re.compile(r"identified[ \t]+by[ \t]+(?:password[ \t]+)?['\"](?P<v>[^'\"\n]{8,128})['\"]", re.ASCII)
_CODE_MARK = re.compile(r"[=:(,\[{]")  # a gap of words alone is prose ("the token can be `…`"), not code
_NAME_TAIL = re.compile(r"[A-Za-z0-9_.$-]*", re.ASCII)
#: Between a call's literal arguments: a comma, and perhaps a wrapper (Rust's ``Some(``, ``String::from(``).
_ARG_GAP = re.compile(r"[ \t]*\)?[ \t]*,[ \t]*(?:[\w.:]{1,24}\()?[ \t]*", re.ASCII)
#: A field that names what the record beside it holds: ``"key": "config/db/password"`` (Consul),
#: ``- name: DB_PASSWORD`` (a container's env), ``"Name": "/prod/api/token"`` (SSM parameters).
_NAME_FIELD = re.compile(r"(?i:\b(?:name|key|id|parameter|variable))[\"']?[ \t]*[:=][ \t]*[\"']?[^\"'\n]*$", re.ASCII)
#: PowerShell's plaintext secure string: the literal is a secret by the flag that says so.
_SECURE_STRING = re.compile(r"convertto-securestring[ \t]+(?:-string[ \t]+)?[\"'](?P<v>[^\"'\n]{8,256})[\"'][ \t]+"
                            r"-asplaintext", re.ASCII)
_BLOCK_VALUE = re.compile(r"[ \t]*[\"']?(?i:default|value|initial_value)[\"']?[ \t]*[:=][ \t]*"
                          r"(?:(?P<q>[\"'])(?P<qv>[^\"'\n]{12,256})(?P=q)|(?P<v>[^\s\"',;]{12,256}))", re.ASCII)
_FLAG_VALUE = re.compile(r"(?:[ \t]+|=)(?P<q>[\"']?)(?P<v>[^\s\"'`]{12,256})(?P=q)", re.ASCII)
#: Password flags of database and directory clients: mysql and mongosh ``-p``, sqlcmd ``-P``,
#: redis-cli ``-a``, ldapsearch ``-w``; the value follows (mysql: attached) or is quoted. Only on a
#: line that runs one of them (`_CLIENTS`): elsewhere ``-P`` is minisign's public key, ``-p`` a port.
_PASSWORD_FLAG = re.compile(r" -[pPaw](?:[ \t]+|=)?(?P<q>[\"']?)(?P<v>[^\s\"'`-][^\s\"'`]{11,255})(?P=q)(?=\s|$)",
                            re.ASCII)
_CLIENTS = re.compile(r"\b(?:mysql\w*|mariadb\w*|mongo\w*|sqlcmd|bcp|osql|isql|sqlplus|redis-cli|keydb-cli|"
                      r"ldap\w+|cqlsh|clickhouse-client|influx|vertica|vsql|db2|mssql-cli|pg_\w+|psql)\b", re.ASCII)
_USER_FLAG = re.compile(r"(?:[ \t]-[ua]|--user|--auth|--basic(?:-auth)?|--proxy-user)(?:[ \t]+|=)[\"']?"
                        r"[^\s:\"'/]{1,64}:(?P<v>[^\s\"']{8,256})", re.ASCII)
_VALUE_BEFORE = re.compile(r"(?P<v>[^\s`'\"(]{12,256})[`'\"]?[ \t]+(?:as|for)[ \t]+(?:(?:the|your|its|our|a)[ \t]+)?"
                           r"(?:[\w-]+[ \t]+){0,2}$", re.ASCII)
_AUTHENTICATES = re.compile(r"authenticat\w*[ \t]+(?:[\w-]+[ \t]+){0,3}?(?:with|using|via)[ \t]+[`'\"]?"
                            r"(?P<v>[^\s`'\",;]{12,256})", re.ASCII)
#: Oracle's connect strings: ``jdbc:oracle:thin:scott/…@//host``, ``sqlplus scott/…@db``.
_ORACLE = re.compile(r"(?:thin:|sqlplus[ \t]+(?:-\w+[ \t]+)*)[\w$#]{1,30}/(?P<v>[^\s/@\"']{8,128})@", re.ASCII)
_TRAILING = ",;:!?)]}*_`'\"."
_BLANK = re.compile(r"\s")  # a generated credential has none; a Markdown code span in prose often does


def _block_value(match: re.Match[str]) -> tuple[int, int]:
    """The value's span: a quoted one to its closing quote, a bare one without trailing punctuation."""
    if match["q"]:
        return match.span("qv")
    return match.start("v"), match.start("v") + len(match["v"].rstrip(_TRAILING))


#: How far the rules read along a line from where they start: a longer line is read as if cut there,
#: so a text of one endless line ("password=" * 50_000) costs each anchor the same, not the line.
_REACH = 512


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at, at + _REACH)
    return end if end >= 0 else min(len(text), at + _REACH)


def _line_start(text: str, at: int) -> int:
    low = max(0, at - _REACH)
    return text.rfind("\n", low, at) + 1 or low


def _literals(text: str, quote_at: int, end: int) -> Iterator[tuple[int, int]]:
    """The literal opening at ``quote_at`` and those after it separated by commas (a call's arguments)."""
    for _ in range(3):
        quote = text[quote_at]
        close = text.find(quote, quote_at + 1, end)
        if close < 0:
            return
        yield quote_at + 1, close
        gap = _ARG_GAP.match(text, close + 1, end)
        if gap is None or gap.end() >= end or text[gap.end()] not in _QUOTES:
            return
        quote_at = gap.end()


def _block_default(text: str, end: int, random: Random, lines: int = 8) -> tuple[int, int] | None:
    """The ``default``/``value`` of a block opened at the end of a line, in its next ``lines`` lines."""
    pos = end + 1
    for _ in range(lines):
        if pos >= len(text):
            return None
        stop = _line_end(text, pos)
        match = _BLOCK_VALUE.match(text, pos, stop)
        if match is not None:
            span = _block_value(match)
            return span if generated(text[span[0]:span[1]], random) else None
        if text[pos:stop].strip() in ("}", "]"):
            return None
        pos = stop + 1
    return None


def _section_values(text: str, stop: int, random: Random) -> Iterator[tuple[str, int, int]]:
    """The ``key = value`` lines of the section whose header ends at ``stop``, to the next header."""
    pos = stop + 1
    for _ in range(40):
        if pos >= len(text) or text.startswith("[", pos):
            return
        end = _line_end(text, pos)
        match = _SECTION_VALUE.match(text, pos, end)
        if match is not None and generated(match["v"], random):
            yield "section_secret", *match.span("v")
        pos = end + 1


def _named_values(text: str, marks: Marks, random: Random) -> Iterator[tuple[str, int, int]]:
    """Code literals and flag values after a name that names a secret (see the module docstring)."""
    seen: set[int] = set()
    size = len(text)
    low = marks.low
    for at in marks.at(*HINTS):
        if low.startswith("key", at) and (at == 0 or text[at - 1] not in _NAME_CHAR_STR):
            continue  # "key" as a word of its own: no qualifier names it secret
        if at and text[at - 1] in _NAME_CHAR_STR:  # back over the name's characters
            before = text[max(0, at - 64):at]
            start = at - (len(before) - len(before.rstrip(_NAME_CHAR_STR)))
        else:
            start = at
        if start in seen:
            continue
        seen.add(start)
        end = _NAME_TAIL.match(text, at).end()  # type: ignore[union-attr]  # (matches the empty string)
        stop = _line_end(text, end)
        rest = text[end:min(stop, end + 90)]
        quoted = '"' in rest or "'" in rest or "`" in rest
        line_start = _line_start(text, start)
        # Cheap tests first: most names in prose have no literal after them, open no block, fill no field.
        opens = not quoted and rest.rstrip().endswith(("{", ":"))
        field = not quoted and not opens and ("=" in text[line_start:start] or ":" in text[line_start:start])
        flag = text[start] == "-"
        spaced = text.startswith(_SPACED_KEYWORDS, line_start)
        section = text.startswith("[", line_start) and rest.startswith("]")
        if not (quoted or opens or field or flag or spaced or section):
            continue
        name = text[start:end]
        if not names_secret(name.strip(".$-")):
            continue
        if section:  # an INI or TOML section named for secrets: each of its values is one
            yield from _section_values(text, stop, random)
            continue
        if spaced:  # ``ENV API_KEY value`` (Dockerfile), ``setenv API_KEY value`` (csh)
            value = _SPACED_VALUE.match(text, end, stop)
            if value is not None and generated(value["v"], random):
                yield "generic_secret", *value.span("v")
            continue
        if flag:  # a command's flag: its value follows
            value = _FLAG_VALUE.match(text, end, stop)
            if value is not None and generated(value["v"].rstrip(_TRAILING), random):
                yield "flag_secret", value.start("v"), value.start("v") + len(value["v"].rstrip(_TRAILING))
            continue
        # The name closes a literal (``variable "admin_password" {``, ``"key": "config/db/password",``): after it.
        inside = end < size and text[end] in _QUOTES and text.count(text[end], line_start, start) % 2 == 1
        pos = end + 1 if inside else end
        gap = _CODE_GAP.match(text, pos, min(stop, pos + 80))
        quote_at = gap.end() if gap is not None else pos
        coded = not text[pos:quote_at].strip() or _CODE_MARK.search(text, pos, quote_at) is not None
        if quote_at < stop and text[quote_at] in _QUOTES and coded:
            for value_start, value_end in _literals(text, quote_at, stop):
                literal = text[value_start:value_end]
                if not _BLANK.search(literal) and generated(literal, random):
                    yield "code_secret", value_start, value_end
                    break
        elif text[pos:stop].rstrip().endswith(("{", ":")) and not text[pos:stop].strip(" \t\"':{=") \
                and (span := _block_default(text, stop, random)) is not None:
            yield "block_secret", *span
        elif _NAME_FIELD.search(text, line_start, start) is not None:
            here = _BLOCK_VALUE.search(text, end, stop)  # the value on the same line, or in the next three
            span = _block_value(here) if here is not None else None
            if span is not None and generated(text[span[0]:span[1]], random):
                yield "record_secret", *span
            elif here is None and (below := _block_default(text, stop, random, 3)) is not None:
                yield "record_secret", *below


def context_values(text: str, marks: Marks, random: Random) -> Iterator[tuple[str, int, int]]:
    """Every finding of this module's rules (kind, start, end)."""
    yield from _named_values(text, marks, random)
    client_line = (-1, False)  # (line start, runs a client): each line is searched once
    for at in marks.at(" -p", " -P", " -w", " -a"):
        match = _PASSWORD_FLAG.match(text, at)
        if match is None or not generated(match["v"], random):
            continue
        line_start = _line_start(text, at)
        if client_line[0] != line_start:
            client_line = (line_start, _CLIENTS.search(marks.low, line_start, at) is not None)
        if client_line[1]:
            yield "flag_secret", *match.span("v")
    for at in marks.at(" -u", " -a", "--user", "--auth", "--basic", "--proxy-user"):
        match = _USER_FLAG.match(text, at)
        if match is not None and generated(match["v"].rstrip(_TRAILING), random, 8):
            yield "flag_secret", match.start("v"), match.start("v") + len(match["v"].rstrip(_TRAILING))
    for at in marks.at("pass", "secret", "token", "credential"):
        low = max(_line_start(text, at), at - 160)
        if text.find(" as ", low, at) < 0 and text.find(" for ", low, at) < 0:
            continue  # the words that tie a value to the name after it
        match = _VALUE_BEFORE.search(text, low, at)
        if match is not None and generated(match["v"].rstrip(_TRAILING), random):
            yield "generic_secret", match.start("v"), match.start("v") + len(match["v"].rstrip(_TRAILING))
    for at in marks.at("convertto-securestring"):
        match = _SECURE_STRING.match(marks.low, at)
        if match is not None and generated(text[match.start("v"):match.end("v")], random):
            yield "code_secret", *match.span("v")
    for at in marks.at("thin:", "sqlplus"):
        match = _ORACLE.match(marks.low, at)
        if match is not None and generated(text[match.start("v"):match.end("v")], random, 8):
            yield "url_password", *match.span("v")
    for at in marks.at("identified"):
        match = _IDENTIFIED_BY.match(marks.low, at)
        if match is not None and generated(text[match.start("v"):match.end("v")], random, 8):
            yield "sql_password", *match.span("v")
    for at in marks.at("authenticat"):
        match = _AUTHENTICATES.match(marks.low, at, _line_end(text, at))
        if match is not None:
            value = text[match.start("v"):match.end("v")].rstrip(_TRAILING)
            if generated(value, random):
                yield "generic_secret", match.start("v"), match.start("v") + len(value)
