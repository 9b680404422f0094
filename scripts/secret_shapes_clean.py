"""Clean snippet shapes for scripts/build_secrets.py: what a secret scan must let through.

Families ``ciphertext``, ``public_material``, ``documented_example``, ``placeholder`` and ``test_vector``. A
shape returns its snippet only. Near misses of the secret families' styles (a ``password:`` key holding a
reference, a Kubernetes Secret of placeholders) are ``placeholder`` shapes named ``nearmiss-<family>-…``.
Test vectors are computed from their published inputs (RFC 4231, 6238, 7515, 8032, 7748), not copied.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from collections.abc import Callable
from random import Random

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, x25519
from secret_formats import (
    ALNUM,
    PEOPLE,
    SERVICES,
    Made,
    age_armor,
    age_recipient,
    b64,
    b64u,
    big,
    certificate,
    ctx,
    date,
    ed25519_keys,
    hexs,
    k8s_secret,
    mpint,
    p256_key,
    pem,
    pgp_message,
    pgp_public_key,
    pick,
    rsa_spki,
    sealed,
    shape,
    sops_enc,
    ssh_ed25519_pub,
    sstr,
    user,
    vault_hex,
    x25519_keys,
)

# --- ciphertext (clean): encrypted material --------------------------------------------------------------


def sealed_doc(r: Random) -> dict[str, object]:
    c = ctx(r)
    return {"apiVersion": "bitnami.com/v1alpha1", "kind": "SealedSecret",
            "metadata": {"name": f"{c['svc']}-db", "namespace": c["ns"]},
            "spec": {"encryptedData": {"username": sealed(r, 6), "password": sealed(r, r.randint(14, 28))},
                     "template": {"metadata": {"name": f"{c['svc']}-db"}, "type": "Opaque"}}}


@shape("ciphertext", "yaml")
def sealedsecret_yaml(r: Random) -> Made:
    c = ctx(r)
    keys = ("username", "password", "api-token")[: int(str(c["n"])) % 3 + 1]
    data = "".join(f"    {k}: {sealed(r, r.randint(6, 40))}\n" for k in keys)
    return (f"apiVersion: bitnami.com/v1alpha1\nkind: SealedSecret\nmetadata:\n  name: {c['svc']}-db\n"
            f"  namespace: {c['ns']}\n"
            f"spec:\n  encryptedData:\n{data}  template:\n    metadata:\n      name: {c['svc']}-db\n    type: Opaque\n")


@shape("ciphertext", "json")
def sealedsecret_json(r: Random) -> Made:
    return json.dumps(sealed_doc(r), indent=2)


def sops_meta(r: Random, indent: str = "    ") -> str:
    deeper = indent + " " * 8  # past "- " and "enc: |"
    enc = age_armor(r, 32).replace("\n", "\n" + deeper)
    return (f"sops:\n{indent}kms: []\n{indent}age:\n{indent}    - recipient: {age_recipient(r)}\n{indent}      enc: |\n"
            f"{deeper}{enc}\n{indent}lastmodified: \"{date(r)}\"\n{indent}mac: {sops_enc(r, 64)}\n"
            f"{indent}unencrypted_suffix: _unencrypted\n{indent}version: 3.8.1\n")


@shape("ciphertext", "yaml")
def sops_yaml(r: Random) -> Made:
    return (f"database:\n    user: {sops_enc(r, 6)}\n    password: {sops_enc(r, 20)}\n"
            f"    port: {sops_enc(r, 4, 'int')}\n"
            f"api_token: {sops_enc(r, 40)}\n{sops_meta(r)}")


@shape("ciphertext", "yaml")
def sops_k8s_secret(r: Random) -> Made:
    data = f"    password: {sops_enc(r, 24)}\n    token: {sops_enc(r, 40)}\n"
    return k8s_secret(ctx(r), data, section="stringData") + sops_meta(r, "  ")


@shape("ciphertext", "json")
def sops_json(r: Random) -> Made:
    doc = {"db_password": sops_enc(r, 22), "api_key": sops_enc(r, 32),
           "sops": {"kms": None, "age": [{"recipient": age_recipient(r), "enc": age_armor(r, 32) + "\n"}],
                    "lastmodified": date(r), "mac": sops_enc(r, 64), "version": "3.8.1"}}
    return json.dumps(doc, indent=4)


@shape("ciphertext", "ini")
def sops_dotenv(r: Random) -> Made:
    return (f"DB_PASSWORD={sops_enc(r, 20)}\nSTRIPE_KEY={sops_enc(r, 32)}\n"
            f"sops_age__list_0__map_recipient={age_recipient(r)}\n"
            f"sops_mac={sops_enc(r, 64)}\nsops_lastmodified={date(r)}\nsops_version=3.8.1\n")


@shape("ciphertext", "text")
def ansible_vault_file(r: Random) -> Made:
    return vault_hex(r) + "\n"


@shape("ciphertext", "yaml")
def ansible_vault_inline(r: Random) -> Made:
    return f"db_user: {user(r)}\ndb_password: !vault |\n  " + vault_hex(r).replace("\n", "\n  ") + "\n"


@shape("ciphertext", "text")
def pgp_message_armor(r: Random) -> Made:
    return pgp_message(r)


@shape("ciphertext", "text")
def age_armor_file(r: Random) -> Made:
    armor = age_armor(r, r.randint(40, 400))
    return f"$ age -d -i key.txt secrets.env.age > secrets.env\n$ cat secrets.env.age\n{armor}"


# --- public_material (clean) -----------------------------------------------------------------------------


def ssh_rsa_line(r: Random) -> str:
    blob = sstr("ssh-rsa") + mpint(b"\x01\x00\x01") + mpint(big(r, r.choice((256, 384))))
    return f"ssh-rsa {b64(blob)} {user(r)}@ws"


def ssh_ed_line(r: Random) -> str:
    return "ssh-ed25519 " + b64(ssh_ed25519_pub(ed25519_keys(r)[1])) + f" {user(r)}@{r.choice(SERVICES)}-laptop"


@shape("public_material", "text")
def ssh_ed25519_pubkey(r: Random) -> Made:
    return ssh_ed_line(r) + "\n"


@shape("public_material", "text")
def ssh_rsa_pubkey(r: Random) -> Made:
    return ssh_rsa_line(r) + "\n"


@shape("public_material", "text")
def authorized_keys_file(r: Random) -> Made:
    return (f'no-port-forwarding,from="10.0.0.0/8" {ssh_ed_line(r)}\n{ssh_rsa_line(r)}\n'
            f'command="/usr/local/bin/backup-only",restrict {ssh_ed_line(r)}\n')


@shape("public_material", "text")
def known_hosts_lines(r: Random) -> Made:
    return "".join(f"{ctx(r)['host']} {line.split(' ', 2)[0]} {line.split(' ', 2)[1]}\n" for line in
                   (ssh_ed_line(r), ssh_rsa_line(r), ssh_ed_line(r)))


@shape("public_material", "text")
def pem_certificate(r: Random) -> Made:
    return certificate(r, str(ctx(r)["host"]))


@shape("public_material", "yaml")
def pem_certificate_chain_in_yaml(r: Random) -> Made:
    chain = certificate(r, str(ctx(r)["host"])) + "\n" + certificate(r, "Northwind Internal CA")
    return "tls:\n  ca.crt: |\n    " + chain.replace("\n", "\n    ") + "\n  insecureSkipVerify: false\n"


@shape("public_material", "text")
def pem_public_key_rsa(r: Random) -> Made:
    return pem("PUBLIC KEY", rsa_spki(r, r.choice((2048, 4096))))


@shape("public_material", "text")
def pem_public_key_ec(r: Random) -> Made:
    if r.random() < 0.5:
        pub: ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey = p256_key(r).public_key()
    else:
        pub = ed25519.Ed25519PrivateKey.from_private_bytes(r.randbytes(32)).public_key()
    return pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


@shape("public_material", "ini")
def wireguard_peer_publickey(r: Random) -> Made:
    return "".join(f"[Peer]\n# {p}\nPublicKey = {b64(x25519_keys(r)[1])}\nAllowedIPs = 10.8.0.{i + 2}/32\n\n"
                   for i, p in enumerate(r.sample(PEOPLE, 3)))


@shape("public_material", "text")
def pgp_public_key_block(r: Random) -> Made:
    return pgp_public_key(r, f"{r.choice(PEOPLE).title()} Release Signing <release@northwind-data.net>")


@shape("public_material", "json")
def jwks_rsa_public(r: Random) -> Made:
    keys = [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": b64u(r.randbytes(12)), "n": b64u(big(r, 256)),
             "e": "AQAB"} for _ in range(r.randint(1, 2))]
    return json.dumps({"keys": keys}, indent=2)


@shape("public_material", "json")
def jwks_ec_public(r: Random) -> Made:
    nums = p256_key(r).public_key().public_numbers()
    return json.dumps({"keys": [{"kty": "EC", "crv": "P-256", "kid": hexs(r, 16), "use": "sig",
                                 "x": b64u(nums.x.to_bytes(32)), "y": b64u(nums.y.to_bytes(32))}]}, indent=2)


@shape("public_material", "text")
def age_recipients_file(r: Random) -> Made:
    return "".join(f"# {p}\n{age_recipient(r)}\n" for p in r.sample(PEOPLE, 3))


# --- documented_example (clean): vendor-documented example credentials -----------------------------------

AWS_EXAMPLE = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
AWS_EXAMPLE_2 = ("AKIAI44QH8DHBEXAMPLE", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY")
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
JWT_IO = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2"
          "MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
DOCUMENTED = (*AWS_EXAMPLE, *AWS_EXAMPLE_2, AZURITE_KEY, JWT_IO)  # build_secrets allows these in clean records


@shape("documented_example", "ini")
def aws_docs_keypair_credentials_file(r: Random) -> Made:
    return (f"[default]\naws_access_key_id = {AWS_EXAMPLE[0]}\naws_secret_access_key = {AWS_EXAMPLE[1]}\n"
            f"region = {ctx(r)['region']}\n")


@shape("documented_example", "bash")
def aws_docs_keypair_env(r: Random) -> Made:
    return (f"export AWS_ACCESS_KEY_ID={AWS_EXAMPLE[0]}\nexport AWS_SECRET_ACCESS_KEY={AWS_EXAMPLE[1]}\n"
            f"export AWS_DEFAULT_REGION={ctx(r)['region']}\naws s3 ls\n")


@shape("documented_example", "text")
def aws_docs_second_keypair(r: Random) -> Made:
    return (f"$ aws configure --profile {user(r)}\nAWS Access Key ID [None]: {AWS_EXAMPLE_2[0]}\n"
            f"AWS Secret Access Key [None]: {AWS_EXAMPLE_2[1]}\nDefault region name [None]: {ctx(r)['region']}\n")


@shape("documented_example", "bash")
def stripe_docs_test_keys(r: Random) -> Made:
    key = r.choice(("sk_test_4eC39HqLyjWDarjtT1zdp7dc", "sk_test_BQokikJOvBiI2HlWgH4olfQ2"))
    return (f"curl https://api.stripe.com/v1/charges \\\n  -u {key}: \\\n  -d amount={r.randint(5, 90) * 100} \\\n"
            "  -d currency=usd \\\n  -d source=tok_visa\n"
            "# publishable key for the same docs account: pk_test_TYooMQauvdEDq54NiTphI7jx\n")


@shape("documented_example", "python")
def stripe_example_marked_key(r: Random) -> Made:
    return f"# example key from the integration guide\nstripe.api_key = \"sk_test_EXAMPLE{pick(r, ALNUM, 17)}\"\n"


@shape("documented_example", "bash")
def slack_xoxb_masked(r: Random) -> Made:
    tok = r.choice(("xoxb-xxxxxxxxxxxx-xxxxxxxxxxxxx-xxxxxxxxxxxxxxxxxxxxxxxx",
                    "xoxb-XXXXXXXXXXXX-XXXXXXXXXXXXX-XXXXXXXXXXXXXXXXXXXXXXXX", "xoxb-1234-5678-xxxxxxxxxxxx"))
    return f"export SLACK_BOT_TOKEN={tok}\nexport SLACK_SIGNING_SECRET={'x' * 32}\npython app.py\n"


@shape("documented_example", "python")
def slack_docs_fake_token(r: Random) -> Made:
    return ('client = WebClient(token="xoxb-not-a-real-token-this-will-not-work")\n'
            'client.chat_postMessage(channel="#general", text="hi")\n')


@shape("documented_example", "bash")
def jwtio_example_token(r: Random) -> Made:
    return (f'# the jwt.io sample token (HS256, secret "your-256-bit-secret")\n'
            f'curl -H "Authorization: Bearer {JWT_IO}" http://localhost:{r.choice((3000, 8080))}/me\n')


@shape("documented_example", "ini")
def azurite_devstore_connection_string(r: Random) -> Made:
    return ("AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
            f"AccountKey={AZURITE_KEY};"
            f"BlobEndpoint=http://127.0.0.1:{r.choice((10000, 10000, 20000))}/devstoreaccount1;\n")


@shape("documented_example", "python")
def flask_docs_secret_key(r: Random) -> Made:
    return ("# Set the secret key to some random bytes. Keep this really secret!\n"
            "app.secret_key = b'_5#y2L\"F4Q8z\\n\\xec]/'\n")


@shape("documented_example", "bash")
def postgres_image_docs_password(r: Random) -> Made:
    tag = r.choice((14, 15, 16))
    return f"docker run --name some-postgres -e POSTGRES_PASSWORD=mysecretpassword -d postgres:{tag}\n"


@shape("documented_example", "bash")
def mysql_image_docs_password(r: Random) -> Made:
    return "docker run --name some-mysql -e MYSQL_ROOT_PASSWORD=my-secret-pw -d mysql:tag\n"


@shape("documented_example", "bash")
def minio_default_credentials(r: Random) -> Made:
    return ("# default credentials of a fresh server\nexport MINIO_ROOT_USER=minioadmin\n"
            "export MINIO_ROOT_PASSWORD=minioadmin\nminio server /data\n")


@shape("documented_example", "yaml")
def docs_marked_example_password(r: Random) -> Made:
    v = r.choice(("example-password", "ExamplePassw0rd!", "s3cr3t-example", "my-example-token-value"))
    return f"# Example values only; replace them before deploying.\nadmin:\n  user: admin\n  password: \"{v}\"\n"


@shape("documented_example", "ini")
def twilio_docs_masked_sid(r: Random) -> Made:
    return "TWILIO_ACCOUNT_SID=ACXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\nTWILIO_AUTH_TOKEN=your_auth_token\n"


# --- placeholder (clean): placeholders, redactions, references, and near misses of every family --------

PLACEHOLDERS: dict[str, tuple[str | None, tuple[str, ...]]] = {
    "angle_bracket_token": ("bash", ('curl -H "Authorization: Bearer <your-token>" https://{host}/api/v1/jobs\n',
                                     "export GITHUB_TOKEN=<your-github-token>\ngh auth status\n")),
    "env_var_reference": ("yaml", ("database:\n  user: {user}\n  password: ${{DB_PASSWORD}}\n",
                                   "DATABASE_URL=postgres://{user}:${{PGPASSWORD}}@{host}:5432/{db}\n")),
    "helm_template_values": ("yaml", ('data:\n  password: {{{{ .Values.db.password | b64enc | quote }}}}\n',
                                      'env:\n  - name: API_TOKEN\n    value: {{{{ .Values.apiToken | quote }}}}\n')),
    "github_actions_secrets_expr": ("yaml", ("env:\n  NPM_TOKEN: ${{{{ secrets.NPM_TOKEN }}}}\n"
                                             "  DB_PASSWORD: ${{{{ secrets.DB_PASSWORD }}}}\n",)),
    "changeme_default": ("ini", ("[admin]\nuser = admin\npassword = changeme\n", "ADMIN_PASSWORD=changeme\n")),
    "asterisks_masked": ("text", ("DB_PASSWORD=********\nAPI_TOKEN=****************\n", "password: \"********\"\n")),
    "redacted_marker": ("json", ('{{"user": "{user}", "password": "[REDACTED]", "token": "<redacted>"}}\n',)),
    "x_run_masked": ("bash", ("export API_KEY=xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n",
                              "GITHUB_TOKEN=ghp_xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n")),
    "truncated_ellipsis": ("text", ("OPENAI_API_KEY=sk-...\nGITHUB_TOKEN=ghp_...\n", "token: sk-proj-...{n}f3\n")),
    "todo_marker": ("yaml", ("smtp:\n  user: {user}\n  password: TODO\n  api_key: TBD  # ask {svc} team\n",)),
    "shell_cat_run_secrets": ("bash", ('export DB_PASSWORD="$(cat /run/secrets/db)"\nexec {svc}-server --port 8080\n',
                                       "PGPASSWORD=$(vault kv get -field=password secret/{svc}/db) psql -h {host}\n")),
    "k8s_secretkeyref": ("yaml", ("env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n"
                                  "        name: {svc}-db\n        key: password\n",)),
    "vault_reference": ("yaml", ("password: vault:secret/data/{svc}/db#password\ntoken: ref+awssecrets://{svc}/api#token\n",)),
    "empty_value": ("ini", ("[database]\nuser = {user}\npassword =\n", 'api_key = ""\nsecret = ""\n')),
    "nearmiss_encoded_k8s_stringdata": ("yaml", ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {svc}-db\n"
                                                 "stringData:\n  username: <db-user>\n  password: <db-password>\n",)),
    "nearmiss_encoded_k8s_data_b64_placeholder": (
        "yaml", ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {svc}\ndata:\n"
                 "  password: {b64_changeme}\n  token: {b64_placeholder}\n",)),
    "nearmiss_encoded_dockerconfig_envref": ("json", ('{{"auths": {{"ghcr.io": {{"auth": "${{REGISTRY_AUTH}}"}}}}}}',)),
    "nearmiss_file_netrc_placeholder": ("text", ("machine {host}\n  login <username>\n  password <password>\n",)),
    "nearmiss_file_pgpass_envref": ("text", ("{host}:5432:{db}:{user}:${{PGPASSWORD}}\n*:*:*:postgres:<password>\n",)),
    "nearmiss_file_ppk_elided": ("text", ("PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: <comment>\n"
                                          "Public-Lines: 2\n...\nPrivate-Lines: 1\n...\nPrivate-MAC: ...\n",)),
    "nearmiss_file_wireguard_placeholder": ("ini", ("[Interface]\nPrivateKey = <server-private-key>\n"
                                                    "ListenPort = 51820\n",)),
    "nearmiss_file_sas_redacted": ("text", ("https://{svc}store.blob.core.windows.net/c/f.bin?sv=2022-11-02&sp=r&sig=REDACTED\n",)),
    "nearmiss_placed_chat_no_value": (None, ("[09:1{n}] maria: what's the password for the {svc} db?\n"
                                             "[09:1{n}] tom: it's in 1Password under {svc}/prod, don't paste it\n",)),
    "nearmiss_placed_prose_policy": (None, ("The root password must be at least 16 characters long and is rotated "
                                            "every {n}0 days; the token used to log in expires after one hour.\n",)),
    "nearmiss_placed_split_env": ("python", ('dsn = "postgres://" + user + ":" + os.environ["PGPASSWORD"]'
                                             ' + "@{host}/{db}"\n',)),
    "nearmiss_placed_table_placeholders": (None, ("| env | user | password |\n|---|---|---|\n"
                                                  "| {ns} | {user} | `<from vault>` |\n"
                                                  "| prod | {user} | `${{PROD_DB_PASSWORD}}` |\n",)),
    "nearmiss_placed_django_env": ("python", ('SECRET_KEY = os.environ["DJANGO_SECRET_KEY"]\nDEBUG = False\n',)),
    "nearmiss_placed_xml_property_ref": ("xml", ("<server>\n  <id>{svc}</id>\n"
                                                 "  <username>${{env.REPO_USER}}</username>\n"
                                                 "  <password>${{env.REPO_PASSWORD}}</password>\n</server>\n",)),
    "nearmiss_placed_observability_envref": ("yaml", ("datadog:\n  apiKeyExistingSecret: datadog-secret\n"
                                                      "sentry:\n  dsn: ${{SENTRY_DSN}}\n",)),
}


def placeholder_maker(templates: tuple[str, ...]) -> Callable[[Random], Made]:
    def make(r: Random) -> Made:
        filler = b64(r.choice(("<token>", "REPLACE_ME", "password")))
        c = ctx(r) | {"b64_changeme": b64("changeme"), "b64_placeholder": filler}
        return r.choice(templates).format(**c)

    return make


for _name, (_lang, _templates) in PLACEHOLDERS.items():
    _maker = placeholder_maker(_templates)
    _maker.__name__ = _name
    shape("placeholder", _lang)(_maker)


# --- test_vector (clean): published test vectors, digests, hashes, identifiers ---------------------------


@shape("test_vector", "python")
def rfc4231_hmac_vectors(r: Random) -> Made:
    cases = [(b"\x0b" * 20, b"Hi There"), (b"Jefe", b"what do ya want for nothing?"), (b"\xaa" * 20, b"\xdd" * 50)]
    lines = [f'    ("{k.hex()}", "{d.hex()}", "{hmac.new(k, d, hashlib.sha256).hexdigest()}"),' for k, d in cases]
    return "# RFC 4231 test cases 1-3: (key, data, HMAC-SHA-256)\nRFC4231 = [\n" + "\n".join(lines) + "\n]\n"


@shape("test_vector", "json")
def rfc7515_jws_example(r: Random) -> Made:
    k = "AyM1SysPpbyDfgZld3umj1qzKObwVMkoqQ-EstJQLr_T-1qS0gZH75aKtMN3Yj0iPS4hcgUuTwjAzZr1Z9CAow"
    signing = ("eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9l"
               "eGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ")
    sig = b64u(hmac.new(base64.urlsafe_b64decode(k + "=="), signing.encode(), hashlib.sha256).digest())
    doc = {"source": "RFC 7515, Appendix A.1", "jwk": {"kty": "oct", "k": k}, "jws": f"{signing}.{sig}"}
    return json.dumps(doc, indent=2)


@shape("test_vector", "python")
def rfc6238_totp_seed(r: Random) -> Made:
    seed = b"12345678901234567890"
    rows = []
    for t in (59, 1111111109, 1111111111, 1234567890, 2000000000, 20000000000):
        digest = hmac.new(seed, struct.pack(">Q", t // 30), hashlib.sha1).digest()
        code = (int.from_bytes(digest[(o := digest[-1] & 15) : o + 4]) & 0x7FFFFFFF) % 10**8
        rows.append(f"    ({t}, \"{code:08d}\"),")
    return (f'SEED = b"{seed.decode()}"  # RFC 6238 Appendix B, SHA-1; base32 {base64.b32encode(seed).decode()}\n'
            "VECTORS = [\n" + "\n".join(rows) + "\n]\n")


@shape("test_vector", None)
def rfc4648_base_vectors(r: Random) -> Made:
    words = ["", "f", "fo", "foo", "foob", "fooba", "foobar"]
    enc = r.choice((("BASE64", base64.b64encode), ("BASE32", base64.b32encode), ("BASE16", base64.b16encode)))
    rows = "".join(f'- {enc[0]}("{w}") = "{enc[1](w.encode()).decode()}"\n' for w in words)
    return "RFC 4648 section 10 test vectors:\n\n" + rows


@shape("test_vector", "python")
def rfc8032_ed25519_vector(r: Random) -> Made:
    sk = bytes.fromhex("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
    key = ed25519.Ed25519PrivateKey.from_private_bytes(sk)
    sig = key.sign(b"").hex()
    return (f'# RFC 8032 section 7.1, TEST 1 (empty message)\nSECRET_KEY = "{sk.hex()}"\n'
            f'PUBLIC_KEY = "{key.public_key().public_bytes_raw().hex()}"\n'
            f'SIGNATURE = (\n    "{sig[:64]}"\n    "{sig[64:]}"\n)\n')


@shape("test_vector", "text")
def rfc7748_x25519_vector(r: Random) -> Made:
    alice, bob = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a", (
        "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")
    a = x25519.X25519PrivateKey.from_private_bytes(bytes.fromhex(alice))
    b = x25519.X25519PrivateKey.from_private_bytes(bytes.fromhex(bob))
    return (f"RFC 7748 section 6.1\nAlice's private key, a: {alice}\n"
            f"Alice's public key, X25519(a, 9): {a.public_key().public_bytes_raw().hex()}\n"
            f"Bob's public key: {b.public_key().public_bytes_raw().hex()}\n"
            f"Their shared secret, K: {a.exchange(b.public_key()).hex()}\n")


@shape("test_vector", "text")
def sha256sums_file(r: Random) -> Made:
    v = f"{r.randint(1, 3)}.{r.randint(0, 20)}.{r.randint(0, 9)}"
    name = r.choice(SERVICES)
    arches = ("linux-amd64", "linux-arm64", "darwin-arm64")
    return "".join(f"{hexs(r, 64)}  {name}-{v}-{arch}.tar.gz\n" for arch in arches)


@shape("test_vector", "text")
def git_log_shas(r: Random) -> Made:
    return "".join(f"commit {hexs(r, 40)}\nAuthor: {p.title()} <{p}@northwind-data.net>\n"
                   f"Date:   Tue Mar {r.randint(1, 28)} 10:0{r.randint(0, 9)}:00 2024\n\n"
                   f"    Fix retry budget in {r.choice(SERVICES)}\n\n" for p in r.sample(PEOPLE, 3))


@shape("test_vector", "yaml")
def docker_image_digest(r: Random) -> Made:
    c = ctx(r)
    return (f"containers:\n  - name: {c['svc']}\n    image: ghcr.io/northwind/{c['svc']}@sha256:{hexs(r, 64)}\n"
            f"  - name: proxy\n    image: envoyproxy/envoy:v1.29.1@sha256:{hexs(r, 64)}\n")


@shape("test_vector", "json")
def sri_integrity_lockfile(r: Random) -> Made:
    pkgs = {f"node_modules/{n}": {"version": f"{r.randint(1, 9)}.{r.randint(0, 9)}.{r.randint(0, 9)}",
                                   "resolved": f"https://registry.npmjs.org/{n}/-/{n}-1.0.0.tgz",
                                   "integrity": "sha512-" + b64(r.randbytes(64))} for n in ("lodash", "ms", "debug")}
    tag = f'<script src="/app.js" integrity="sha384-{b64(r.randbytes(48))}" crossorigin="anonymous"></script>'
    return json.dumps({"packages": pkgs}, indent=2) + "\n" + tag


def bcrypt_hash(r: Random) -> str:
    return f"$2{r.choice('aby')}${r.choice(('05', '10', '12'))}${pick(r, './' + ALNUM, 53)}"


@shape("test_vector", "text")
def bcrypt_htpasswd(r: Random) -> Made:
    if r.random() < 0.5:
        return "".join(f"{u}:{bcrypt_hash(r)}\n" for u in r.sample(PEOPLE, 3))
    return f"configs:\n  secret:\n    argocdServerAdminPassword: \"{bcrypt_hash(r)}\"\n"


@shape("test_vector", "text")
def argon2_hashes(r: Random) -> Made:
    return "".join(f"{p}\t$argon2id$v=19$m=65536,t=3,p=4${b64(r.randbytes(16)).rstrip('=')}"
                   f"${b64(r.randbytes(32)).rstrip('=')}\n" for p in r.sample(PEOPLE, 3))


@shape("test_vector", "text")
def uuid_list(r: Random) -> Made:
    def uid() -> str:
        h = hexs(r, 32)
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{r.choice('89ab')}{h[17:20]}-{h[20:]}"

    return f"tenant_id: {uid()}\nsubscription_id: {uid()}\nclient_id: {uid()}\ncorrelation: {uid()}\n"


@shape("test_vector", "json")
def s3_etag_listing(r: Random) -> Made:
    objs = [{"Key": f"exports/{date(r)[:10]}/part-{i:05d}.parquet",
             "ETag": f'"{hexs(r, 32)}{"" if i else "-" + str(r.randint(2, 40))}"',
             "Size": r.randint(10**5, 10**9), "StorageClass": "STANDARD"} for i in range(3)]
    return json.dumps({"Contents": objs}, indent=2)


@shape("test_vector", "text")
def aws_request_ids(r: Random) -> Made:
    h = hexs(r, 32)
    return (f"START RequestId: {h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]} Version: $LATEST\n"
            f"x-amz-request-id: {pick(r, '0123456789ABCDEF', 16)}\nx-amz-id-2: {b64(r.randbytes(57))}\n")
