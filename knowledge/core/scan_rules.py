"""Secret-scan rules: credential formats, and the checks that tell a live credential from a placeholder.

Used only through `knowledge.core.scan.find_secrets`. Every rule is a compiled regex that starts with a literal
(a provider prefix, ``://``, ``-----BEGIN``) or a separator (``key: value``, ``KEY=value``), so the scan is a
few fast passes over the text; the costly checks (entropy, checksums, base64 and JSON decoding) run only on
the rare candidates.

A candidate is reported only when its value looks issued rather than written by a person: provider
checksums where the format has one (GitHub, npm), otherwise length, character classes, Shannon entropy,
and the absence of placeholder marks (``xxxx``, ``<your-token>``, ``${VAR}``, ``EXAMPLE``, ``...``,
sequential runs such as ``1234567890``). Base64 values are judged by what they decode to, so the base64
of "changeme" passes and the base64 of a random password does not.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import hashlib
import itertools
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from knowledge.core.scan_context import CONTEXT_LITERALS, CONTEXT_WORDS, context_values
from knowledge.core.scan_layers import (
    LAYER_LITERALS,
    LAYER_WORDS,
    decode_base64,
    decoded_layers,
    is_ciphertext_context,
    key_containers,
    keyed_values,
)
from knowledge.core.scan_marks import Literals, Marks
from knowledge.core.scan_words import HINTS, names_secret

Span = tuple[int, int]

# An audited baseline, as detect-secrets and gitleaks keep one: SHA-256 of exact values a person has
# reviewed and found to be documentation examples. Only that exact string passes; nothing generalizes.
AUDITED_EXAMPLES: frozenset[str] = frozenset(
    {
        # argo-cd docs, user-management/zitadel.md: "For our example, the following values are used",
        # the ClientSecret of the guide's example application, and the same value in its sample ConfigMap.
        "a14d2056cc07da853209b494e87e8542cfb93a1381a0a5344601346553612f80",
        # argo-cd docs, notifications/services/pushover.md: the token in a template Secret whose name is
        # itself a placeholder (``name: <secret-name>``).
        "ea4ba3f83aa895f3ed916fe887311a2c5aa4cd817bbdbb754847e238608047e5",
    }
)


def fingerprint(value: str) -> str:
    """SHA-256 hex of a credential value, the key of `AUDITED_EXAMPLES`."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


#: Values published as test vectors and documentation examples, which every copy of the standard or
#: the vendor's docs prints: they authenticate nothing anyone owns. Exact strings only, as above.
PUBLISHED_EXAMPLES: frozenset[str] = frozenset(fingerprint(v) for v in (
    # RFC 7515 (JWS), appendix A.1: the HMAC key and the signed example.
    "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow",
    "eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxl"
    "LmNvbS9pc19yb290Ijp0cnVlfQ.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk",
    # RFC 8032 (Ed25519), section 7.1: the secret keys of TEST 1, 2 and 3.
    "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
    "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
    "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
    # jwt.io's sample token (HS256, secret "your-256-bit-secret").
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    # The Azure Storage emulator's (Azurite's) fixed, documented account key.
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
    # RFC 6749 (OAuth 2.0), sections 4.1-4.4 and 6: the example access, refresh and authorization codes, and
    # the client s6BhdRkqt3 with secret gX1fBat3bV as a Basic header; RFC 6750 (bearer tokens), the token.
    "2YotnFZFEjr1zCsicMWpAA", "tGzv3JOkF0XG5Qx2TlKWIA", "SplxlOBeZQQYbYS6WxSbIA", "czZCaGRSa3F0MzpnWDFmQmF0M2JW",
    "mF_9.B5f-4.1JqM",
    # RFC 7617 (HTTP Basic): Aladdin / open sesame.
    "QWxhZGRpbjpvcGVuIHNlc2FtZQ==",
    # The Kubernetes documentation's Secret examples ("Managing Secrets using kubectl", "Distributing
    # Credentials Securely"), as written and as their manifests hold them in base64.
    "S!B\\*d$zDsb=", "S!B*d$zDsb=", "1f2d1e2e67df", "MWYyZDFlMmU2N2Rm", "39528$vdg7Jb", "Mzk1MjgkdmRnN0pi",
    # Slack's API documentation, oauth.v2.access: the example bot token.
    "xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy",
    # … and "Verifying requests from Slack": the worked example's signing secret.
    "8f742231b10e8888abcd99yyyzzz85a5",
    # Flask's documentation ("Sessions", the quickstart): the example secret_key, as its source spells it.
    '_5#y2L"F4Q8z\\n\\xec]/',
))


def audited(value: str) -> bool:
    """An exact value the audited baseline or the published examples let through."""
    digest = fingerprint(value)
    return digest in AUDITED_EXAMPLES or digest in PUBLISHED_EXAMPLES


# --- value checks -------------------------------------------------------------------------------


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    if n == 0:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _classes(value: str) -> int:
    """How many of lower / upper / digit / other ASCII-printable classes the value uses."""
    lower = upper = digit = other = False
    for ch in value:
        if "a" <= ch <= "z":
            lower = True
        elif "A" <= ch <= "Z":
            upper = True
        elif "0" <= ch <= "9":
            digit = True
        else:
            other = True
    return lower + upper + digit + other


def _step_fraction(value: str) -> float:
    """Share of neighbouring pairs that repeat or count up/down by one: high for 'abcdef', '1234567890', 'xxxx'."""
    if len(value) < 2:
        return 1.0
    steps = sum(1 for a, b in itertools.pairwise(value) if abs(ord(b) - ord(a)) <= 1)
    return steps / (len(value) - 1)


def _dominant_share(value: str) -> float:
    return max(Counter(value).values()) / len(value) if value else 1.0


# Marks a person writes in place of a value; an issued credential never contains them.
_PLACEHOLDER_MARK = re.compile(
    r"<[A-Za-z][A-Za-z0-9 _.:/-]*>|\$\{|\{\{|\$\(|%\(|%[A-Z_]{2,}%|\*{3,}|\.{3}|…|x{4,}|X{4,}|EXAMPLE|\(snip\)",
    re.ASCII,
)
# Words that only a hand-written stand-in or a human-chosen default contains (gitleaks calls these stopwords).
# In values of up to 16 characters (the length people choose) they are looked for after undoing leetspeak,
# so "P@ssw0rd!" counts as the word it spells; in longer, generated values that would hit random text too often.
_STOPWORDS = (
    "example", "sample", "placeholder", "changeme", "changeit", "change_me", "change-me", "pass", "secret",
    "token", "dummy", "fake", "redacted", "replace", "your", "test", "demo", "foobar", "lorem", "insert",
    "hidden", "masked", "snip", "hunter", "qwerty", "letmein", "default", "admin", "welcome", "secure",
)  # fmt: skip
_UNLEET = str.maketrans("013457@$", "oleastas")
# Self-describing password-hash formats (bcrypt, sha-crypt, argon2, scrypt): a hash is not a credential.
_PASSWORD_HASH = re.compile(r"\$(?:2[abxy]?|5|6|y|7|argon2(?:id|i|d)|scrypt|pbkdf2[-a-z0-9]*)\$", re.ASCII)
_WORD_PART = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|[0-9]+", re.ASCII)
_VOWEL = re.compile(r"[aeiouyAEIOUY]")
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}|[A-Za-z0-9_-]+={0,2}", re.ASCII)
# A unit typed again and again: "deadbeefdeadbeef", "abcabcabc".
_REPEATED = re.compile(r"(.{3,16})\1\1", re.DOTALL)


def is_placeholder(value: str) -> bool:
    """True when the value carries a mark of a hand-written stand-in rather than an issued credential."""
    return (
        _PLACEHOLDER_MARK.search(value) is not None
        or _dominant_share(value) >= 0.4
        or _step_fraction(value) >= 0.5
        or _REPEATED.search(value) is not None
    )


def _identifier_like(value: str) -> bool:
    """Names such as 'argocd-repo-server-tls' or 'myWebhookKey2': every letter run is a pronounceable word."""
    parts = _WORD_PART.findall(value)
    separators = sum(value.count(sep) for sep in "-_. ")
    if sum(map(len, parts)) < len(value) - separators:
        return False  # other symbols: not a plain name
    alpha = [p for p in parts if not p.isdigit()]
    return bool(alpha) and all(len(p) >= 3 and _VOWEL.search(p) is not None for p in alpha)


def _is_path(value: str) -> bool:
    """'/etc/argocd/tls.crt', '~/.kube/config': every segment is a name (a base64 key with '/' is not)."""
    if not value.startswith(("/", "./", "../", "~/")):
        return False
    segments = [seg for seg in value.lstrip("~.").split("/") if seg]
    return all(_identifier_like(seg) or seg.isdigit() for seg in segments)


def _decoded_text(value: str) -> str | None:
    """The text a base64 value encodes, when it encodes printable ASCII; else None."""
    if len(value) < 8 or _B64.fullmatch(value) is None:
        return None
    return decode_base64(value)


# A reference to a value kept elsewhere: $VAR, ${VAR}, $oidc.keycloak.clientSecret, &anchor, @file.
_REFERENCE = re.compile(r"[$&@][A-Za-z_{(][A-Za-z0-9_.:{}()/-]*", re.ASCII)


def _written(value: str) -> bool:
    """The cheap half of `looks_random`: marks and words that only a person writes into a value."""
    plain = value.lower()
    if len(value) <= 16:
        plain = plain.translate(_UNLEET)
    return (
        any(word in plain for word in _STOPWORDS)
        or _REFERENCE.fullmatch(value) is not None
        or "://" in value
        or _PLACEHOLDER_MARK.search(value) is not None
        or _PASSWORD_HASH.match(value) is not None
    )


def looks_random(value: str, min_len: int = 12) -> bool:
    """True when a free-form value (a password, a client secret) looks generated rather than written."""
    if not min_len <= len(value) <= 256 or not value.isascii() or not value.isprintable() or _written(value):
        return False
    if value.count(" ") >= 2:
        return False  # a phrase ("see the vault entry"), which a quoted value may hold; generators add no spaces
    if is_placeholder(value) or _is_path(value) or _identifier_like(value):
        return False
    if value[-1] in "([" and _identifier_like(value[:-1].replace("::", ".").replace("->", ".")):
        return False  # a call or a subscript: `Environment.GetEnvironmentVariable(`, `config[`
    decoded = _decoded_text(value)
    if decoded is not None:
        # base64 of "changeme" passes, base64 of a generated password does not.
        return looks_random(decoded.strip(), min_len=8)
    # Entropy floors sit below the 1-in-10,000 quantile of random strings of that length (measured): over 62+
    # symbols, 2.6 bits at 12 characters, 3.3 at 20; over hex, the poorest two-class alphabet, 2.56 at 20.
    classes = _classes(value)
    if classes >= 3:
        return entropy(value) >= min(math.log2(len(value)) - 1.05, 3.5)
    if classes == 2:
        return len(value) >= 20 and entropy(value) >= 2.4
    return False


def _random_part(value: str, min_entropy: float = 3.0) -> bool:
    """For provider tokens, whose prefix already says 'credential': the random part is not masked.

    Each caller's entropy floor sits below the 1-in-10,000 quantile of random strings of its length and alphabet.
    """
    return not is_placeholder(value) and entropy(value) >= min_entropy


# --- provider checks ----------------------------------------------------------------------------

_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _base62(number: int, width: int) -> str:
    digits = ""
    while number:
        number, rem = divmod(number, 62)
        digits = _BASE62[rem] + digits
    return digits.rjust(width, "0")


def _crc32_suffix_ok(body: str) -> bool:
    """GitHub (ghp_/gho_/…) and npm (npm_) tokens end in the base62 CRC32 of their 30 random characters."""
    return _base62(zlib.crc32(body[:30].encode("ascii")), 6) == body[30:]


def _b64url_json(segment: str) -> object:
    try:
        return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (binascii.Error, ValueError, RecursionError):  # RecursionError: hostile nesting depth
        return None


def _jwt_ok(token: str) -> bool:
    """A signed JWT: a JSON header naming an algorithm, a JSON payload, and an unmasked signature."""
    header, payload, signature = token.split(".", 2)
    head = _b64url_json(header)
    return (
        isinstance(head, dict)
        and head.get("alg") not in (None, "none")
        and isinstance(_b64url_json(payload), dict)
        and _random_part(signature)
    )


def _counts_up(digits: str) -> bool:
    """'1234567890', '1234567890123', '0000000000': ids that only documentation uses."""
    steps = {(int(b) - int(a)) % 10 for a, b in itertools.pairwise(digits)}
    return steps <= {1} or steps <= {0}


def _slack_ok(value: str) -> bool:
    """A Slack token whose team/user ids are real (not counting up) and whose secret tail is unmasked."""
    *ids, tail = value.split("-")
    return not any(_counts_up(part) for part in ids) and _random_part(tail, 2.5)


_PEM_PRIVATE = re.compile(r"-----BEGIN (?:[A-Z0-9]{1,12} ){0,2}PRIVATE KEY(?: BLOCK)?-----")
_PEM_HEADER_LINE = re.compile(r"^[A-Za-z-]+:")  # Proc-Type:, DEK-Info:, Comment:, Version:
_PEM_BODY_LINE = re.compile(r"[A-Za-z0-9+/]+={0,2}", re.ASCII)
# Elisions in a key body. Not the general placeholder marks: "XXXX" occurs by chance in a real 1,600-character
# body about once in 5,000 keys, and an all-X body fails the entropy floor anyway.
_ELIDED = re.compile(r"\.\.\.|…|\b(?i:redacted|snip)\b|<[A-Za-z][^>\n]*>|\$\{|\{\{")
_PEM_TRIM = " \t\"',|>+"  # indentation, JSON/YAML quoting and string concatenation around each body line
#: A PEM body line is 64 base64 characters (76 in some tools); a collapsed body's pieces are as long.
_PEM_LINE_MIN = 40


def _pem_body_ok(body: str) -> bool:
    """Real key material: at least 64 base64 characters of high entropy, and nothing elided."""
    body = body.replace("\\n", "\n").replace("\\r", "")
    if _ELIDED.search(body):
        return False
    material = []
    for raw in body.split("\n"):
        line = raw.strip(_PEM_TRIM)
        if not line or _PEM_HEADER_LINE.match(line) or (line[0] == "=" and len(line) <= 5):
            continue  # blank, armor headers, and the OpenPGP armor checksum ("=abcd")
        if _PEM_BODY_LINE.fullmatch(line) is not None:
            material.append(line)
            continue
        # A body whose line breaks became spaces (a page's paragraph, a log line, a form field):
        # still key material when every piece is a base64 run as long as a body line (the last shorter).
        pieces = [piece for piece in (p.strip(_PEM_TRIM) for p in line.split()) if piece]
        if len(pieces) < 2 or any(_PEM_BODY_LINE.fullmatch(piece) is None for piece in pieces) \
                or any(len(piece) < _PEM_LINE_MIN for piece in pieces[:-1]):
            return False  # prose or markup inside the block: an illustration, not a key
        material.extend(pieces)
    joined = "".join(material)
    if _HEX.fullmatch(joined):  # a hex body (OpenVPN's static keys): four bits a character at most
        return len(joined) >= 64 and entropy(joined) >= 3.6
    return len(joined) >= 60 and entropy(joined) >= 4.2  # an Ed25519 PKCS#8 body is 64 characters


_HEX = re.compile(r"[0-9a-fA-F]+", re.ASCII)
# Any other armored block whose label names a key that is not public: "OpenVPN Static key V1",
# "SSH2 ENCRYPTED PRIVATE KEY", a vendor's "… SECRET KEY"; the body must be key material, as for PEM.
_ARMORED = re.compile(r"-----BEGIN (?P<label>[A-Za-z0-9 ]{1,60})-----", re.ASCII)


def _armored_key(match: re.Match[str]) -> Span | None:
    label = match["label"].lower()
    if "key" not in label or "public" in label:
        return None
    return _pem_block(match)


def _b64_pem_ok(value: str) -> bool:
    """A base64-encoded PEM private key, as in a Kubernetes Secret's ``data:``."""
    text = _decoded_text(value.rstrip("="))
    if text is None:
        return False
    match = _PEM_PRIVATE.search(text)
    if match is None:
        return False
    end = text.find("-----", match.end())
    return _pem_body_ok(text[match.end() : end if end >= 0 else len(text)])


# --- generic assignments ------------------------------------------------------------------------

# Found separator-first, because a case-insensitive keyword alternation is ~15x slower in `re`. The pattern
# holds only the value's first 12 characters, so a candidate whose key fails costs constant work; the rest of
# the value is read only for a key that names a secret. A value never starts with "//" (skipping the "://"
# of every URL, most separator hits in prose) nor with another separator (so "====" is not a candidate).
_ASSIGNMENT = re.compile(
    r"[:=][=>:]?[ \t]{0,4}(?:[bBrRuU]{0,2}(?P<q>[\"'`])(?P<qv>[^\s\"'`][^\n\"'`]{11})"  # b'…', r"…": literals too
    r"|(?P<v>(?!//)[^\s\"'`,;:=][^\s\"'`,;]{11}))",
    re.ASCII,
)
_VALUE_REST = re.compile(r"[^\s\"'`,;]{0,244}", re.ASCII)
_KEY_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# etcd's simple tokens (16 letters, a dot, an index) are session handles held in one server's memory with a
# 300 s TTL: they die with the session, so documentation that shows one leaks nothing durable.
_ETCD_SIMPLE_TOKEN = re.compile(r"[A-Za-z]{16}\.[0-9]+", re.ASCII)


#: What ``django-admin startproject`` puts before the SECRET_KEY it generates.
_DJANGO_DEV_PREFIX = "django-insecure-"


def _key_before(text: str, sep: int) -> str:
    """The key name ending just before a separator: ``DB_PASSWORD``, ``"password"``, ``clientSecret``."""
    low = max(0, sep - 72)
    end = sep
    if end > low and text[end - 1] in "?+!" and text.startswith("=", sep):  # make's ?=, +=, != assignments
        end -= 1
    while end > low and text[end - 1] in " \t":
        end -= 1
    if end > low and text[end - 1] == "]":  # a subscript: config['SECRET_KEY'] = …, env["TOKEN"]: …
        end -= 1
    if end > low and text[end - 1] in "\"'":
        end -= 1
    start = end
    while start > low and text[start - 1] in _KEY_CHARS:
        start -= 1
    return text[start:end]


def _separators(text: str, marks: Marks) -> list[int]:
    """Offsets of the separators that follow a key holding a secret's word: from each word, over the rest
    of its key, a closing quote, a subscript's ``]`` and blanks (what `_key_before` steps back over)."""
    seps: set[int] = set()
    end_of_text = len(text)
    for at in marks.at(*HINTS):
        end = at
        while end < end_of_text and text[end] in _KEY_CHARS:
            end += 1
        if end < end_of_text and text[end] in "\"'":
            end += 1
        if end < end_of_text and text[end] == "]":
            end += 1
        while end < end_of_text and text[end] in " \t":
            end += 1
        if end + 1 < end_of_text and text[end] in "?+!" and text[end + 1] == "=":  # make's ?=, +=, !=
            end += 1
        if end < end_of_text and text[end] in ":=":
            seps.add(end)
    return sorted(seps)


def _assignments(text: str, marks: Marks) -> Iterator[Span]:
    """``<key naming a secret> [:=] <generated-looking value>``, as in .env, YAML, INI, JSON and shell.

    Tried at the separators after a secret's word only (`_separators`): a separator-first search costs a
    pass that stops at every ``:`` and ``=``. Assignments may nest (``//host/:_authToken=…`` holds a
    second separator inside the first candidate); but once a value was weighed in full, separators
    inside it are skipped, which keeps hostile input ("k9pwd=k9pwd=…") linear.
    """
    pos = 0
    for sep in _separators(text, marks):
        if sep < pos or (match := _ASSIGNMENT.match(text, sep)) is None:
            continue
        pos = sep + 1
        key = _key_before(text, sep)
        if not any(word in key.lower() for word in HINTS):
            continue  # the key's word lies more than 72 characters before its separator
        if not names_secret(key):
            continue
        quote = match["q"]
        start = match.start("qv" if quote else "v")
        close = text.find(quote, start, start + 257) if quote else -1
        if close > start and "\n" not in text[start:close]:
            end = close  # a quoted value runs to its closing quote, so "a;b,c" is one value
        else:
            rest = _VALUE_REST.match(text, start + 12)
            end = rest.end() if rest is not None else start + 12
        value = text[start:end]
        judged = value.removeprefix(_DJANGO_DEV_PREFIX)  # Django marks its generated dev keys; still keys
        if _written(judged) or _ETCD_SIMPLE_TOKEN.fullmatch(value):
            continue
        pos = max(pos, end)
        if looks_random(judged):
            yield start, end


def _assigned(value: str, min_len: int = 12) -> bool:
    """A value a secret's name was given looks generated (`looks_random`), with the exceptions of
    `_assignments`: Django's marked dev keys are keys, etcd's session handles are not."""
    return _ETCD_SIMPLE_TOKEN.fullmatch(value) is None and looks_random(value.removeprefix(_DJANGO_DEV_PREFIX), min_len)


# --- the rules ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Rule:
    """One credential format: ``pattern`` finds candidates, ``confirm`` returns the credential's span or None."""

    kind: str
    # The literals a match starts with (`knowledge.core.scan_marks` finds them all in one pass); the pattern is
    # tried only where one of them is. None: the pattern is searched for as it is (Twilio's "AC", "SK").
    starts: tuple[str, ...]
    pattern: re.Pattern[str]
    confirm: Callable[[re.Match[str]], Span | None]
    # A provider prefix must start a token: "AIza" inside a certificate's base64 body is not a Google key.
    bounded: bool = True
    # A free-form rule (URL passwords, assignments) stays silent on a value a provider rule already rejected.
    defers: bool = False
    # For a pattern that reads a whole run of characters after its literal prefix and can still fail at the
    # run's end: the run (its alphabet holds the literal). A failed attempt at one start fails at every later one
    # inside the same run, so `_matches` skips them; ``re`` re-reads the rest of the run from each, quadratically
    # ("eyJ" * 100_000).
    run: re.Pattern[str] | None = None


def _matches(rule: Rule, text: str, marks: Marks) -> Iterator[re.Match[str]]:
    """Exactly ``rule.pattern.finditer(text)``, tried only at the rule's literals, in linear time."""
    if not rule.starts:  # a literal too short and common to look for with the others: ``re`` finds it
        yield from rule.pattern.finditer(text)
        return
    pos = 0
    for start in marks.at(*rule.starts):
        if start < pos:
            continue
        match = rule.pattern.match(text, start)
        if match is not None:
            yield match
            pos = match.end()
        elif rule.run is not None:
            span = rule.run.match(text, start)
            pos = max(start + 1, span.end() if span is not None else 0)


def _value(check: Callable[[str], bool]) -> Callable[[re.Match[str]], Span | None]:
    """Confirm on the ``v`` group's text; the finding covers that group."""
    return lambda match: match.span("v") if check(match["v"]) else None


def _pem_block(match: re.Match[str]) -> Span | None:
    """The whole PEM private-key block when its body is real key material."""
    text = match.string
    # The body ends at the next dash run (its END line, or another BEGIN): repeated headers stay linear.
    body_end = text.find("-----", match.end(), match.end() + 20_000)
    if body_end < 0:
        body_end = min(len(text), match.end() + 20_000)
    if not _pem_body_ok(text[match.end() : body_end]):
        return None
    if text.startswith("-----END", body_end):
        close = text.find("-----", body_end + 8, body_end + 80)
        return match.start(), (close + 5 if close >= 0 else body_end)
    return match.start(), body_end


def _basic_auth_ok(value: str) -> bool:
    decoded = _decoded_text(value) or ""
    return ":" in decoded and looks_random(decoded.split(":", 1)[1], 8)


def _openai_ok(value: str) -> bool:
    body = value[3:].removeprefix("proj-").removeprefix("svcacct-").removeprefix("admin-")
    # "sk-" is a weak prefix ("sk-encryption-key-rotation…"), so a name made of words does not count.
    return not body.startswith("ant-") and _random_part(body, 4.0) and not _identifier_like(body)


def _tail_ok(value: str) -> bool:
    tail = value.rsplit("/", 1)[-1]
    return len(tail) >= 16 and _random_part(tail)


_END = r"(?![A-Za-z0-9_-])"  # a token ends where its alphabet ends: no match inside a longer string


def _token(pattern: str) -> re.Pattern[str]:
    return re.compile(f"(?P<v>{pattern}){_END}", re.ASCII)


# Provider rules come first: where spans overlap, the first rule's finding is the one reported.
# One rule per literal prefix, because a leading character class costs `re` its fast literal search.
RULES: tuple[Rule, ...] = (
    Rule("private_key", ("-----BEGIN",), _PEM_PRIVATE, _pem_block, bounded=False),
    Rule("private_key", ("-----BEGIN",), _ARMORED, _armored_key, bounded=False),
    Rule(  # base64 of "-----BEGIN"; fails only where the run is short or ends at "_"/"-": so do later starts in it
        "private_key", ("LS0tLS1CRUdJTi",),
        _token(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{40,}={0,2}"),
        _value(_b64_pem_ok),
        run=re.compile(r"[A-Za-z0-9+/]*"),
    ),
    Rule(
        "github_token", ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        _token(r"gh[pousr]_[A-Za-z0-9]{36}"),
        _value(lambda v: _crc32_suffix_ok(v[4:])),
    ),
    Rule(
        "github_token", ("github_pat_",),
        _token(r"github_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}"),
        _value(lambda v: _random_part(v[11:], 4.0)),
    ),
    Rule("npm_token", ("npm_",), _token(r"npm_[A-Za-z0-9]{36}"), _value(lambda v: _crc32_suffix_ok(v[4:]))),
    Rule(
        "gitlab_token", ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-", "glcbt-"),
        _token(r"gl(?:pat|dt|rt|ptt|soat|cbt)-[A-Za-z0-9_-]{20,}"),
        _value(lambda v: _random_part(v.split("-", 1)[1])),
    ),
    Rule(
        "slack_token", ("xox",),
        _token(r"xox[abposre]-(?:[0-9]{6,16}-){1,3}[A-Za-z0-9]{16,64}"),
        _value(lambda v: _slack_ok(v[5:])),
    ),
    Rule(
        "slack_token", ("xapp-",),
        _token(r"xapp-[0-9]-[A-Z0-9]{6,16}-[0-9]{6,16}-[a-f0-9]{32,80}"),
        _value(lambda v: _random_part(v[-32:])),
    ),
    Rule(
        "slack_webhook", ("hooks.slack.com/",),
        re.compile(r"hooks\.slack\.com/(?:services|workflows|triggers)/(?P<v>[A-Za-z0-9_/]{20,})" + _END, re.ASCII),
        _value(_tail_ok),
    ),
    Rule("stripe_key", ("sk_live_",), _token(r"sk_live_[A-Za-z0-9]{20,}"), _value(lambda v: _random_part(v[8:]))),
    Rule("stripe_key", ("rk_live_",), _token(r"rk_live_[A-Za-z0-9]{20,}"), _value(lambda v: _random_part(v[8:]))),
    Rule("google_api_key", ("AIza",), _token(r"AIza[A-Za-z0-9_-]{35}"), _value(lambda v: _random_part(v[4:]))),
    Rule(
        "aws_access_key", ("AKIA", "ASIA", "ABIA", "ACCA"),
        _token(r"(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}"),
        _value(lambda v: _random_part(v[4:], 2.5)),
    ),
    Rule(
        "azure_storage_key", ("AccountKey=",),
        re.compile(r"AccountKey=(?P<v>[A-Za-z0-9+/]{86}==)", re.ASCII),
        _value(lambda v: _random_part(v, 4.5)),
        bounded=False,
    ),
    Rule(
        "azure_shared_access_key", ("SharedAccessKey=",),
        re.compile(r"SharedAccessKey=(?P<v>[A-Za-z0-9+/]{43}=)", re.ASCII),
        _value(lambda v: _random_part(v, 3.8)),
        bounded=False,
    ),
    Rule(
        "pypi_token", ("pypi-AgE",),
        _token(r"pypi-AgE[A-Za-z0-9_-]{50,}"),
        _value(lambda v: _random_part(v[8:], 4.0)),
    ),
    Rule(
        "anthropic_api_key", ("sk-ant-",),
        _token(r"sk-ant-[a-z]{3,8}[0-9]{2}-[A-Za-z0-9_-]{80,}"),
        _value(lambda v: _random_part(v[14:], 4.0)),
    ),
    Rule("openai_api_key", ("sk-",), _token(r"sk-[A-Za-z0-9_-]{32,}"), _value(_openai_ok)),
    Rule(
        "sendgrid_api_key", ("SG.",),
        _token(r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}"),
        _value(lambda v: _random_part(v[3:], 4.0)),
    ),
    Rule("huggingface_token", ("hf_",), _token(r"hf_[A-Za-z0-9]{34}"), _value(lambda v: _random_part(v[3:], 3.5))),
    Rule(
        "twilio_credentials", (),
        re.compile(r"AC[0-9a-f]{32}:(?P<v>[0-9a-f]{32})" + _END, re.ASCII),  # account SID : auth token
        _value(lambda v: _random_part(v, 2.7)),
    ),
    Rule(
        "twilio_credentials", (),
        re.compile(r"SK[0-9a-fA-F]{32}:(?P<v>[A-Za-z0-9]{32})" + _END, re.ASCII),  # API key SID : its secret
        _value(_random_part),
    ),
    Rule(  # the header is the run up to its ".", and what must follow it is the same for every start in that run
        "jwt", ("eyJ",),
        _token(r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}"),
        _value(_jwt_ok),
        run=re.compile(r"[A-Za-z0-9_-]*"),
    ),
    Rule(
        "url_password", ("://",),
        re.compile(r"://[^\s:/@\"'`<>]{0,128}:(?P<v>[^\s/@\"'`<>]{1,256})@", re.ASCII),
        _value(lambda v: looks_random(v, 8)),
        bounded=False,
        defers=True,
    ),
    Rule(
        "basic_auth_header", ("Basic ", "basic ", "BASIC "),  # the scheme is case-insensitive (RFC 7617)
        re.compile(r"(?:Basic|basic|BASIC) (?P<v>[A-Za-z0-9+/]{12,}={0,2})" + _END, re.ASCII),
        _value(_basic_auth_ok),
    ),
)

_LITERALS = Literals([*(start for rule in RULES for start in rule.starts), *LAYER_LITERALS, *CONTEXT_LITERALS],
                     [*HINTS, *LAYER_WORDS, *CONTEXT_WORDS])

_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


class SpanSet:
    """Disjoint, sorted spans: overlap tests and inserts in O(log n) (a list scan is quadratic on hostile input)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []

    def overlaps(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, start)
        return (i > 0 and self._ends[i - 1] > start) or (i < len(self._starts) and self._starts[i] < end)

    def add(self, start: int, end: int) -> None:
        """Add a span, merging it with any it overlaps so the set stays disjoint."""
        i = bisect.bisect_left(self._ends, start)  # first span that ends at or after our start
        j = bisect.bisect_right(self._starts, end)  # first span that starts after our end
        if i < j:
            start, end = min(start, self._starts[i]), max(end, self._ends[j - 1])
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]


#: A standard's example, quoted: "RFC 6749, section 4.1.4", "RFC8693 §2.3" in the lines before a value (an
#: HTTP exchange's request line, headers and body fit in twelve).
_RFC = re.compile(r"\bRFC[ -]?[0-9]{3,5}\b", re.ASCII)


def _cites_a_standard(text: str, start: int) -> bool:
    """The twelve lines before ``start`` (its own included) cite an RFC: the value is the standard's
    published example (RFC 6749's, 7519's, 8693's tokens), which authenticates nothing anyone owns."""
    before = text[max(0, start - 1200):start]
    return _RFC.search("\n".join(before.split("\n")[-12:])) is not None


def candidates(text: str, layers: int = 2) -> Iterator[tuple[str, int, int]]:
    """Every (kind, start, end) a rule confirms, provider rules first; spans may overlap across rules.
    With ``layers`` > 0, also what `knowledge.core.scan_layers` finds in the structure and in decoded
    layers, each scanned with one layer fewer (a base64 ``.dockerconfigjson`` whose ``auth`` is
    base64 again: two)."""
    marks = Marks(text, _LITERALS)
    vetoed = SpanSet()  # provider-format values their own rule rejected (a bad checksum, a masked body)
    for rule in RULES:
        if rule.starts and not marks.has(*rule.starts):
            continue
        for match in _matches(rule, text, marks):
            start = match.start()
            if rule.bounded and start > 0 and text[start - 1] in _WORD_CHARS:
                continue
            span = rule.confirm(match)
            if span is None:
                if rule.bounded:
                    vetoed.add(*match.span())
                continue
            if rule.defers and vetoed.overlaps(*span):
                continue  # a value in a known provider format is judged by that provider's rule alone
            if not audited(text[span[0] : span[1]]):
                yield rule.kind, span[0], span[1]
    for start, end in _assignments(text, marks):
        if not vetoed.overlaps(start, end) and not audited(text[start:end]) \
                and not is_ciphertext_context(text, start, text[start:end]) and not _cites_a_standard(text, start):
            yield "generic_secret", start, end
    if not layers:
        return
    found: list[tuple[str, int, int]] = [
        *key_containers(text, marks, _pem_body_ok, lambda v: _random_part(v, 4.0), looks_random),
        *keyed_values(text, marks, looks_random),
        *context_values(text, marks, _assigned),
        *decoded_layers(text, marks, lambda decoded: candidates(decoded, layers - 1), looks_random),
    ]
    for kind, start, end in found:
        value = text[start:end]
        if vetoed.overlaps(start, end) or audited(value) \
                or is_ciphertext_context(text, start, value) or _cites_a_standard(text, start):
            continue
        yield kind, start, end
