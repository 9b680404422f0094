"""Held-out snippet shapes for scripts/build_secrets.py: new shapes of all eight families, part ``heldout``.

Written after the scan had been tuned on the ``fit`` part and its author had seen the ``check`` part, so
none of these shapes informed the scan's rules. Every shape registered here belongs, whole, to the part
``heldout`` (no hash split), and the builder makes its records only when asked (``--heldout``): the records
of the other parts, and their order, do not change. The conventions are those of `secret_shapes` (secret
families: ``(snippet, needles)``, the credential as written) and `secret_shapes_clean` (clean families: the
snippet only). Values come from `secret_formats`; published vectors are computed from their inputs and
checked against the published outputs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from datetime import UTC, datetime, timedelta
from random import Random

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.x509.oid import NameOID
from secret_formats import (
    ALNUM,
    DOMAINS,
    PEOPLE,
    SERVICES,
    Made,
    api_token,
    aws_pair,
    b64,
    b64u,
    bare_token,
    bare_value,
    certificate,
    checksummed,
    ctx,
    date,
    ed25519_keys,
    hexs,
    p256_key,
    password,
    pem,
    pick,
    rsa_pkcs8,
    rsa_spki,
    shape,
    ssh_ed25519_pub,
    sstr,
    url_quote,
    user,
)

LOWER = "abcdefghijklmnopqrstuvwxyz"
LETTERS = LOWER + LOWER.upper()
URLSAFE = ALNUM + "-_"


def uuid4(r: Random) -> str:
    h = hexs(r, 32)
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{r.choice('89ab')}{h[17:20]}-{h[20:]}"


def ip(r: Random) -> str:
    return f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(2, 254)}"


def quoted_password(r: Random) -> str:
    """A password with at least one character that URL-encoding changes: the encoded form differs."""
    while True:
        pw = password(r)
        if url_quote(pw) != pw:
            return pw


def llm_token(r: Random) -> str:
    kind = r.randrange(3)
    if kind == 0:
        return "hf_" + pick(r, LETTERS, 34)
    if kind == 1:
        return "sk-" + pick(r, ALNUM, 20) + "T3BlbkFJ" + pick(r, ALNUM, 20)
    return "sk-ant-api03-" + pick(r, URLSAFE, 93) + "AA"


# --- encoded (secret) -------------------------------------------------------------------------------------


@shape("encoded", "yaml")
def kubeconfig_client_key_data_b64(r: Random) -> Made:
    c = ctx(r)
    key = p256_key(r).private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                    serialization.NoEncryption()).decode()
    enc = b64(key)
    ca, crt = b64(certificate(r, "kubernetes-ca") + "\n"), b64(certificate(r, f"{c['user']}-admin") + "\n")
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n"
            f"    server: https://{c['host']}:6443\n  name: {c['ns']}-cluster\ncontexts:\n- context:\n"
            f"    cluster: {c['ns']}-cluster\n    user: {c['user']}-admin\n  name: {c['ns']}\n"
            f"current-context: {c['ns']}\nusers:\n- name: {c['user']}-admin\n  user:\n"
            f"    client-certificate-data: {crt}\n    client-key-data: {enc}\n"), [enc]


@shape("encoded", "text")
def eml_base64_body_temp_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    who = r.choice(PEOPLE)
    domain = str(c["host"]).split(".", 1)[1]
    body = (f"Hello {who.title()},\n\nyour account on {c['host']} has been created.\n\n"
            f"Username: {who}\nTemporary password: {pw}\n\nYou will be asked to change it at the first login.\n\n"
            "-- \nIT Service Desk\n")
    enc = base64.encodebytes(body.encode()).decode().rstrip("\n")
    boundary = "=_" + hexs(r, 24)
    return (f"Return-Path: <servicedesk@{domain}>\nDate: Tue, {r.randint(1, 28)} May 2024 09:{r.randint(10, 59)}:"
            f"{r.randint(10, 59)} +0000\nFrom: IT Service Desk <servicedesk@{domain}>\nTo: {who}@{domain}\n"
            f"Subject: Your new account on {c['svc']}\nMessage-ID: <{hexs(r, 16)}@{domain}>\nMIME-Version: 1.0\n"
            f'Content-Type: multipart/alternative; boundary="{boundary}"\n\n--{boundary}\n'
            'Content-Type: text/plain; charset="utf-8"\nContent-Transfer-Encoding: base64\n\n'
            f"{enc}\n\n--{boundary}--\n"), [enc]


@shape("encoded", "json")
def ec2_launch_template_userdata_b64(r: Random) -> Made:
    c = ctx(r)
    script = (f"#!/bin/bash\nset -euo pipefail\nmkdir -p /etc/{c['svc']}\ncat > /etc/{c['svc']}/env <<'EOF'\n"
              f"DB_HOST={c['host']}\nDB_USER={c['user']}\nDB_PASSWORD={password(r)}\nEOF\n"
              f"chmod 600 /etc/{c['svc']}/env\nsystemctl enable --now {c['svc']}\n")
    enc = b64(script)
    account = r.randint(10**11, 10**12 - 1)
    doc = {"LaunchTemplateVersions": [{
        "LaunchTemplateId": "lt-0" + hexs(r, 16), "LaunchTemplateName": f"{c['svc']}-workers",
        "VersionNumber": c["n"], "CreateTime": date(r).replace("Z", "+00:00"),
        "CreatedBy": f"arn:aws:iam::{account}:user/{c['user']}", "DefaultVersion": True,
        "LaunchTemplateData": {"ImageId": "ami-0" + hexs(r, 16), "InstanceType": r.choice(("m6i.large", "c7g.xlarge")),
                               "IamInstanceProfile": {"Name": f"{c['svc']}-worker"}, "UserData": enc,
                               "SecurityGroupIds": ["sg-0" + hexs(r, 16)]}}]}
    return f"$ aws ec2 describe-launch-template-versions --launch-template-name {c['svc']}-workers\n" + json.dumps(
        doc, indent=4), [enc]


@shape("encoded", "yaml")
def compose_b64_service_account_env(r: Random) -> Made:
    c = ctx(r)
    project = f"{c['svc']}-{pick(r, '0123456789', 6)}"
    sa = {"type": "service_account", "project_id": project, "private_key_id": hexs(r, 40),
          "private_key": pem("PRIVATE KEY", rsa_pkcs8(r)) + "\n",
          "client_email": f"{c['svc']}-runner@{project}.iam.gserviceaccount.com",
          "client_id": pick(r, "0123456789", 21), "token_uri": "https://oauth2.googleapis.com/token"}
    enc = b64(json.dumps(sa, indent=2))
    return (f"services:\n  {c['svc']}:\n    image: ghcr.io/northwind/{c['svc']}:{r.randint(1, 9)}.{r.randint(0, 30)}\n"
            "    environment:\n      GOOGLE_CLOUD_PROJECT: " + project + "\n"
            f"      GCP_SA_KEY_B64: {enc}\n    ports:\n      - \"8080:8080\"\n    restart: unless-stopped\n"), [enc]


@shape("encoded", "go")
def go_source_b64_decoded_token(r: Random) -> Made:
    tok = r.choice((api_token(r), bare_token(r)))
    enc = b64(tok)
    why = r.choice(("kept encoded so it is not plain text in the binary", "decoded once at start-up",
                    "TODO: move to the secret store"))
    name = r.choice(("botToken", "apiKey", "authToken"))
    return ("package notify\n\nimport (\n\t\"encoding/base64\"\n\t\"net/http\"\n)\n\n"
            f"// {why}\nvar {name} = mustDecode(\"{enc}\")\n\n"
            "func mustDecode(s string) string {\n\tb, err := base64.StdEncoding.DecodeString(s)\n\tif err != nil {\n"
            "\t\tpanic(err)\n\t}\n\treturn string(b)\n}\n\n"
            f"func authorize(req *http.Request) {{\n\treq.Header.Set(\"Authorization\", \"Bearer \"+{name})\n"
            "}\n"), [enc]


@shape("encoded", "http")
def oauth_password_grant_form_body(r: Random) -> Made:
    c, pw, secret = ctx(r), quoted_password(r), pick(r, ALNUM, 32)
    body = (f"grant_type=password&client_id={c['svc']}-cli&client_secret={secret}&username={c['user']}"
            f"&password={url_quote(pw)}&scope=openid")
    domain = r.choice(DOMAINS)
    return (f"POST /realms/{c['ns']}/protocol/openid-connect/token HTTP/1.1\nHost: sso.{domain}\n"
            "User-Agent: python-requests/2.31.0\nAccept: */*\nContent-Type: application/x-www-form-urlencoded\n"
            f"Content-Length: {len(body)}\n\n{body}\n\nHTTP/1.1 401 Unauthorized\nContent-Type: application/json\n\n"
            '{"error":"invalid_grant","error_description":"Invalid user credentials"}\n'), [url_quote(pw), secret]


# --- file_format (secret) ---------------------------------------------------------------------------------


@shape("file_format", "yaml")
def gh_cli_hosts_yml(r: Random) -> Made:
    login, tok = r.choice(PEOPLE) + r.choice(("", "-dev", str(r.randint(1, 99)))), checksummed(r, "gho_")
    text = (f"github.com:\n    users:\n        {login}:\n            oauth_token: {tok}\n    git_protocol: "
            f"{r.choice(('https', 'ssh'))}\n    oauth_token: {tok}\n    user: {login}\n")
    needles = [tok]
    if r.random() < 0.4:
        ghes = checksummed(r, "ghp_")
        text += f"github.{r.choice(DOMAINS)}:\n    oauth_token: {ghes}\n    user: {login}\n    git_protocol: https\n"
        needles.append(ghes)
    return text, needles


@shape("file_format", "ini")
def rclone_conf_remote_keys(r: Random) -> Made:
    c = ctx(r)
    if r.random() < 0.5:
        key_id, secret = aws_pair(r)
        text = (f"[{c['svc']}-backups]\ntype = s3\nprovider = AWS\naccess_key_id = {key_id}\n"
                f"secret_access_key = {secret}\nregion = {c['region']}\nacl = private\n")
    else:
        key_id = "00" + hexs(r, 10) + "0" * 12 + str(r.randint(1, 9))
        secret = f"K00{r.randint(0, 5)}" + pick(r, ALNUM, 27)
        text = f"[b2]\ntype = b2\naccount = {key_id}\nkey = {secret}\nhard_delete = true\n"
    needles = [key_id, secret]
    if r.random() < 0.5:
        obscured = b64u(r.randbytes(16 + r.randint(12, 24)))
        text += f"\n[{c['svc']}-sftp]\ntype = sftp\nhost = {c['host']}\nuser = {c['user']}\npass = {obscured}\n"
        needles.append(obscured)
    return text, needles


@shape("file_format", "ini")
def mysql_option_file_client(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    quoted = r.choice((pw, f'"{pw}"', f"'{pw}'"))
    return (f"# ~/.my.cnf\n[client]\nuser = {c['user']}\npassword = {quoted}\nhost = {c['host']}\nport = 3306\n\n"
            "[mysqldump]\nsingle-transaction\nquick\nmax_allowed_packet = 512M\n"), [pw]


@shape("file_format", "toml")
def cargo_credentials_toml(r: Random) -> Made:
    tok = "cio" + pick(r, ALNUM, 32)
    text, needles = f'[registry]\ntoken = "{tok}"\n', [tok]
    if r.random() < 0.5:
        inner = bare_token(r)
        text += f'\n[registries.{r.choice(SERVICES)}-internal]\ntoken = "Bearer {inner}"\n'
        needles.append(inner)
    return text, needles


@shape("file_format", "ini")
def databrickscfg_profiles(r: Random) -> Made:
    toks = [f"dapi{hexs(r, 32)}" + r.choice(("", "", "-2", "-3")) for _ in range(r.randint(1, 2))]
    hosts = (f"https://adb-{pick(r, '0123456789', 16)}.{r.randint(1, 19)}.azuredatabricks.net",
             f"https://{r.choice(SERVICES)}-{r.choice(('prod', 'staging'))}.cloud.databricks.com")
    text = "".join(f"[{name}]\nhost  = {h}\ntoken = {t}\n\n" for name, h, t in zip(
        ("DEFAULT", "staging"), hosts, toks, strict=False))
    return text, toks


@shape("file_format", "json")
def gcloud_adc_authorized_user(r: Random) -> Made:
    refresh = ("1//0" + r.choice("3569cdeg") + pick(r, ALNUM, 11) + "CgYIARAAGA" + r.choice("QgsS8")
               + "SNwF-L9Ir" + pick(r, URLSAFE, 70))
    doc = {"account": "", "client_id": "764086051850-6qr4p6gpi6hn506pt8ejuq83di341hur.apps.googleusercontent.com",
           "client_secret": "d-FL95Q19q7MQmFpd7hHD0Ty",
           "quota_project_id": f"{r.choice(SERVICES)}-{r.randint(10**5, 10**6)}",
           "refresh_token": refresh, "type": "authorized_user", "universe_domain": "googleapis.com"}
    return "$ cat ~/.config/gcloud/application_default_credentials.json\n" + json.dumps(doc, indent=2), [refresh]


# --- placed (secret) --------------------------------------------------------------------------------------


@shape("placed", "ini")
def systemd_dropin_environment(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    lines = [f'Environment="DB_HOST={c["host"]}"', f'Environment="DB_USER={c["user"]}"',
             r.choice((f'Environment="DB_PASSWORD={pw}"', f"Environment=DB_PASSWORD={pw}"))]
    needles = [pw]
    if r.random() < 0.5:
        tok = api_token(r)
        lines.append(f'Environment="{r.choice(("API_TOKEN", "UPSTREAM_KEY", "NOTIFY_TOKEN"))}={tok}"')
        needles.append(tok)
    return (f"# /etc/systemd/system/{c['svc']}.service.d/override.conf (systemctl edit {c['svc']})\n[Service]\n"
            + "\n".join(lines) + f"\nExecStart=\nExecStart=/opt/{c['svc']}/bin/{c['svc']} --config /etc/{c['svc']}/"
            "config.yml\n"), needles


@shape("placed", "ini")
def ansible_ini_inventory_vars(r: Random) -> Made:
    c = ctx(r)
    hosts = [(f"{c['svc']}-{kind}{i:02d}.{r.choice(DOMAINS)}", password(r)) for i, kind in enumerate(
        r.sample(("db", "app", "web", "mq"), r.randint(1, 3)), start=1)]
    var = r.choice(("ansible_password", "ansible_ssh_pass"))
    become = password(r)
    rows = "".join(f"{h} ansible_host={ip(r)} ansible_user={c['user']} {var}={pw}\n" for h, pw in hosts)
    return (f"[{c['svc']}]\n{rows}\n[{c['svc']}:vars]\nansible_connection=ssh\nansible_become=true\n"
            f"ansible_become_password={become}\n"), [pw for _, pw in hosts] + [become]


@shape("placed", "console")
def shell_history_cli_passwords(r: Random) -> Made:
    c = ctx(r)
    start = r.randint(300, 1900)
    pws = [password(r) for _ in range(2)]
    cmds = r.sample((f"mysql -h {c['host']} -u {c['user']} -p'{pws[0]}' {c['db']}",
                     f"redis-cli -h {c['host']} -p 6379 -a '{pws[0]}' info replication",
                     f"curl -u admin:'{pws[0]}' https://{c['host']}/api/v1/status",
                     f"sshpass -p '{pws[0]}' ssh {c['user']}@{c['host']}"), 1)
    if r.random() < 0.5:
        cmds.append(f"PGPASSWORD='{pws[1]}' psql -h {c['host']} -U {c['user']} {c['db']}")
    plain = [f"cd /opt/{c['svc']}", f"sudo systemctl status {c['svc']}", "df -h",
             f"tail -n 200 /var/log/{c['svc']}.log"]
    lines = [*r.sample(plain, 2), *cmds, "exit"]
    used = [pw for pw in pws if any(pw in cmd for cmd in cmds)]
    return "$ history | tail\n" + "".join(f"{start + i:5d}  {cmd}\n" for i, cmd in enumerate(lines)), used


@shape("placed", "json")
def jupyter_notebook_cell_token(r: Random) -> Made:
    tok = llm_token(r)
    if tok.startswith("hf_"):
        code = ["from huggingface_hub import login\n", "\n", f'login(token="{tok}")\n']
    elif tok.startswith("sk-ant-"):
        code = ["import anthropic\n", "\n", f'client = anthropic.Anthropic(api_key="{tok}")\n']
    else:
        code = ["import os\n", "from openai import OpenAI\n", "\n", f'os.environ["OPENAI_API_KEY"] = "{tok}"\n',
                "client = OpenAI()\n"]
    nb = {"cells": [
        {"cell_type": "markdown", "metadata": {}, "source": [f"# {r.choice(SERVICES).title()} ticket triage\n", "\n",
                                                            "Label a sample of last week's tickets.\n"]},
        {"cell_type": "code", "execution_count": 1, "id": hexs(r, 8), "metadata": {}, "outputs": [], "source": code},
        {"cell_type": "code", "execution_count": 2, "id": hexs(r, 8), "metadata": {}, "outputs": [
            {"name": "stdout", "output_type": "stream", "text": [f"{r.randint(200, 900)} tickets loaded\n"]}],
         "source": ["import pandas as pd\n", "df = pd.read_parquet('tickets.parquet')\n",
                    "print(len(df), 'tickets loaded')"]}],
        "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                     "language_info": {"name": "python", "version": "3.11.8"}}, "nbformat": 4, "nbformat_minor": 5}
    return json.dumps(nb, indent=1), [tok]


@shape("placed", "json")
def postman_collection_auth(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(3)
    if kind == 0:
        v = r.choice((api_token(r), bare_token(r)))
        auth = {"type": "bearer", "bearer": [{"key": "token", "value": v, "type": "string"}]}
    elif kind == 1:
        v = bare_token(r)
        auth = {"type": "apikey", "apikey": [{"key": "value", "value": v, "type": "string"},
                                             {"key": "key", "value": "X-API-Key", "type": "string"}]}
    else:
        v = password(r)
        auth = {"type": "basic", "basic": [{"key": "password", "value": v, "type": "string"},
                                           {"key": "username", "value": c["user"], "type": "string"}]}
    doc = {"info": {"_postman_id": uuid4(r), "name": f"{c['svc']} API",
                    "schema": "https://schema.getpostman.com/json/collection/v2.1.0/collection.json"},
           "auth": auth,
           "item": [{"name": "List jobs", "request": {"method": "GET", "header": [], "url": {
               "raw": "{{baseUrl}}/api/v1/jobs?state=failed", "host": ["{{baseUrl}}"], "path": ["api", "v1", "jobs"],
               "query": [{"key": "state", "value": "failed"}]}}}],
           "variable": [{"key": "baseUrl", "value": f"https://{c['host']}"}]}
    return json.dumps(doc, indent="\t"), [v]


@shape("placed", "csv")
def csv_user_export_passwords(r: Random) -> Made:
    domain = r.choice(DOMAINS)
    rows = [(p, password(r)) for p in r.sample(PEOPLE, r.randint(3, 5))]
    body = "".join(f"{r.randint(1000, 9999)},{p},{p}@{domain},{pw},{r.choice(('admin', 'editor', 'viewer'))},"
                   f"{date(r)}\n" for p, pw in rows)
    return "id,username,email,password,role,last_login\n" + body, [pw for _, pw in rows]


@shape("placed", None)
def email_thread_account_handover(r: Random) -> Made:
    c, pw = ctx(r), bare_value(r)
    a, b = r.sample(PEOPLE, 2)
    domain = str(c["host"]).split(".", 1)[1]
    return (f"From: {a.title()} <{a}@{domain}>\nSent: Thursday, {r.randint(1, 28)} March 2024 16:{r.randint(10, 59)}\n"
            f"To: {b.title()} <{b}@{domain}>\nSubject: RE: read-only access to the {c['svc']} database\n\n"
            f"Hi {b.title()},\n\nI've created the login. Details below:\n\n    Host:     {c['host']}\n"
            f"    Port:     {c['port']}\n    User:     {c['user']}\n    Password: {pw}\n\n"
            f"Let me know if it doesn't work.\n\n{a.title()}\n\n"
            f"> On Wed, {b.title()} wrote:\n> Could you set up a read-only login for the analytics team?\n"), [pw]


# --- ciphertext (clean) -----------------------------------------------------------------------------------

SYSTEMD_CRED_HEAD = bytes.fromhex("93a894094874449090caf2fc93cab55320000000010000000c00000010000000")


@shape("ciphertext", "ini")
def systemd_creds_encrypted(r: Random) -> Made:
    svc = r.choice(SERVICES)
    blob = b64(SYSTEMD_CRED_HEAD + r.randbytes(12) + r.randbytes(r.randint(100, 180)))
    lines = " \\\n        ".join(blob[i : i + 80] for i in range(0, len(blob), 80))
    return (f"[Service]\nExecStart=/opt/{svc}/bin/{svc}\nSetCredentialEncrypted=db-password: \\\n        {lines}\n"
            f"Environment=DB_PASSWORD_FILE=%d/db-password\nDynamicUser=yes\n")


@shape("ciphertext", "console")
def aws_kms_ciphertext_blob(r: Random) -> Made:
    c = ctx(r)
    blob = b64(b"\x01\x02\x02\x00\x78" + r.randbytes(r.randint(160, 220)))
    arn = f"arn:aws:kms:{c['region']}:{r.randint(10**11, 10**12 - 1)}:key/{uuid4(r)}"
    if r.random() < 0.5:
        out = json.dumps({"CiphertextBlob": blob, "KeyId": arn, "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}, indent=4)
        return (f"$ aws kms encrypt --key-id alias/{c['svc']}-config --plaintext fileb://db-password.txt\n{out}\n")
    return (f"# serverless.yml: decrypted at cold start with kms:Decrypt ({arn})\nfunctions:\n  {c['svc']}:\n"
            f"    handler: handler.main\n    environment:\n      DB_USER: {c['user']}\n"
            f"      DB_PASSWORD_ENCRYPTED: {blob}\n")


def jenkins_secret(r: Random, size: int) -> str:
    ct = r.randbytes(16 * (size // 16 + 1))
    return "{" + b64(b"\x01" + struct.pack(">II", 16, len(ct)) + r.randbytes(16) + ct) + "}"


@shape("ciphertext", "xml")
def jenkins_credentials_xml(r: Random) -> Made:
    c = ctx(r)
    creds = ("<com.cloudbees.plugins.credentials.impl.UsernamePasswordCredentialsImpl>\n"
             "          <scope>GLOBAL</scope>\n"
             f"          <id>{c['svc']}-db</id>\n          <description>{c['svc']} database</description>\n"
             f"          <username>{c['user']}</username>\n          <password>{jenkins_secret(r, r.randint(14, 28))}"
             "</password>\n          <usernameSecret>false</usernameSecret>\n"
             "        </com.cloudbees.plugins.credentials.impl.UsernamePasswordCredentialsImpl>\n"
             "        <org.jenkinsci.plugins.plaincredentials.impl.StringCredentialsImpl>\n"
             "          <scope>GLOBAL</scope>\n"
             "          <id>slack-bot-token</id>\n          <description>Slack notifications</description>\n"
             f"          <secret>{jenkins_secret(r, 56)}</secret>\n"
             "        </org.jenkinsci.plugins.plaincredentials.impl.StringCredentialsImpl>\n")
    return ("<?xml version='1.1' encoding='UTF-8'?>\n"
            "<com.cloudbees.plugins.credentials.SystemCredentialsProvider"
            ' plugin="credentials@1319.v7eb_51b_3a_c97b_">\n'
            '  <domainCredentialsMap class="hudson.util.CopyOnWriteMap$Hash">\n    <entry>\n'
            "      <com.cloudbees.plugins.credentials.domains.Domain>\n        <specifications/>\n"
            "      </com.cloudbees.plugins.credentials.domains.Domain>\n"
            "      <java.util.concurrent.CopyOnWriteArrayList>\n"
            f"        {creds}      </java.util.concurrent.CopyOnWriteArrayList>\n"
            "    </entry>\n  </domainCredentialsMap>\n"
            "</com.cloudbees.plugins.credentials.SystemCredentialsProvider>\n")


@shape("ciphertext", "properties")
def jasypt_spring_cipher_properties(r: Random) -> Made:
    c = ctx(r)
    jasypt = f"ENC({b64(r.randbytes(8) + r.randbytes(8 * r.randint(2, 4)))})"
    cipher = "{cipher}" + hexs(r, 32 * r.randint(2, 3))
    pw, key = (jasypt, f"ENC({b64(r.randbytes(8 + 48))})") if r.random() < 0.5 else (cipher, "{cipher}" + hexs(r, 96))
    return (f"spring.datasource.url=jdbc:postgresql://{c['host']}:5432/{c['db']}\n"
            f"spring.datasource.username={c['user']}\nspring.datasource.password={pw}\n"
            f"{c['svc']}.upstream.api-key={key}\n"
            "jasypt.encryptor.password=${JASYPT_ENCRYPTOR_PASSWORD}\n")


# --- public_material (clean) ------------------------------------------------------------------------------


@shape("public_material", "console")
def pkcs10_csr_pem(r: Random) -> Made:
    c = ctx(r)
    key = p256_key(r)
    name = x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "DE"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, r.choice(("Acme Logistics", "Northwind Data"))),
                      x509.NameAttribute(NameOID.COMMON_NAME, str(c["host"]))])
    csr = (x509.CertificateSigningRequestBuilder().subject_name(name)
           .add_extension(x509.SubjectAlternativeName([x509.DNSName(str(c["host"]))]), critical=False)
           .sign(key, hashes.SHA256(), ecdsa_deterministic=True))
    text = csr.public_bytes(serialization.Encoding.PEM).decode().strip()
    return (f"$ openssl req -new -key {c['svc']}.key -out {c['svc']}.csr -subj \"/C=DE/CN={c['host']}\"\n"
            f"$ cat {c['svc']}.csr\n{text}\n")


@shape("public_material", None)
def dkim_txt_record(r: Random) -> Made:
    p = b64(rsa_spki(r, 2048))
    sel = r.choice(("s1", "google", "selector1", "mta" + str(r.randint(1, 9))))
    domain = r.choice(DOMAINS)
    if r.random() < 0.5:
        return (f"```hcl\nresource \"aws_route53_record\" \"dkim_{sel}\" {{\n"
                "  zone_id = aws_route53_zone.main.zone_id\n"
                f"  name    = \"{sel}._domainkey.{domain}\"\n  type    = \"TXT\"\n  ttl     = 3600\n"
                f"  records = [\"v=DKIM1; k=rsa; p={p[:230]}\\\"\\\"{p[230:]}\"]\n}}\n```\n")
    return ("Publish the DKIM key in the zone and reload:\n\n"
            f"```\n{sel}._domainkey  3600  IN  TXT  ( \"v=DKIM1; k=rsa; \"\n"
            f"    \"p={p[:200]}\"\n    \"{p[200:]}\" )\n```\n")


@shape("public_material", "xml")
def saml_idp_metadata_cert(r: Random) -> Made:
    domain = r.choice(DOMAINS)
    body = "".join(certificate(r, f"sso.{domain}").splitlines()[1:-1])
    return (f'<md:EntityDescriptor xmlns:md="urn:oasis:names:tc:SAML:2.0:metadata" entityID="https://sso.{domain}/'
            'saml/metadata">\n'
            '  <md:IDPSSODescriptor protocolSupportEnumeration="urn:oasis:names:tc:SAML:2.0:protocol">\n'
            '    <md:KeyDescriptor use="signing">\n      <ds:KeyInfo xmlns:ds="http://www.w3.org/2000/09/xmldsig#">\n'
            f"        <ds:X509Data>\n          <ds:X509Certificate>{body}</ds:X509Certificate>\n"
            "        </ds:X509Data>\n      </ds:KeyInfo>\n    </md:KeyDescriptor>\n"
            "    <md:NameIDFormat>urn:oasis:names:tc:SAML:1.1:nameid-format:emailAddress</md:NameIDFormat>\n"
            '    <md:SingleSignOnService Binding="urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect" '
            f'Location="https://sso.{domain}/saml/sso"/>\n  </md:IDPSSODescriptor>\n</md:EntityDescriptor>\n')


def ssh_fingerprint(blob: bytes) -> str:
    return "SHA256:" + b64(hashlib.sha256(blob).digest()).rstrip("=")


@shape("public_material", "console")
def openssh_user_certificate(r: Random) -> Made:
    who = user(r)
    ca_seed, ca_pk = ed25519_keys(r)
    _, pk = ed25519_keys(r)
    serial, start = r.randint(1, 99999), datetime(2024, 1, 1, tzinfo=UTC) + timedelta(hours=r.randrange(8000))
    hours = r.choice((8, 12, 24))
    principals = [who, r.choice([p for p in ("deploy", "ops", "readonly") if p != who])]
    exts = ("permit-X11-forwarding", "permit-agent-forwarding", "permit-port-forwarding", "permit-pty",
            "permit-user-rc")
    body = (sstr("ssh-ed25519-cert-v01@openssh.com") + sstr(r.randbytes(32)) + sstr(pk) + struct.pack(">QI", serial, 1)
            + sstr(f"{who}@corp") + sstr(b"".join(sstr(p) for p in principals))
            + struct.pack(">QQ", int(start.timestamp()), int((start + timedelta(hours=hours)).timestamp()))
            + sstr(b"") + sstr(b"".join(sstr(e) + sstr(b"") for e in exts)) + sstr(b"") + sstr(ssh_ed25519_pub(ca_pk)))
    sig = ed25519.Ed25519PrivateKey.from_private_bytes(ca_seed).sign(body)
    blob = body + sstr(sstr("ssh-ed25519") + sstr(sig))
    fmt = "%Y-%m-%dT%H:%M:%S"
    pad = " " * 8
    return (f"$ cat ~/.ssh/id_ed25519-cert.pub\nssh-ed25519-cert-v01@openssh.com {b64(blob)} {who}@laptop\n"
            f"$ ssh-keygen -L -f ~/.ssh/id_ed25519-cert.pub\n/home/{who}/.ssh/id_ed25519-cert.pub:\n"
            f"{pad}Type: ssh-ed25519-cert-v01@openssh.com user certificate\n"
            f"{pad}Public key: ED25519-CERT {ssh_fingerprint(ssh_ed25519_pub(pk))}\n"
            f"{pad}Signing CA: ED25519 {ssh_fingerprint(ssh_ed25519_pub(ca_pk))} (using ssh-ed25519)\n"
            f"{pad}Key ID: \"{who}@corp\"\n{pad}Serial: {serial}\n"
            f"{pad}Valid: from {start.strftime(fmt)} to {(start + timedelta(hours=hours)).strftime(fmt)}\n"
            f"{pad}Principals:\n" + "".join(f"{pad * 2}{p}\n" for p in principals)
            + f"{pad}Critical Options: (none)\n{pad}Extensions:\n" + "".join(f"{pad * 2}{e}\n" for e in exts))


# --- documented_example (clean) ---------------------------------------------------------------------------

COSMOS_EMULATOR_KEY = "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw=="
DOCUMENTED = (COSMOS_EMULATOR_KEY,)  # build_secrets allows these in clean records


@shape("documented_example", "json")
def cosmos_emulator_well_known_key(r: Random) -> Made:
    db = r.choice(SERVICES)
    doc: dict[str, object]
    if r.random() < 0.5:
        doc = {"CosmosDb": {"Endpoint": "https://localhost:8081/", "Key": COSMOS_EMULATOR_KEY, "DatabaseName": db,
                            "ContainerName": "items"}}
    else:
        doc = {"ConnectionStrings": {"Cosmos": f"AccountEndpoint=https://localhost:8081/;AccountKey={COSMOS_EMULATOR_KEY};"},
               "Logging": {"LogLevel": {"Default": "Information"}}}
    return json.dumps(doc, indent=2)


OAUTH_EXCHANGES = (
    ("4.1.3", "grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA\n"
              "&redirect_uri=https%3A%2F%2Fclient%2Eexample%2Ecom%2Fcb", True),
    ("4.4.2", "grant_type=client_credentials", False),
    ("6", "grant_type=refresh_token&refresh_token=tGzv3JOkF0XG5Qx2TlKWIA", False),
)


@shape("documented_example", "http")
def rfc6749_oauth_exchange(r: Random) -> Made:
    section, body, refresh = r.choice(OAUTH_EXCHANGES)
    auth = r.choice(("Authorization: Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW\n", "Authorization: Basic "
                     "czZCaGRSa3F0Mzo3RmpmcDBaQnIxS3REUmJuZlZkbUl3\n"))
    reply = {"access_token": "2YotnFZFEjr1zCsicMWpAA", "token_type": "example", "expires_in": 3600}
    if refresh:
        reply["refresh_token"] = "tGzv3JOkF0XG5Qx2TlKWIA"
    reply["example_parameter"] = "example_value"
    return (f"# RFC 6749, section {section}: the exchange the mock authorization server replays\n"
            f"POST /token HTTP/1.1\nHost: server.example.com\n{auth}"
            f"Content-Type: application/x-www-form-urlencoded\n\n{body}\n\n"
            "HTTP/1.1 200 OK\nContent-Type: application/json;charset=UTF-8\n"
            "Cache-Control: no-store\nPragma: no-cache\n\n"
            + json.dumps(reply, indent=2) + "\n")


@shape("documented_example", "yaml")
def mssql_image_docs_sa_password(r: Random) -> Made:
    tag = r.choice(("2019-latest", "2022-latest"))
    if r.random() < 0.5:
        return (f"services:\n  sqlserver:\n    image: mcr.microsoft.com/mssql/server:{tag}\n    environment:\n"
                '      ACCEPT_EULA: "Y"\n      MSSQL_SA_PASSWORD: "yourStrong(!)Password"\n'
                '    ports:\n      - "1433:1433"\n')
    return (f'# docker run -e "ACCEPT_EULA=Y" -e "MSSQL_SA_PASSWORD=yourStrong(!)Password" -p 1433:1433 '
            f"-d mcr.microsoft.com/mssql/server:{tag}\n"
            "test:\n  sqlserver:\n    host: localhost\n    user: sa\n    password: yourStrong(!)Password\n")


@shape("documented_example", "text")
def redis_conf_requirepass_foobared(r: Random) -> Made:
    commented = r.random() < 0.5
    return ("################################## SECURITY ###################################\n\n"
            "# Require clients to issue AUTH <PASSWORD> before processing any other\n"
            "# commands.  This might be useful in environments in which you do not trust\n"
            "# others with access to the host running redis-server.\n#\n"
            "# Warning: since Redis is pretty fast an outside user can try up to\n"
            "# 150k passwords per second against a good box.\n#\n"
            + ("# requirepass foobared\n" if commented else "requirepass foobared\n")
            + f"\nmaxclients {r.choice((1000, 10000))}\n")


# --- placeholder (clean) ----------------------------------------------------------------------------------


@shape("placeholder", "json")
def azure_keyvault_app_settings_refs(r: Random) -> Made:
    svc = r.choice(SERVICES)
    vault = f"kv-{svc}-{r.choice(('prod', 'weu', 'staging'))}"
    uri = f"https://{vault}.vault.azure.net/secrets/db-connection/{hexs(r, 32)}"
    rows = [{"name": "ConnectionStrings__Default", "slotSetting": False,
             "value": f"@Microsoft.KeyVault(SecretUri={uri})"},
            {"name": "Stripe__SecretKey", "slotSetting": False,
             "value": f"@Microsoft.KeyVault(VaultName={vault};SecretName=stripe-secret-key)"},
            {"name": "WEBSITE_RUN_FROM_PACKAGE", "slotSetting": False, "value": "1"}]
    return f"$ az webapp config appsettings list -g rg-{svc} -n app-{svc}\n" + json.dumps(rows, indent=2)


@shape("placeholder", "yaml")
def cloudformation_dynamic_refs(r: Random) -> Made:
    c = ctx(r)
    path = f"{c['svc']}/{r.choice(('prod', 'staging'))}/db"
    name = str(c["svc"]).title()
    return (f"Resources:\n  {name}Db:\n    Type: AWS::RDS::DBInstance\n    Properties:\n"
            "      Engine: postgres\n"
            f"      DBInstanceClass: db.t4g.medium\n"
            f"      MasterUsername: '{{{{resolve:secretsmanager:{path}:SecretString:username}}}}'\n"
            f"      MasterUserPassword: '{{{{resolve:secretsmanager:{path}:SecretString:password}}}}'\n"
            f"  {name}Function:\n    Type: AWS::Lambda::Function\n    Properties:\n      Environment:\n"
            f"        Variables:\n          API_KEY_PARAM: '{{{{resolve:ssm:/{c['svc']}/api-key-name:{c['n']}}}}}'\n"
            f"          DB_SECRET_ARN: !Ref {name}DbSecret\n")


@shape("placeholder", "bash")
def onepassword_op_env_refs(r: Random) -> Made:
    c = ctx(r)
    vault = r.choice(("Production", "Platform", "Shared"))
    return (f"# .env.tpl: resolved at start by `op run --env-file=.env.tpl -- ./bin/{c['svc']}`\n"
            f"DB_HOST={c['host']}\nDB_USER={c['user']}\nDB_PASSWORD=op://{vault}/{c['svc']}-postgres/password\n"
            f"STRIPE_SECRET_KEY=op://{vault}/Stripe/credential\n"
            f"SLACK_BOT_TOKEN=\"op://{vault}/{c['svc']} slack bot/token\"\n")


@shape("placeholder", "console")
def kubectl_describe_secret_sizes(r: Random) -> Made:
    c = ctx(r)
    keys = r.sample((("password", r.randint(14, 28)), ("username", len(str(c["user"]))), ("api-token", 40),
                     ("tls.key", 1704), ("ca.crt", 1139)), 3)
    width = max(len(k) for k, _ in keys) + 1
    return (f"$ kubectl -n {c['ns']} describe secret {c['svc']}-credentials\nName:         {c['svc']}-credentials\n"
            f"Namespace:    {c['ns']}\nLabels:       app={c['svc']}\nAnnotations:  <none>\n\nType:  Opaque\n\n"
            "Data\n====\n" + "".join(f"{k + ':':<{width}}  {n} bytes\n" for k, n in keys))


@shape("placeholder", "text")
def ci_log_masked_values(r: Random) -> Made:
    t = datetime(2024, 1, 1, tzinfo=UTC) + timedelta(seconds=r.randrange(86400 * 300))

    lines = ["##[group]Run docker/login-action@v3", "with:", "  registry: ghcr.io", f"  username: {user(r)}",
             "  password: ***", "  logout: true", "env:", "  DB_PASSWORD: ***", "  AWS_ACCESS_KEY_ID: ***",
             "  AWS_SECRET_ACCESS_KEY: ***", "##[endgroup]", "Logging into ghcr.io...", "Login Succeeded!"]
    out = []
    for line in lines:
        t += timedelta(microseconds=r.randint(50, 400_000))
        out.append(t.strftime("%Y-%m-%dT%H:%M:%S.%f") + f"{r.randint(0, 9)}Z {line}\n")
    return "".join(out)


# --- test_vector (clean) ----------------------------------------------------------------------------------

RFC6070 = ((b"password", b"salt", 1, 20), (b"password", b"salt", 2, 20), (b"password", b"salt", 4096, 20),
           (b"passwordPASSWORDpassword", b"saltSALTsaltSALTsaltSALTsaltSALTsalt", 4096, 25))


@shape("test_vector", "go")
def rfc6070_pbkdf2_go_table(r: Random) -> Made:
    rows = "".join(f'\t{{"{p.decode()}", "{s.decode()}", {c}, {n}, '
                   f'"{hashlib.pbkdf2_hmac("sha1", p, s, c, n).hex()}"}},\n' for p, s, c, n in RFC6070)
    return ("// RFC 6070 test vectors for PBKDF2-HMAC-SHA1.\nvar pbkdf2Vectors = []struct {\n\tpassword, salt string\n"
            "\titer, keyLen   int\n\twant           string\n}{\n" + rows + "}\n")


def hkdf(ikm: bytes, salt: bytes, info: bytes, n: int) -> tuple[bytes, bytes]:
    prk = hmac.new(salt or b"\0" * 32, ikm, hashlib.sha256).digest()
    okm, block, i = b"", b"", 1
    while len(okm) < n:
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        okm, i = okm + block, i + 1
    return prk, okm[:n]


assert hkdf(b"\x0b" * 22, bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)[1].hex().startswith("3cb25f25faacd57a9043")


@shape("test_vector", "rust")
def rfc5869_hkdf_rust_test(r: Random) -> Made:
    cases = [("1", b"\x0b" * 22, bytes(range(13)), bytes(range(0xF0, 0xFA))), ("3", b"\x0b" * 22, b"", b"")]
    out = []
    for name, ikm, salt, info in r.sample(cases, r.randint(1, 2)):
        prk, okm = hkdf(ikm, salt, info, 42)
        out.append(f"// RFC 5869, A.{name}: SHA-256\n#[test]\nfn rfc5869_case_{name}() {{\n"
                   f"    let ikm = hex!(\"{ikm.hex()}\");\n    let salt = hex!(\"{salt.hex()}\");\n"
                   f"    let info = hex!(\"{info.hex()}\");\n"
                   "    let (prk, hk) = Hkdf::<Sha256>::extract(Some(&salt[..]), &ikm);\n"
                   f"    assert_eq!(prk[..], hex!(\"{prk.hex()}\")[..]);\n    let mut okm = [0u8; 42];\n"
                   "    hk.expand(&info, &mut okm).unwrap();\n"
                   f"    assert_eq!(okm[..], hex!(\"{okm.hex()}\")[..]);\n}}\n")
    return "\n".join(out)


@shape("test_vector", "hcl")
def terraform_lock_hashes(r: Random) -> Made:
    providers = r.sample((("hashicorp/aws", "5.", "~> 5.0"), ("hashicorp/random", "3.", "~> 3.5"),
                          ("hashicorp/kubernetes", "2.", ">= 2.20.0"), ("cloudflare/cloudflare", "4.", "~> 4.0")), 2)
    out = ["# This file is maintained automatically by \"terraform init\".\n"
           "# Manual edits may be lost in future updates.\n"]
    for name, major, constraint in providers:
        hashes_ = [f"h1:{b64(r.randbytes(32))}", *sorted(f"zh:{hexs(r, 64)}" for _ in range(r.randint(4, 8)))]
        out.append(f'provider "registry.terraform.io/{name}" {{\n  version     = "{major}{r.randint(0, 40)}.'
                   f'{r.randint(0, 3)}"\n  constraints = "{constraint}"\n  hashes = [\n'
                   + "".join(f'    "{h}",\n' for h in hashes_) + "  ]\n}\n")
    return "\n".join(out)


@shape("test_vector", "json")
def otel_trace_context_logs(r: Random) -> Made:
    trace = hexs(r, 32)
    svc = r.choice(SERVICES)
    t = datetime.fromisoformat(date(r))
    lines = []
    for i in range(r.randint(3, 5)):
        span = hexs(r, 16)
        t += timedelta(milliseconds=r.randint(3, 900))
        stamp = t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        lines.append(json.dumps({"timestamp": stamp, "severity": r.choice(("INFO", "INFO", "WARN")),
                                 "service.name": svc,
                                 "trace_id": trace, "span_id": span, "http.request.header.traceparent":
                                 f"00-{trace}-{span}-01", "http.route": r.choice(("/api/v1/jobs", "/healthz")),
                                 "http.status_code": r.choice((200, 200, 503)), "request_id": uuid4(r),
                                 "duration_ms": r.randint(2, 900) + i}))
    return "\n".join(lines) + "\n"


RFC8439_TAG = "1ae10b594f09e26a7e902ecbd0600691"


@shape("test_vector", "python")
def rfc8439_chacha20poly1305_vector(r: Random) -> Made:
    key, nonce = bytes(range(0x80, 0xA0)), bytes.fromhex("070000004041424344454647")
    aad = bytes.fromhex("50515253c0c1c2c3c4c5c6c7")
    text = (b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, "
            b"sunscreen would be it.")
    sealed = ChaCha20Poly1305(key).encrypt(nonce, text, aad)
    assert sealed[-16:].hex() == RFC8439_TAG
    ct = sealed[:-16].hex()
    chunks = "".join(f'    "{ct[i : i + 64]}"\n' for i in range(0, len(ct), 64))
    return ("# RFC 8439 section 2.8.2: AEAD_CHACHA20_POLY1305 test vector\n"
            f'KEY = bytes.fromhex("{key.hex()}")\nNONCE = bytes.fromhex("{nonce.hex()}")\n'
            f'AAD = bytes.fromhex("{aad.hex()}")\nPLAINTEXT = {text!r}\nCIPHERTEXT = bytes.fromhex(\n{chunks})\n'
            f'TAG = bytes.fromhex("{sealed[-16:].hex()}")\n')

