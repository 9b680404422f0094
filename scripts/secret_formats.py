"""Credential and key formats for scripts/secret_shapes.py: random values in each format's real layout.

Everything is drawn from the one `random.Random` passed in, so a seed gives the same bytes. Lengths and
alphabets follow each format; checksums are computed (GitHub/npm base62 CRC32, bech32, PuTTY MACs,
OpenPGP CRC24); binary structures are built field by field (OpenSSH keys, DER, OpenPGP packets, PuTTY
blobs, PyPI macaroons); Ed25519, X25519 and P-256 public keys are derived from their private halves, and
certificates are really signed. No provider ever issued any of these values.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import string
import struct
import urllib.parse
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from random import Random

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from cryptography.x509.oid import NameOID

# --- alphabets and plain values -----------------------------------------------------------------------

HEX = "0123456789abcdef"
ALNUM = string.ascii_letters + string.digits
B62 = string.digits + string.ascii_uppercase + string.ascii_lowercase
PW_ALPHABET = ALNUM * 4 + "!*+-=?^_~."  # no quote, #, &, <, >, @, :, /, % or space: valid unescaped everywhere

USERS = ("alice", "bob", "carol", "dmitri", "erin", "farah", "deploy", "svc-ingest", "ci-bot", "app", "etl", "ops")
SERVICES = ("orders", "billing", "ingest", "search", "ledger", "notifier", "catalog", "reports", "auth", "gateway")
DOMAINS = ("corp.internal", "acme-logistics.io", "northwind-data.net", "prod.svc.cluster.local", "tailspin.dev")
NAMESPACES = ("payments", "platform", "data", "web", "staging", "monitoring")


def pick(r: Random, alphabet: str, n: int) -> str:
    return "".join(r.choices(alphabet, k=n))


def hexs(r: Random, n: int) -> str:
    return pick(r, HEX, n)


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def b64u(data: bytes | str) -> str:
    return base64.urlsafe_b64encode(data.encode() if isinstance(data, str) else data).decode().rstrip("=")


def wrap(text: str, width: int = 64) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))


def password(r: Random) -> str:
    while True:
        value = pick(r, PW_ALPHABET, r.randint(14, 28))
        if any(c.isdigit() for c in value) and any(c.isupper() for c in value) and any(c.islower() for c in value):
            return value


def user(r: Random) -> str:
    return r.choice(USERS)


def host(r: Random, kind: str = "") -> str:
    return f"{kind or r.choice(SERVICES)}-{r.choice(('db', 'api', 'cache', 'mq', 'svc'))}.{r.choice(DOMAINS)}"


def ctx(r: Random) -> dict[str, object]:
    svc = r.choice(SERVICES)
    return {"svc": svc, "user": user(r), "host": host(r, svc), "ns": r.choice(NAMESPACES), "port": r.choice(
        (5432, 3306, 6379, 8443, 27017)), "db": f"{svc}_{r.choice(('prod', 'main', 'v2'))}", "n": r.randint(2, 9),
        "region": r.choice(("eu-west-1", "us-east-2", "ap-southeast-1")), "date": date(r)}


def date(r: Random) -> str:
    moment = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(seconds=r.randrange(86400 * 900))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def base62(number: int, width: int) -> str:
    digits = ""
    while number:
        number, rem = divmod(number, 62)
        digits = B62[rem] + digits
    return digits.rjust(width, "0")


def checksummed(r: Random, prefix: str) -> str:
    """GitHub (ghp_, gho_, ghs_) and npm (npm_) tokens: 30 random base62 characters and their CRC32 in base62."""
    body = pick(r, ALNUM, 30)
    return prefix + body + base62(zlib.crc32(body.encode()), 6)


def aws_pair(r: Random) -> tuple[str, str]:
    return "AKIA" + pick(r, string.ascii_uppercase + "234567", 16), pick(r, ALNUM + "+/", 40)


def slack_bot(r: Random) -> str:
    return f"xoxb-{r.randint(10**10, 10**12)}-{r.randint(10**12, 10**13)}-{pick(r, ALNUM, 24)}"


def api_token(r: Random) -> str:
    kind = r.randrange(7)
    if kind == 0:
        return checksummed(r, "ghp_")
    if kind == 1:
        return "glpat-" + pick(r, ALNUM + "_-", 20)
    if kind == 2:
        return slack_bot(r)
    if kind == 3:
        return "sk_live_" + pick(r, ALNUM, r.choice((24, 99)))
    if kind == 4:
        return "SG." + pick(r, ALNUM + "_-", 22) + "." + pick(r, ALNUM + "_-", 43)
    return hexs(r, 40) if kind == 5 else b64u(r.randbytes(32))


def bare_token(r: Random) -> str:
    """A token with no provider prefix: only where it stands says what it is."""
    kind = r.randrange(4)
    if kind == 0:
        return hexs(r, r.choice((32, 40, 64)))
    if kind == 1:
        return b64u(r.randbytes(r.choice((24, 32))))
    return pick(r, ALNUM, r.choice((24, 32, 40)))


def bare_value(r: Random) -> str:
    return password(r) if r.random() < 0.6 else bare_token(r)


def url_quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")


# --- binary formats -----------------------------------------------------------------------------------


def sstr(data: bytes | str) -> bytes:
    data = data.encode() if isinstance(data, str) else data
    return struct.pack(">I", len(data)) + data


def mpint(data: bytes) -> bytes:
    return sstr(b"\0" + data if data[0] & 0x80 else data)


def big(r: Random, nbytes: int) -> bytes:
    data = bytearray(r.randbytes(nbytes))
    data[0] |= 0x80
    data[-1] |= 1
    return bytes(data)


def ed25519_keys(r: Random) -> tuple[bytes, bytes]:
    seed = r.randbytes(32)
    return seed, ed25519.Ed25519PrivateKey.from_private_bytes(seed).public_key().public_bytes_raw()


def x25519_keys(r: Random) -> tuple[bytes, bytes]:
    sk = bytearray(r.randbytes(32))
    sk[0] &= 248
    sk[31] = (sk[31] & 127) | 64
    return bytes(sk), x25519.X25519PrivateKey.from_private_bytes(bytes(sk)).public_key().public_bytes_raw()


def ssh_ed25519_pub(pk: bytes) -> bytes:
    return sstr("ssh-ed25519") + sstr(pk)


def openssh_private(r: Random, comment: str, rsa: bool = False) -> str:
    check = r.randbytes(4)
    if rsa:
        n, e = big(r, 384), b"\x01\x00\x01"
        pub = sstr("ssh-rsa") + mpint(e) + mpint(n)
        key = sstr("ssh-rsa") + mpint(n) + mpint(e) + b"".join(mpint(big(r, size)) for size in (384, 192, 192, 192))
    else:
        seed, pk = ed25519_keys(r)
        pub = ssh_ed25519_pub(pk)
        key = sstr("ssh-ed25519") + sstr(pk) + sstr(seed + pk)
    priv = check + check + key + sstr(comment)
    priv += bytes(range(1, 1 + (-len(priv) % 8)))
    blob = b"openssh-key-v1\0" + sstr("none") * 2 + sstr(b"") + struct.pack(">I", 1) + sstr(pub) + sstr(priv)
    return f"-----BEGIN OPENSSH PRIVATE KEY-----\n{wrap(b64(blob), 70)}\n-----END OPENSSH PRIVATE KEY-----"


def der(tag: int, body: bytes) -> bytes:
    n, size = len(body), (len(body).bit_length() + 7) // 8
    length = bytes([n]) if n < 128 else bytes([0x80 | size]) + n.to_bytes(size)
    return bytes([tag]) + length + body


def dint(data: bytes) -> bytes:
    return der(2, b"\0" + data if data[0] & 0x80 else data)


def seq(*parts: bytes) -> bytes:
    return der(0x30, b"".join(parts))


RSA_ALG = seq(der(6, bytes.fromhex("2a864886f70d010101")), b"\x05\x00")


def pem(label: str, data: bytes) -> str:
    return f"-----BEGIN {label}-----\n{wrap(b64(data))}\n-----END {label}-----"


def rsa_pkcs8(r: Random, bits: int = 2048) -> bytes:
    half = bits // 16
    rsa = seq(dint(b"\0"), dint(big(r, bits // 8)), dint(b"\x01\x00\x01"), dint(big(r, bits // 8)),
              *(dint(big(r, half)) for _ in range(5)))
    return seq(dint(b"\0"), RSA_ALG, der(4, rsa))


def rsa_spki(r: Random, bits: int = 2048) -> bytes:
    return seq(RSA_ALG, der(3, b"\0" + seq(dint(big(r, bits // 8)), dint(b"\x01\x00\x01"))))


P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


def p256_key(r: Random) -> ec.EllipticCurvePrivateKey:
    return ec.derive_private_key(int.from_bytes(r.randbytes(32)) % (P256_ORDER - 1) + 1, ec.SECP256R1())


def certificate(r: Random, cn: str) -> str:
    """A real self-signed certificate (Ed25519 or P-256 with deterministic ECDSA): same seed, same bytes."""
    p256 = r.random() < 0.5
    key = p256_key(r) if p256 else ed25519.Ed25519PrivateKey.from_private_bytes(r.randbytes(32))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, r.choice(("Acme Logistics", "Northwind Data")))])
    start = datetime(2023, 1, 1, tzinfo=UTC) + timedelta(days=r.randrange(700))
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
               .serial_number(int.from_bytes(r.randbytes(16)) >> 1).not_valid_before(start)
               .not_valid_after(start + timedelta(days=r.choice((90, 365, 825))))
               .add_extension(x509.SubjectAlternativeName([x509.DNSName(cn)]), critical=False))
    cert = builder.sign(key, hashes.SHA256() if p256 else None, ecdsa_deterministic=p256 or None)
    return cert.public_bytes(serialization.Encoding.PEM).decode().strip()


BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"


def bech32(hrp: str, data: bytes) -> str:
    acc, bits, words = 0, 0, []
    for byte in data:
        acc, bits = (acc << 8) | byte, bits + 8
        while bits >= 5:
            bits -= 5
            words.append((acc >> bits) & 31)
    if bits:
        words.append((acc << (5 - bits)) & 31)
    chk = 1
    for v in [ord(c) >> 5 for c in hrp] + [0] + [ord(c) & 31 for c in hrp] + words + [0] * 6:
        top, chk = chk >> 25, ((chk & 0x1FFFFFF) << 5) ^ v
        for i, gen in enumerate((0x3B6A57B2, 0x26508E6D, 0x1EA119FA, 0x3D4233DD, 0x2A1462B3)):
            chk ^= gen if (top >> i) & 1 else 0
    chk ^= 1
    return hrp + "1" + "".join(BECH32[d] for d in words + [(chk >> 5 * (5 - i)) & 31 for i in range(6)])


def age_recipient(r: Random) -> str:
    return bech32("age", x25519_keys(r)[1])


def age_armor(r: Random, size: int) -> str:
    header = (f"age-encryption.org/v1\n-> X25519 {b64(r.randbytes(32)).rstrip('=')}\n"
              f"{b64(r.randbytes(32)).rstrip('=')}\n--- {b64(r.randbytes(32)).rstrip('=')}\n")
    body = b64(header.encode() + r.randbytes(16 + size + 16))
    return f"-----BEGIN AGE ENCRYPTED FILE-----\n{wrap(body)}\n-----END AGE ENCRYPTED FILE-----"


def crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def pgp_packet(tag: int, body: bytes) -> bytes:
    n = len(body)
    if n < 192:
        length = bytes([n])
    elif n < 8384:
        length = bytes([((n - 192) >> 8) + 192, (n - 192) & 0xFF])
    else:
        length = b"\xff" + n.to_bytes(4)
    return bytes([0xC0 | tag]) + length + body


def pgp_armor(kind: str, data: bytes) -> str:
    return (f"-----BEGIN PGP {kind}-----\n\n{wrap(b64(data))}\n={b64(crc24(data).to_bytes(3))}\n"
            f"-----END PGP {kind}-----")


def pgp_public_key(r: Random, uid: str) -> str:
    created = struct.pack(">I", 1_650_000_000 + r.randrange(80_000_000))
    _, pk = ed25519_keys(r)
    primary = b"\x04" + created + b"\x16\x09" + bytes.fromhex("2b06010401da470f01") + b"\x01\x07\x40" + pk
    sig = (b"\x04\x13\x16\x08\x00\x2c" + r.randbytes(44) + b"\x00\x0a" + r.randbytes(10) + r.randbytes(2)
           + b"\x00\xff" + r.randbytes(32) + b"\x00\xff" + r.randbytes(32))
    sub = (b"\x04" + created + b"\x12\x0a" + bytes.fromhex("2b060104019755010501") + b"\x01\x07\x40"
           + x25519_keys(r)[1] + b"\x03\x01\x08\x07")
    data = pgp_packet(6, primary) + pgp_packet(13, uid.encode()) + pgp_packet(2, sig) + pgp_packet(14, sub)
    return pgp_armor("PUBLIC KEY BLOCK", data + pgp_packet(2, sig[:6] + r.randbytes(len(sig) - 6)))


def pgp_message(r: Random) -> str:
    pkesk = b"\x03" + r.randbytes(8) + b"\x12\x01\x07\x40" + r.randbytes(32) + b"\x30" + r.randbytes(48)
    return pgp_armor("MESSAGE", pgp_packet(1, pkesk) + pgp_packet(18, b"\x01" + r.randbytes(r.randint(80, 700))))


def sops_enc(r: Random, size: int, kind: str = "str") -> str:
    return (f"ENC[AES256_GCM,data:{b64(r.randbytes(max(size, 1)))},iv:{b64(r.randbytes(32))},"
            f"tag:{b64(r.randbytes(16))},type:{kind}]")


def sealed(r: Random, size: int) -> str:
    return b64(b"\x02\x00" + r.randbytes(512) + r.randbytes(size + 16))


def vault_hex(r: Random) -> str:
    inner = f"{hexs(r, 64)}\n{hexs(r, 64)}\n{hexs(r, 32 * r.randint(1, 6))}".encode().hex()
    return "$ANSIBLE_VAULT;1.1;AES256\n" + wrap(inner, 80)


def putty_key(r: Random, version: int, rsa: bool, comment: str) -> tuple[str, str]:
    """A PuTTY .ppk file with no passphrase and its correct Private-MAC; returns (file, private lines)."""
    if rsa:
        alg, pub = "ssh-rsa", sstr("ssh-rsa") + mpint(b"\x01\x00\x01") + mpint(big(r, 256))
        priv = b"".join(mpint(big(r, size)) for size in (256, 128, 128, 128))
    else:
        seed, pk = ed25519_keys(r)
        alg, pub, priv = "ssh-ed25519", ssh_ed25519_pub(pk), sstr(seed)
    signed = sstr(alg) + sstr("none") + sstr(comment) + sstr(pub) + sstr(priv)
    if version == 2:
        mac = hmac.new(hashlib.sha1(b"putty-private-key-file-mac-key").digest(), signed, hashlib.sha1).hexdigest()
    else:
        mac = hmac.new(b"", signed, hashlib.sha256).hexdigest()
    pub_lines, priv_lines = wrap(b64(pub)), wrap(b64(priv))
    text = (f"PuTTY-User-Key-File-{version}: {alg}\nEncryption: none\nComment: {comment}\n"
            f"Public-Lines: {pub_lines.count(chr(10)) + 1}\n{pub_lines}\n"
            f"Private-Lines: {priv_lines.count(chr(10)) + 1}\n{priv_lines}\nPrivate-MAC: {mac}")
    return text, priv_lines


def jwt_like(r: Random, claims: dict[str, object]) -> str:
    head = b64u(json.dumps({"alg": "RS256", "typ": "JWT", "kid": b64u(r.randbytes(24))}, separators=(",", ":")))
    return f"{head}.{b64u(json.dumps(claims, separators=(',', ':')))}.{b64u(r.randbytes(256))}"


def pypi_token(r: Random) -> str:
    ident = "-".join(hexs(r, n) for n in (8, 4, 4, 4, 12)).encode()
    caveat = json.dumps({"version": 1, "permissions": {"projects": [r.choice(SERVICES) + "-client"]}}).encode()
    return "pypi-" + b64u(b"\x02\x01\x08pypi.org\x02\x24" + ident + b"\x00\x02" + bytes([len(caveat)]) + caveat
                          + b"\x00\x00\x06\x20" + r.randbytes(32))


# --- the shape registry and what several shapes share ------------------------------------------------

SECRET_FAMILIES = ("encoded", "file_format", "placed")
CLEAN_FAMILIES = ("ciphertext", "public_material", "documented_example", "placeholder", "test_vector")

Made = str | tuple[str, list[str]]


@dataclass(frozen=True)
class Shape:
    family: str
    name: str
    make: Callable[[Random], Made]
    lang: str | None  # the code fence it is shown in; None: Markdown (chat, prose, tables) placed as it is


SHAPES: list[Shape] = []


def shape(family: str, lang: str | None = "text") -> Callable[[Callable[[Random], Made]], Callable[[Random], Made]]:
    def register(make: Callable[[Random], Made]) -> Callable[[Random], Made]:
        SHAPES.append(Shape(family, make.__name__.replace("_", "-"), make, lang))
        return make

    return register


PEOPLE = ("maria", "tom", "priya", "jonas", "li", "sam", "noor", "kai", "ines", "oleg")


def chat(r: Random, lines: list[tuple[str, str]]) -> str:
    h, m = r.randint(8, 17), r.randint(0, 40)
    out = []
    for who, said in lines:
        m += r.randint(0, 3)
        out.append(f"[{h:02d}:{m % 60:02d}] {who}: {said}")
    return "\n".join(out)


def split(r: Random, value: str) -> list[str]:
    cuts = sorted(r.sample(range(4, len(value) - 3), r.choice((1, 2))))
    return [value[i:j] for i, j in zip([0, *cuts], [*cuts, len(value)], strict=True)]


def secret_value(r: Random) -> str:
    return password(r) if r.random() < 0.5 else api_token(r)


def k8s_secret(c: dict[str, object], data: str, kind: str = "Opaque", section: str = "data") -> str:
    return (f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: {c['svc']}-credentials\n  namespace: {c['ns']}\n"
            f"type: {kind}\n{section}:\n{data}")


LOWER = "abcdefghijklmnopqrstuvwxyz"
UPPER_NUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


Maker = Callable[[Random], Made]


def prefixed(prefix: str) -> Callable[[str, str | None], Callable[[Maker], Maker]]:
    """`shape` with the names prefixed ``<prefix>-``: a module's shapes never collide with another module's."""

    def decorator(family: str, lang: str | None = "text") -> Callable[[Maker], Maker]:
        def register(make: Maker) -> Maker:
            make.__name__ = f"{prefix}_{make.__name__}"
            return shape(family, lang)(make)

        return register

    return decorator


def uuid4(r: Random) -> str:
    h = hexs(r, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{r.choice('89ab')}{h[17:20]}-{h[20:]}"
