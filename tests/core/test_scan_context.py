"""The secret scan's context rules (`knowledge.core.scan_context`) and the shared vocabulary
(`knowledge.core.scan_words`): each rule finds the credential where a secret's name governs it, and
each near miss — the same shape holding a name, a reference, a public value or prose — passes."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from knowledge.core.scan import find_secrets
from knowledge.core.scan_words import names_secret

PW = "Xq7vK2mP9wL4nR8tZ3"  # generated-looking: mixed case and digits, no word in it


def _found(text: str) -> set[str]:
    return {text[f.start:f.end] for f in find_secrets(text)}


SECRETS = {
    "call_argument": f'    .password("{PW}")\n',
    "call_second_argument": f'Credentials = new NetworkCredential("app", "{PW}"),\n',
    "rust_wrapped_argument": f'    .basic_auth("carol", Some("{PW}"))\n',
    "typed_constant": f'const SIGNING_SECRET: &str = "{PW}";\n',
    "conversion_call": f'var signingSecret = []byte("{PW}")\n',
    "powershell_secure_string": f'$p = ConvertTo-SecureString "{PW}" -AsPlainText -Force\n',
    "terraform_default": f'variable "admin_password" {{\n  type = string\n  default = "{PW}"\n}}\n',
    "cloudformation_default": f"DBPassword:\n  Type: String\n  NoEcho: true\n  Default: {PW}\n",
    "container_env": f"env:\n  - name: DB_PASSWORD\n    value: \"{PW}\"\n",
    "consul_record": f'{{\n  "key": "config/api/db/password",\n  "flags": 0,\n  "value": "{PW}"\n}}\n',
    "flag_value": f"deployctl push --client-secret {PW} --region eu\n",
    "mysql_attached": f"mysql -h db.internal -u root -p{PW} orders\n",
    "sqlcmd_flag": f"sqlcmd -S db.internal -U sa -P '{PW}' -Q 'SELECT 1'\n",
    "curl_user": f"curl --user 'ops:{PW}' https://ci.internal/job/build\n",
    "oracle_thin": f"url=jdbc:oracle:thin:scott/{PW}@//db.internal:1521/ORCL\n",
    "value_before_name": f"Log in to the portal with {PW} as the password.\n",
    "authenticates_with": f"The CI job authenticates with {PW}, which belongs to the bot account.\n",
    "qualified_key_prose": f"The API key is {PW}.\n",
    "shell_output": f"$ kubectl get secret db -o jsonpath='{{.data.password}}'\n"
                    f"{base64.b64encode(PW.encode()).decode()}\n",
    "chat_answer_after_blank_lines":
        f"**Ana** 10:02\nwhat's the webhook secret? tests fail\n\n**Bo** 10:04\nit's\n\n{PW}\n",
    "table_user_pair": f"| Host | Credentials |\n|---|---|\n| db.internal | deploy : {PW} |\n",
    # Longer than any password, still a credential (an AWS session token runs to 600+ characters).
    "long_session_token": "aws_session_token = " + ("IQoJb3JpZ2luX2VjEHc" + PW) * 24 + "\n",
    "armored_hex_key": "-----BEGIN OpenVPN Static key V1-----\n" + "\n".join(
        "".join(f"{(i * 37 + j * 11 + i * j) % 256:02x}" for j in range(16)) for i in range(16))
                       + "\n-----END OpenVPN Static key V1-----\n",
}

CLEAN = {
    "call_with_a_reference": '    .password(std::env::var("DB_PASSWORD")?)\n',
    "env_lookup_expression": 'var secret = Environment.GetEnvironmentVariable("SIGNING_SECRET");\n',
    "terraform_description": 'variable "admin_password" {\n  description = "The RDS master password"\n}\n',
    "container_env_from_secret": "env:\n  - name: DB_PASSWORD\n    valueFrom:\n      secretKeyRef:\n        name: db\n",
    "keyvault_reference": '{"name": "API_KEY", "value": "@Microsoft.KeyVault(VaultName=kv;SecretName=api-key)"}\n',
    "port_flag": "ssh -p 2222 deploy@bastion.internal\n",
    "public_key_flag": "minisign -Vm release.tar.gz -P RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3\n",
    "prose_code_span_with_spaces": "You should now see a Secret resource named `cluster-(cluster suffix)` there.\n",
    "prose_gap_without_code": "The token can be obtained with `grpc.metadata.FromIncomingContext(`.\n",
    "comment_then_assignment": "# grab this token\nTOKEN=token-01\nCLUSTER_STATE=new\n",
    "public_armored_key":
        "-----BEGIN PGP PUBLIC KEY BLOCK-----\n" + "mQINBGR" * 20 + "\n-----END PGP PUBLIC KEY BLOCK-----\n",
    "openssl_salted_ciphertext":
        "$ cat secrets.env.enc\nU2FsdGVkX18j+SnvLuYsuwwj+27x0IqGS/rynaFbJzaqLxlynaQRfTDdoTA18WRx\n",
    # `kubeseal --raw` output kept in Helm values: ciphertext, by the key it sits under.
    "kubeseal_values": "sealedSecrets:\n  ingest-db:\n    password: Ag" + ("Cyp1lDN1NSSCptCkFf" + PW) * 20 + "\n",
    "bare_key_prose": f"the key is {PW}\n",  # a bare "key" names nothing secret (a cache key, a map key)
    "documented_rfc6749": '{"access_token":"2YotnFZFEjr1zCsicMWpAA","refresh_token":"tGzv3JOkF0XG5Qx2TlKWIA"}\n',
}


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_a_secret_its_name_governs_is_found(name: str) -> None:
    text = SECRETS[name]
    assert find_secrets(text), name


def test_the_finding_covers_the_value_not_its_name() -> None:
    for name in ("call_argument", "typed_constant", "terraform_default", "container_env", "flag_value",
                 "sqlcmd_flag", "value_before_name", "qualified_key_prose"):
        assert PW in _found(SECRETS[name]), name


@pytest.mark.parametrize("name", sorted(CLEAN))
def test_near_misses_pass(name: str) -> None:
    assert find_secrets(CLEAN[name]) == [], name


@pytest.mark.parametrize(("name", "secret"), [
    ("DB_PASSWORD", True), ("clientSecret", True), ("app.security.master-key", True), ("X-Honeycomb-Team", True),
    ("basic_auth", True), ("signing_key", True), ("apiKey", True),
    ("secretName", False), ("token_url", False), ("password_hash", False), ("primary_key", False), ("key", False),
    ("cache_key", False), ("passwordPolicy", False), ("api_key_id", False),
])
def test_one_vocabulary_names_secrets(name: str, secret: bool) -> None:
    assert names_secret(name) is secret


_PIECES = ["password", "secret", "token", "api_key", ".password(", '("', '")', '", "', "Some(", " = ", ": ", "{", "}",
           "\n", "  default = ", "- name: ", "value: ", " -p", " -P ", "--user ", "mysql ", "thin:", "/", "@//",
           " as the password", "authenticates with ", "ConvertTo-SecureString ", " -AsPlainText", "'", "`", PW]


@given(st.lists(st.sampled_from(_PIECES), max_size=60).map("".join))
def test_the_context_rules_are_total_and_deterministic(text: str) -> None:
    found = find_secrets(text)
    assert found == find_secrets(text)
    assert all(0 <= f.start < f.end <= len(text) for f in found)
