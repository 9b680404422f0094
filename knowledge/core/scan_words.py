"""The words that name a secret, shared by every rule of the secret scan (one vocabulary, not one per rule).

- `SECRET_NAME` finds a secret's word inside a key or identifier name: ``DB_PASSWORD``, ``clientSecret``,
  ``app.security.master-key``, ``X-Honeycomb-Team``. A name that ends in one of `NOT_SECRET_NAME`'s
  words names something else (``secretName``, ``token_url``, ``password_hash``).
- `PROSE_WORD` is the same vocabulary as whole words of prose ("the API key is …", "passphrase"), less
  "credentials" (which prose follows with anything: "credential leak"); a table column or a question
  may still say it (`scan_layers`).
- `HINTS` are lower-case substrings one of which every such name holds: found with the scan's other
  literals in one pass (`knowledge.core.scan_marks`), they decide where the rules look at all.

A key is secret by a word of its own (password, secret, token, credential) or by a qualifier before
``key`` that says whose key it is and that it is kept (api, access, private, master, signing, …): a bare
``key``, ``primary_key`` or ``cache_key`` is not.
"""

from __future__ import annotations

import re

_QUALIFIED_KEY = (r"(?:api|access|auth|private|license|insert|master|signing|encryption|session|secret|shared|hmac|"
                  r"client|admin|root|service|account|storage|app|deploy|ingest|write|sas|webhook)[ _.-]?key")
SECRET_NAME = re.compile(
    # the last: Honeycomb's ingest key header
    rf"(?i:pass|pwd|secret|token|credential|{_QUALIFIED_KEY}|basic[_-]?auth|honeycomb[_-]team)",
    re.ASCII,
)
NOT_SECRET_NAME = re.compile(
    r"(?:^|[_.-]|(?<=[a-z0-9])(?=[A-Z]))(?i:name|names|ref|file|path|url|uri|endpoint|type|kind|id|ids|dir|"
    r"length|len|policy|format|header|env|var|mode|ttl|expiry|expiration|prefix|suffix|template|selector|"
    r"namespace|version|count|hash|sha|sha1|sha256|sha512|digest|checksum|fingerprint|field|source|"
    r"hint|label|description|placeholder|prompt|reset|rotation|expires|expired|required|enabled)$",
    re.ASCII,
)
PROSE_WORD = (r"(?:password|passwd|passphrase|pwd|pw|secret|token|"
              r"(?:api|access|license|secret|private|master|signing|encryption|auth)[ _-]?key|auth[ _-]?token)")
HINTS = ("pass", "pwd", "secret", "token", "key", "credential", "basic_auth", "basicauth", "basic-auth",
         "honeycomb-team", "honeycomb_team")


_LOW_NAME = re.compile(SECRET_NAME.pattern.replace("(?i:", "(?:"), re.ASCII)  # for lower-cased names: faster


def names_secret(name: str) -> bool:
    """A key or identifier name that names a secret (and not something about one)."""
    return _LOW_NAME.search(name.lower()) is not None and NOT_SECRET_NAME.search(name) is None
