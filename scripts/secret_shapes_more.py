"""More snippet shapes for scripts/build_secrets.py, written to fit the scan on: always in the ``fit`` part.

Same contract as `secret_shapes` (secret families return ``(snippet, needles)``) and `secret_shapes_clean`
(clean families return the snippet). Written after the held-out part's aggregate misses were known (never its
shapes), to widen the fit part in the families the scan generalised worst on.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import struct
from random import Random

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.keywrap import aes_key_wrap
from cryptography.x509.oid import NameOID
from secret_formats import (
    ALNUM,
    DOMAINS,
    LOWER,
    PEOPLE,
    SERVICES,
    UPPER_NUM,
    Made,
    age_armor,
    age_recipient,
    aws_pair,
    b64,
    bare_token,
    bare_value,
    certificate,
    chat,
    checksummed,
    ctx,
    date,
    der,
    dint,
    ed25519_keys,
    hexs,
    openssh_private,
    p256_key,
    password,
    pgp_armor,
    pgp_packet,
    pick,
    prefixed,
    rsa_spki,
    seq,
    sops_enc,
    ssh_ed25519_pub,
    sstr,
    url_quote,
    user,
    uuid4,
    vault_hex,
    wrap,
)

more = prefixed("more")


def person(r: Random) -> str:
    return r.choice(PEOPLE).title()


# --- placed: credentials placed by structure, no provider prefix needed -------------------------------


@more("placed", None)
def prose_log_in_as_with(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    s = r.choice((f"Log in as `admin` with {pw} and open Settings > Storage to check the replication lag.",
                  f"Sign in to the {c['svc']} console as {c['user']} using the password {pw}; MFA is not enforced "
                  "for that account yet.",
                  f"SSH to {c['host']} as {c['user']} (password {pw}, same as on staging) and tail the journal.",
                  f"You can get into the router web UI as admin / {pw} from the management VLAN only.",
                  f"The vendor support portal login is {c['user']}@northwind-data.net with {pw} as the password."))
    return s + " Please do not change the account settings without telling the platform team first.", [pw]


@more("placed", None)
def prose_passphrase_backticked(r: Random) -> Made:
    pw = password(r) if r.random() < 0.7 else " ".join(pick(r, LOWER, r.randint(4, 8)) for _ in range(4))
    s = r.choice((f"When gpg asks for it, use `{pw}` as the passphrase for the release signing key.",
                  f"The offline backup key is protected with the passphrase `{pw}`; the key file itself lives on the "
                  "USB stick in the safe.",
                  f"restic will prompt for the repository password: enter `{pw}` and wait for the index to load.",
                  f"To unlock the keystore, type `{pw}` at the prompt (it is the same passphrase for the key entry)."))
    return s, [pw]


@more("placed", None)
def prose_password_changed_to(r: Random) -> Made:
    c, pw, who = ctx(r), password(r), person(r)
    s = r.choice((f"At 14:{r.randint(10, 59)} {who} changed the root pw to {pw} to lock out the stale session; it "
                  "has not been rotated since.",
                  f"Update: {who} reset the {c['svc']} service account password to {pw}, so update your local .env "
                  "before the next deploy.",
                  f"FYI the Wi-Fi password for the lab network is now {pw} (the old one stopped working on Monday).",
                  f"After the audit finding, the shared {c['db']} login was changed; the new password is {pw}."))
    return s, [pw]


@more("placed", None)
def ticket_email_temporary_password(r: Random) -> Made:
    c, pw, who = ctx(r), password(r), r.choice(PEOPLE)
    n = r.randint(10000, 99999)
    mail = (f"From: IT Service Desk <servicedesk@{r.choice(DOMAINS)}>\nTo: {who}@northwind-data.net\n"
            f"Subject: [INC{n}] Access to {c['host']} provisioned\n\nHi {who.title()},\n\n"
            f"your account on {c['host']} has been created as requested.\n\n"
            f"    Username: {c['user']}\n"
            f"    {r.choice(('Temporary password', 'Initial password', 'Password'))}: {pw}\n\n"
            "You will be asked to choose a new password at the first login.\n\nKind regards,\nService Desk")
    return "\n".join("> " + line if line else ">" for line in mail.splitlines()), [pw]


@more("placed", None)
def chat_teams_question_then_answer(r: Random) -> Made:
    c, v = ctx(r), bare_value(r)
    a, b = r.sample(PEOPLE, 2)
    ask = r.choice(("does anyone remember the SFTP login for the partner drop? the runbook link is dead",
                    f"what's the passphrase for the {c['svc']} backup bucket again?",
                    f"can someone DM me the {c['svc']} webhook secret? the integration test keeps failing"))
    h, m = r.randint(8, 17), r.randint(10, 50)
    answer = r.choice((f"here you go:\n`{v}`", f"user is `{c['user']}`\npw: `{v}`", f"it's\n\n{v}\n"))
    return (f"**{a.title()}** {h:02d}:{m:02d}\n{ask}\n\n**{b.title()}** {h:02d}:{m + 3:02d}\n{answer}\n"
            "please don't forward it, I'll move it to the vault tomorrow\n\n"
            f"**{a.title()}** {h:02d}:{m + 4:02d}\nthanks, that worked"), [v]


@more("placed", None)
def markdown_table_varied_columns(r: Random) -> Made:
    layout = r.choice((("System", "Account", "Secret"), ("Service", "Login", "Passphrase"), ("Host", "Credentials"),
                       ("Vendor portal", "User", "Key"), ("Environment", "Admin", "Pass")))
    rows, needles = [], []
    for _ in range(r.randint(2, 4)):
        c, v = ctx(r), password(r) if r.random() < 0.7 else bare_token(r)
        needles.append(v)
        if len(layout) == 2:
            rows.append(f"| {c['host']} | {c['user']} {r.choice(('/', ':'))} {v} |")
        else:
            cell = f"`{v}`" if r.random() < 0.5 else v
            rows.append(f"| {r.choice((c['host'], c['svc'], c['ns']))} | {c['user']} | {cell} |")
    head = "| " + " | ".join(layout) + " |\n|" + "---|" * len(layout) + "\n"
    return head + "\n".join(rows) + "\n", needles


@more("placed", "yaml")
def yaml_nested_camel_secrets(r: Random) -> Made:
    c = ctx(r)
    blocks = {"encryption": ("masterKey", bare_token(r)), "webhooks": ("signing_secret", bare_token(r)),
              "oauth": ("client_secret", pick(r, ALNUM + "-_~.", 40)), "database": ("dbPass", password(r)),
              "notifier": ("authToken", bare_token(r))}
    chosen = r.sample(sorted(blocks), r.randint(2, 3))
    out, needles = f"app:\n  name: {c['svc']}\n  region: {c['region']}\n", []
    for name in chosen:
        key, v = blocks[name]
        extra = f"    dbUser: {c['user']}\n" if key == "dbPass" else ""
        extra += f"    client_id: {uuid4(r)}\n" if key == "client_secret" else ""
        out += f"  {name}:\n{extra}    {key}: \"{v}\"\n"
        needles.append(v)
    return out, needles


@more("placed", "properties")
def java_properties_secret_keys(r: Random) -> Made:
    c = ctx(r)
    pairs = [("mail.smtp.password", password(r)), ("app.security.master-key", bare_token(r)),
             ("payments.webhook.signingSecret", bare_token(r)), ("ldap.bind.credentials", password(r))]
    chosen = r.sample(pairs, r.randint(1, 3))
    lines = [f"mail.smtp.host=smtp.{r.choice(DOMAINS)}", "mail.smtp.port=587", f"mail.smtp.user={c['user']}",
             f"ldap.url=ldaps://ldap.{r.choice(DOMAINS)}:636"] + [f"{k}={v}" for k, v in chosen]
    return "# application-prod.properties\n" + "\n".join(lines) + "\n", [v for _, v in chosen]


@more("placed", "powershell")
def powershell_plaintext_credential(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    if r.random() < 0.6:
        return (f'$user = "CORP\\{c["user"]}"\n'
                f'$pass = ConvertTo-SecureString "{pw}" -AsPlainText -Force\n'
                "$cred = New-Object System.Management.Automation.PSCredential($user, $pass)\n"
                f"Invoke-Command -ComputerName {c['host']} -Credential $cred -ScriptBlock {{ "
                f"Restart-Service {c['svc']} }}\n"), [pw]
    tok = bare_token(r)
    return (f'$env:{c["svc"].upper()}_API_TOKEN = "{tok}"\n'
            f'$headers = @{{ Authorization = "Bearer $env:{c["svc"].upper()}_API_TOKEN" }}\n'
            f'Invoke-RestMethod -Uri "https://{c["host"]}/api/v1/jobs" -Headers $headers\n'), [tok]


@more("placed", "go")
def go_config_struct_literal(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(3)
    if kind == 0:
        pw = password(r)
        return (f'cfg := mysql.Config{{\n\tUser:   "{c["user"]}",\n\tPasswd: "{pw}",\n\tNet:    "tcp",\n'
                f'\tAddr:   "{c["host"]}:3306",\n\tDBName: "{c["db"]}",\n}}\ndb, err := sql.Open("mysql", '
                "cfg.FormatDSN())\n"), [pw]
    tok = bare_token(r)
    if kind == 1:
        return (f'client := {c["svc"]}api.NewClient(\n\t{c["svc"]}api.WithBaseURL("https://{c["host"]}"),\n'
                f'\t{c["svc"]}api.WithAuthToken("{tok}"),\n)\n'), [tok]
    return (f'var signingSecret = []byte("{tok}")\n\nfunc sign(body []byte) string {{\n\t'
            "mac := hmac.New(sha256.New, signingSecret)\n\tmac.Write(body)\n"
            "\treturn hex.EncodeToString(mac.Sum(nil))\n}\n"), [tok]


@more("placed", "rust")
def rust_client_secret_literal(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(3)
    if kind == 0:
        pw = password(r)
        return (f'let resp = reqwest::Client::new()\n    .get("https://{c["host"]}/api/v1/exports")\n'
                f'    .basic_auth("{c["user"]}", Some("{pw}"))\n    .send()\n    .await?;\n'), [pw]
    if kind == 1:
        pw = password(r)
        return (f'let opts = PgConnectOptions::new()\n    .host("{c["host"]}")\n    .username("{c["user"]}")\n'
                f'    .password("{pw}")\n    .database("{c["db"]}");\n'), [pw]
    tok = bare_token(r)
    return f'const SIGNING_SECRET: &str = "{tok}";\nconst WEBHOOK_PATH: &str = "/hooks/{c["svc"]}";\n', [tok]


@more("placed", "csharp")
def csharp_inline_credentials(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    kind = r.randrange(3)
    if kind == 0:
        return (f'var smtp = new SmtpClient("smtp.{r.choice(DOMAINS)}", 587)\n{{\n    EnableSsl = true,\n'
                f'    Credentials = new NetworkCredential("{c["user"]}", "{pw}"),\n}};\n'), [pw]
    if kind == 1:
        return (f'await using var conn = new SqlConnection(\n    "Server={c["host"]},1433;Database={c["db"]};'
                f'User Id={c["user"]};Password={pw};TrustServerCertificate=True");\nawait conn.OpenAsync();\n'), [pw]
    return f'private const string DbPass = "{pw}";\nprivate const string DbUser = "{c["user"]}";\n', [pw]


@more("placed", "json")
def appsettings_json_secrets(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    secret = pick(r, ALNUM, 3) + "8Q~" + pick(r, ALNUM + "_~.-", 34)
    doc = {"Logging": {"LogLevel": {"Default": "Information"}},
           "ConnectionStrings": {"Default": f"Host={c['host']};Database={c['db']};Username={c['user']};Password={pw}"},
           "AzureAd": {"Instance": "https://login.microsoftonline.com/", "TenantId": uuid4(r),
                       "ClientId": uuid4(r), "ClientSecret": secret}}
    return json.dumps(doc, indent=2), [pw, secret]


@more("placed", "bash")
def cli_password_flags(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    cmd = r.choice((f"mysql -uroot -p'{pw}' -h {c['host']} {c['db']} < migrations/0042_add_index.sql",
                    f"PGPASSWORD='{pw}' psql -h {c['host']} -U {c['user']} -d {c['db']} -c 'select count(*) from jobs'",
                    f"redis-cli -h {c['host']} -p 6379 -a '{pw}' --no-auth-warning info replication",
                    f"mongosh \"mongodb://{c['host']}:27017/{c['db']}\" --username {c['user']} --password '{pw}'",
                    f"sqlcmd -S {c['host']} -U sa -P '{pw}' -Q \"SELECT name FROM sys.databases\"",
                    f"./bin/{c['svc']}-admin reset-index --user {c['user']} --password={pw} --yes"))
    return f"# run from the bastion\n{cmd}\n", [pw]


@more("placed", "bash")
def docker_run_env_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    var, image = r.choice((("POSTGRES_PASSWORD", "postgres:16"),
                           ("MSSQL_SA_PASSWORD", "mcr.microsoft.com/mssql/server:2022-latest"),
                           ("RABBITMQ_DEFAULT_PASS", "rabbitmq:3-management"), ("MINIO_ROOT_PASSWORD", "minio/minio"),
                           ("MYSQL_ROOT_PASSWORD", "mysql:8.0")))
    if r.random() < 0.6:
        return (f"docker run -d --name {c['svc']}-{var.split('_')[0].lower()} \\\n  -e {var}='{pw}' \\\n"
                f"  -p {c['port']}:{c['port']} \\\n  {image}\n"), [pw]
    return (f"services:\n  {c['svc']}-store:\n    image: {image}\n    environment:\n      {var}: \"{pw}\"\n"
            f"    restart: unless-stopped\n"), [pw]


@more("placed", "bash")
def curl_user_colon_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    cmd = r.choice((f"curl -u {c['user']}:{pw} https://{c['host']}/api/v2/exports?since=24h",
                    f"curl --user '{c['user']}:{pw}' -X POST https://{c['host']}/job/{c['svc']}-deploy/build",
                    f"wget --user={c['user']} --password='{pw}' https://{c['host']}/artifacts/{c['svc']}-latest.tar.gz",
                    f"http -a {c['user']}:{pw} GET https://{c['host']}/_cluster/health"))
    return cmd + "\n", [pw]


@more("placed", "properties")
def jdbc_url_password_param(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    url = r.choice((f"jdbc:mysql://{c['host']}:3306/{c['db']}?user={c['user']}&password={pw}&useSSL=true",
                    f"jdbc:sqlserver://{c['host']}:1433;databaseName={c['db']};user={c['user']};password={pw};"
                    "encrypt=true",
                    f"jdbc:oracle:thin:{c['user']}/{pw}@//{c['host']}:1521/ORCLPDB1",
                    f"jdbc:postgresql://{c['host']}:5432/{c['db']}?user={c['user']}&password={pw}&ssl=true"))
    return f"db.driver.url={url}\ndb.pool.max={c['n']}0\n", [pw]


@more("placed", "hcl")
def terraform_inline_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    kind = r.randrange(3)
    if kind == 0:
        return (f"# terraform.tfvars\nregion      = \"{c['region']}\"\ndb_username = \"{c['user']}\"\n"
                f"db_password = \"{pw}\"\n"), [pw]
    if kind == 1:
        return (f'variable "admin_password" {{\n  type        = string\n  description = "RDS master password"\n'
                f'  default     = "{pw}"\n}}\n'), [pw]
    return (f'provider "postgresql" {{\n  host     = "{c["host"]}"\n  port     = 5432\n  username = "{c["user"]}"\n'
            f'  password = "{pw}"\n  sslmode  = "require"\n}}\n'), [pw]


@more("placed", "yaml")
def github_actions_inline_secret(r: Random) -> Made:
    c, pw, tok = ctx(r), password(r), bare_token(r)
    if r.random() < 0.5:
        return (f"name: nightly-export\non:\n  schedule:\n    - cron: \"0 3 * * *\"\njobs:\n  export:\n"
                f"    runs-on: ubuntu-latest\n    env:\n      EXPORT_API_TOKEN: {tok}\n      DB_PASSWORD: \"{pw}\"\n"
                "    steps:\n      - uses: actions/checkout@v4\n"
                "      - run: ./scripts/export.sh --since 24h\n"), [tok, pw]
    return (f"      - name: Log in to the registry\n        uses: docker/login-action@v3\n        with:\n"
            f"          registry: harbor.{r.choice(DOMAINS)}\n          username: robot${c['svc']}\n"
            f"          password: {tok}\n"), [tok]


@more("placed", "ini")
def ansible_inventory_passwords(r: Random) -> Made:
    c, pw, become = ctx(r), password(r), password(r)
    hosts = "\n".join(f"{c['svc']}-{i}.{r.choice(DOMAINS)}" for i in range(1, r.randint(3, 4)))
    return (f"[{c['svc']}]\n{hosts}\n\n[{c['svc']}:vars]\nansible_user={c['user']}\nansible_password={pw}\n"
            f"ansible_become_pass={become}\n"), [pw, become]


@more("placed", "bash")
def kubectl_create_secret_literal(r: Random) -> Made:
    c = ctx(r)
    if r.random() < 0.6:
        pw = password(r)
        return (f"kubectl -n {c['ns']} create secret generic {c['svc']}-db \\\n  --from-literal=username={c['user']} "
                f"\\\n  --from-literal=password='{pw}'\n"), [pw]
    tok = bare_token(r)
    return (f"kubectl -n {c['ns']} create secret docker-registry regcred \\\n"
            f"  --docker-server=harbor.{r.choice(DOMAINS)} \\\n  --docker-username=robot${c['svc']} \\\n"
            f"  --docker-password={tok}\n"), [tok]


# --- encoded: one layer of encoding around the credential ---------------------------------------------


@more("encoded", "json")
def consul_kv_export_b64(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    enc = b64(pw)
    rows = [{"key": f"config/{c['svc']}/db/host", "flags": 0, "value": b64(str(c["host"]))},
            {"key": f"config/{c['svc']}/db/password", "flags": 0, "value": enc},
            {"key": f"config/{c['svc']}/pool_size", "flags": 0, "value": b64(str(c["n"]))}]
    return f"$ consul kv export config/{c['svc']}/\n" + json.dumps(rows, indent=2), [enc]


@more("encoded", "bash")
def uri_urlencoded_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    at = r.randrange(1, len(pw))
    pw = pw[:at] + r.choice("@#/:%?&$") + pw[at:]  # the reason the password had to be encoded
    q = url_quote(pw)
    cluster = pick(r, LOWER + "0123456789", 5)
    line = r.choice((f"MONGODB_URI=mongodb+srv://{c['user']}:{q}@cluster0.{cluster}.mongodb.net/{c['db']}"
                     "?retryWrites=true&w=majority",
                     f"REDIS_URL=rediss://default:{q}@{c['host']}:6380/0",
                     f"AMQP_URL=amqps://{c['user']}:{q}@{c['host']}:5671/{c['svc']}",
                     f"DATABASE_URL=postgres://{c['user']}:{q}@{c['host']}:5432/{c['db']}?sslmode=verify-full"))
    return f"# .env.production\n{line}\nLOG_LEVEL=info\n", [q]


@more("encoded", "yaml")
def helm_values_b64_secrets(r: Random) -> Made:
    c = ctx(r)
    db, smtp = b64(password(r)), b64(password(r))
    return (f"# values-prod.yaml\nimage:\n  repository: ghcr.io/northwind/{c['svc']}\n  tag: 1.{r.randint(0, 30)}.2\n"
            "secrets:\n  # base64, rendered as-is into the Secret's data\n"
            f"  dbPassword: {db}\n  smtpPassword: {smtp}\n"), [db, smtp]


@more("encoded", "bash")
def kubectl_jsonpath_secret_output(r: Random) -> Made:
    c, enc = ctx(r), b64(bare_value(r))
    name = f"{c['svc']}-{r.choice(('db', 'api', 'smtp'))}"
    if r.random() < 0.5:
        return (f"$ kubectl -n {c['ns']} get secret {name} -o jsonpath='{{.data.password}}'\n{enc}\n"), [enc]
    return (f"$ kubectl -n {c['ns']} get secret {name} -o jsonpath='{{.data}}'\n"
            f"{{\"password\":\"{enc}\",\"username\":\"{b64(str(c['user']))}\"}}\n"), [enc]


@more("encoded", "json")
def tfstate_escaped_private_key(r: Random) -> Made:
    c = ctx(r)
    key = openssh_private(r, "") + "\n"
    pw = password(r)
    attrs = {"algorithm": "ED25519", "id": hexs(r, 40), "private_key_openssh": key}
    res = [{"mode": "managed", "type": "tls_private_key", "name": "deploy",
            "provider": "provider[\"registry.terraform.io/hashicorp/tls\"]",
            "instances": [{"schema_version": 1, "attributes": attrs, "sensitive_attributes": []}]},
           {"mode": "managed", "type": "random_password", "name": f"{c['svc']}_db",
            "provider": "provider[\"registry.terraform.io/hashicorp/random\"]",
            "instances": [{"schema_version": 3, "attributes": {"length": len(pw), "result": pw, "special": True}}]}]
    doc = {"version": 4, "terraform_version": "1.6.6", "serial": r.randint(3, 300), "lineage": uuid4(r),
           "outputs": {}, "resources": res}
    return json.dumps(doc, indent=2), [json.dumps(key)[1:90], pw]


@more("encoded", "powershell")
def powershell_encoded_command(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    script = (f"$p = ConvertTo-SecureString '{pw}' -AsPlainText -Force; "
              f"$c = New-Object PSCredential('CORP\\{c['user']}', $p); "
              f"Invoke-Command -ComputerName {c['host']} -Credential $c -ScriptBlock {{ Get-Service {c['svc']} }}")
    enc = b64(script.encode("utf-16-le"))
    return f"powershell.exe -NoProfile -NonInteractive -EncodedCommand {enc}\n", [enc]


# --- file_format: credential file formats -------------------------------------------------------------


@more("file_format", "ini")
def s3cfg_access_keys(r: Random) -> Made:
    if r.random() < 0.5:
        key, secret = aws_pair(r)
        base = "s3.amazonaws.com"
    else:
        key, secret = pick(r, UPPER_NUM, 20), b64(r.randbytes(32)).rstrip("=")
        base = f"{r.choice(('fra1', 'nyc3', 'ams3'))}.digitaloceanspaces.com"
    gpg = password(r)
    return (f"[default]\naccess_key = {key}\nsecret_key = {secret}\nhost_base = {base}\n"
            f"host_bucket = %(bucket)s.{base}\ngpg_command = /usr/bin/gpg\ngpg_passphrase = {gpg}\n"
            "use_https = True\nsignature_v2 = False\n"), [secret, gpg]


@more("file_format", "ini")
def rclone_conf_remotes(r: Random) -> Made:
    key, secret = aws_pair(r)
    b2_id, b2_key = "005" + hexs(r, 22), "K005" + pick(r, ALNUM, 27)
    return (f"[s3-backup]\ntype = s3\nprovider = AWS\naccess_key_id = {key}\nsecret_access_key = {secret}\n"
            f"region = {ctx(r)['region']}\n\n[b2-archive]\ntype = b2\naccount = {b2_id}\nkey = {b2_key}\n"
            "hard_delete = true\n"), [secret, b2_key]


@more("file_format", "text")
def openvpn_static_key(r: Random) -> Made:
    body = "\n".join(hexs(r, 32) for _ in range(16))
    block = f"-----BEGIN OpenVPN Static key V1-----\n{body}\n-----END OpenVPN Static key V1-----"
    if r.random() < 0.5:
        return f"#\n# 2048 bit OpenVPN static key\n#\n{block}\n", [body]
    c = ctx(r)
    return (f"client\ndev tun\nproto udp\nremote vpn.{str(c['host']).split('.', 1)[1]} 1194\nnobind\n"
            f"cipher AES-256-GCM\n<tls-crypt>\n{block}\n</tls-crypt>\n"), [body]


@more("file_format", "xml")
def nuget_config_cleartext_password(r: Random) -> Made:
    pat = pick(r, LOWER + "234567", 52)
    return ('<?xml version="1.0" encoding="utf-8"?>\n<configuration>\n  <packageSources>\n'
            '    <add key="nuget.org" value="https://api.nuget.org/v3/index.json" protocolVersion="3" />\n'
            '    <add key="acme-internal" value="https://pkgs.dev.azure.com/acme/_packaging/acme-internal/nuget/v3/'
            'index.json" />\n  </packageSources>\n  <packageSourceCredentials>\n    <acme-internal>\n'
            f'      <add key="Username" value="{user(r)}" />\n'
            f'      <add key="ClearTextPassword" value="{pat}" />\n'
            "    </acme-internal>\n  </packageSourceCredentials>\n</configuration>\n"), [pat]


@more("file_format", "properties")
def android_keystore_properties(r: Random) -> Made:
    store = password(r)
    key = store if r.random() < 0.4 else password(r)
    return (f"# keystore.properties (not in git)\nstorePassword={store}\nkeyPassword={key}\n"
            f"keyAlias={r.choice(('upload', 'release', 'key0'))}\n"
            f"storeFile=/Users/{r.choice(PEOPLE)}/keys/upload-keystore.jks\n"), [store, key]


@more("file_format", "ini")
def aws_credentials_session_token(r: Random) -> Made:
    _, secret = aws_pair(r)
    key = "ASIA" + pick(r, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    token = b64(b"!\n\torigin_ec" + r.randbytes(r.randint(300, 600)))
    return (f"[{r.choice(('sso-admin', 'assumed-prod', 'mfa'))}]\naws_access_key_id = {key}\n"
            f"aws_secret_access_key = {secret}\naws_session_token = {token}\n"
            f"# expires {date(r)}\n"), [secret, token]


@more("file_format", "toml")
def cargo_credentials_toml(r: Random) -> Made:
    tok = "cio" + pick(r, ALNUM, 32)
    if r.random() < 0.5:
        return f"# ~/.cargo/credentials.toml\n[registry]\ntoken = \"{tok}\"\n", [tok]
    other = bare_token(r)
    return (f"[registry]\ntoken = \"{tok}\"\n\n[registries.acme-internal]\ntoken = \"Bearer {other}\"\n"), [tok, other]


@more("file_format", "yaml")
def gem_credentials_file(r: Random) -> Made:
    key = "rubygems_" + hexs(r, 48)
    gh = checksummed(r, "ghp_")
    return f"---\n:rubygems_api_key: {key}\n:github: Bearer {gh}\n", [key, gh]


# --- ciphertext (clean): encrypted material -------------------------------------------------------------


def pkcs7_envelope(r: Random, size: int) -> str:
    rsa_enc = seq(der(6, bytes.fromhex("2a864886f70d010101")), b"\x05\x00")
    recipient = seq(dint(b"\0"), seq(seq(), dint(r.randbytes(8))), rsa_enc, der(4, r.randbytes(256)))
    aes = seq(der(6, bytes.fromhex("608648016503040102")), der(4, r.randbytes(16)))
    content = seq(der(6, bytes.fromhex("2a864886f70d010701")), aes, der(0x80, r.randbytes(16 * (size // 16 + 1))))
    env = seq(dint(b"\0"), der(0x31, recipient), content)
    return b64(seq(der(6, bytes.fromhex("2a864886f70d010703")), der(0xA0, env)))


@more("ciphertext", "yaml")
def hiera_eyaml_pkcs7(r: Random) -> Made:
    c = ctx(r)
    one, two = pkcs7_envelope(r, r.randint(12, 30)), pkcs7_envelope(r, r.randint(20, 60))
    folded = "\n    ".join(wrap(f"ENC[PKCS7,{two}]", 64).splitlines())
    return (f"---\nprofile::{c['svc']}::db_user: {c['user']}\nprofile::{c['svc']}::db_password: ENC[PKCS7,{one}]\n"
            f"profile::{c['svc']}::api_token: >\n    {folded}\n")


@more("ciphertext", "properties")
def jasypt_enc_properties(r: Random) -> Made:
    c = ctx(r)
    enc = [b64(r.randbytes(16) + r.randbytes(16) + r.randbytes(16 * r.randint(1, 3))) for _ in range(2)]
    return (f"spring.datasource.url=jdbc:postgresql://{c['host']}:5432/{c['db']}\n"
            f"spring.datasource.username={c['user']}\nspring.datasource.password=ENC({enc[0]})\n"
            f"app.mail.password=ENC({enc[1]})\n"
            "jasypt.encryptor.algorithm=PBEWITHHMACSHA512ANDAES_256\n"
            "jasypt.encryptor.password=${JASYPT_ENCRYPTOR_PASSWORD}\n")


@more("ciphertext", "yaml")
def spring_cloud_config_cipher(r: Random) -> Made:
    c = ctx(r)
    return (f"spring:\n  datasource:\n    username: {c['user']}\n"
            f"    password: '{{cipher}}{hexs(r, 32 * r.randint(3, 5))}'\n"
            f"{c['svc']}:\n  webhook:\n    secret: '{{cipher}}{hexs(r, 32 * r.randint(4, 6))}'\n")


@more("ciphertext", "text")
def vault_transit_ciphertext(r: Random) -> Made:
    c = ctx(r)
    ct = b64(r.randbytes(12 + r.randint(16, 60) + 16))
    return (f"$ vault write transit/encrypt/{c['svc']} plaintext=@payload.b64\nKey            Value\n"
            f"---            -----\nciphertext     vault:v{r.randint(1, 4)}:{ct}\nkey_version    1\n")


@more("ciphertext", "bash")
def openssl_enc_salted_base64(r: Random) -> Made:
    blob = wrap(b64(b"Salted__" + r.randbytes(8) + r.randbytes(16 * r.randint(3, 20))))
    return (f"$ openssl enc -aes-256-cbc -pbkdf2 -iter 600000 -a -in secrets.env -out secrets.env.enc\n"
            f"$ cat secrets.env.enc\n{blob}\n")


@more("ciphertext", "json")
def aws_kms_ciphertext_blob(r: Random) -> Made:
    c = ctx(r)
    blob = b64(b"\x01\x02\x02\x00\x78" + bytes([r.randint(0x40, 0x7F)]) + r.randbytes(r.randint(150, 220)))
    doc = {"FunctionName": f"{c['svc']}-worker", "Environment": {"Variables": {
        "DB_HOST": c["host"], "DB_PASSWORD_ENCRYPTED": blob, "KMS_KEY_ALIAS": f"alias/{c['svc']}-lambda"}}}
    return json.dumps(doc, indent=2)


@more("ciphertext", "text")
def gpg_symmetric_armor(r: Random) -> Made:
    skesk = b"\x04\x09\x03\x08" + r.randbytes(8) + bytes([r.choice((0x60, 0xE0, 0xFF))])
    data = pgp_packet(3, skesk) + pgp_packet(18, b"\x01" + r.randbytes(r.randint(80, 500)))
    return ("$ gpg --symmetric --armor --cipher-algo AES256 notes.txt\n$ cat notes.txt.asc\n"
            + pgp_armor("MESSAGE", data))


@more("ciphertext", "ini")
def sops_ini_file(r: Random) -> Made:
    enc = age_armor(r, 32).replace("\n", "\\n") + "\\n"
    return (f"[database]\nuser = {sops_enc(r, 6)}\npassword = {sops_enc(r, 22)}\n\n[smtp]\n"
            f"password = {sops_enc(r, 18)}\n\n[sops]\nage__list_0__map_enc = {enc}\n"
            f"age__list_0__map_recipient = {age_recipient(r)}\nlastmodified = {date(r)}\n"
            f"mac = {sops_enc(r, 64)}\nunencrypted_suffix = _unencrypted\nversion = 3.8.1\n")


@more("ciphertext", "yaml")
def ansible_vault_labelled_vault_id(r: Random) -> Made:
    label = r.choice(("prod", "staging", "dev"))
    body = vault_hex(r).replace("$ANSIBLE_VAULT;1.1;AES256", f"$ANSIBLE_VAULT;1.2;AES256;{label}")
    c = ctx(r)
    return (f"# group_vars/{label}/vault.yml, encrypted with --vault-id {label}@prompt\n"
            f"vault_{c['svc']}_db_password: !vault |\n  " + body.replace("\n", "\n  ") + "\n")


# --- public_material (clean) ----------------------------------------------------------------------------


def ecdsa_ssh_blob(r: Random) -> bytes:
    point = p256_key(r).public_key().public_bytes(serialization.Encoding.X962,
                                                  serialization.PublicFormat.UncompressedPoint)
    return sstr("ecdsa-sha2-nistp256") + sstr("nistp256") + sstr(point)


@more("public_material", "text")
def hashed_known_hosts_ecdsa(r: Random) -> Made:
    lines = []
    for _ in range(r.randint(2, 4)):
        blob = ecdsa_ssh_blob(r) if r.random() < 0.5 else ssh_ed25519_pub(ed25519_keys(r)[1])
        alg = "ecdsa-sha2-nistp256" if blob.startswith(sstr("ecdsa-sha2-nistp256")) else "ssh-ed25519"
        lines.append(f"|1|{b64(r.randbytes(20))}|{b64(r.randbytes(20))} {alg} {b64(blob)}")
    return "\n".join(lines) + "\n"


@more("public_material", "text")
def ssh_keygen_fingerprints(r: Random) -> Made:
    out = []
    for _ in range(3):
        if r.random() < 0.5:
            blob, bits, kind = ssh_ed25519_pub(ed25519_keys(r)[1]), 256, "ED25519"
        else:
            blob, bits, kind = ecdsa_ssh_blob(r), 256, "ECDSA"
        fp = b64(hashlib.sha256(blob).digest()).rstrip("=")
        out.append(f"{bits} SHA256:{fp} {user(r)}@{r.choice(SERVICES)}-{r.randint(1, 9)} ({kind})")
    md5 = ":".join(hexs(r, 2) for _ in range(16))
    return "$ ssh-keygen -lf ~/.ssh/authorized_keys\n" + "\n".join(out) + f"\n$ ssh-keygen -E md5 -lf host.pub\n" \
        f"256 MD5:{md5} root@{ctx(r)['host']} (ED25519)\n"


@more("public_material", "text")
def x509_csr_pem(r: Random) -> Made:
    c = ctx(r)
    key = ed25519.Ed25519PrivateKey.from_private_bytes(r.randbytes(32))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, str(c["host"])),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Northwind Data")])
    csr = (x509.CertificateSigningRequestBuilder().subject_name(name)
           .add_extension(x509.SubjectAlternativeName([x509.DNSName(str(c["host"]))]), critical=False)
           .sign(key, None))
    return (f"$ openssl req -new -key {c['svc']}.key -out {c['svc']}.csr -subj \"/CN={c['host']}\"\n"
            f"$ cat {c['svc']}.csr\n" + csr.public_bytes(serialization.Encoding.PEM).decode().strip())


@more("public_material", "text")
def minisign_public_key(r: Random) -> Made:
    keyid = r.randbytes(8)
    pub = b64(b"Ed" + keyid + ed25519_keys(r)[1])
    v = f"{r.randint(0, 3)}.{r.randint(0, 20)}.{r.randint(0, 9)}"
    return (f"untrusted comment: minisign public key {keyid[::-1].hex().upper()}\n{pub}\n\n"
            f"$ minisign -Vm {r.choice(SERVICES)}-{v}-linux-amd64.tar.gz -P {pub}\n"
            "Signature and comment signature verified\n")


@more("public_material", "text")
def dkim_dns_txt_record(r: Random) -> Made:
    p = b64(rsa_spki(r, 2048))
    parts = " ".join(f'"{p[i:i + 250]}"' for i in range(0, len(p), 250))
    sel = r.choice(("google", "s1", "mail", f"k{r.randint(1, 3)}"))
    return f'{sel}._domainkey.{r.choice(DOMAINS)}. 3600 IN TXT ( "v=DKIM1; k=rsa; " "p=" {parts} )\n'


@more("public_material", "yaml")
def cert_manager_ca_bundle(r: Random) -> Made:
    c = ctx(r)
    cert = certificate(r, f"{c['svc']} Issuing CA").replace("\n", "\n    ")
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: trust-bundle\n  namespace: {c['ns']}\n"
            f"data:\n  ca-bundle.crt: |\n    {cert}\n")


# --- documented_example (clean): vendor-documented example credentials -----------------------------------

K8S_DOCS = ("YWRtaW4=", "MWYyZDFlMmU2N2Rm", "1f2d1e2e67df", "t0p-Secret", "S!B\\*d$zDsb=", "bXktYXBw",
            "Mzk1MjgkdmRnN0pi", "39528$vdg7Jb")
RFC6749 = ("s6BhdRkqt3", "gX1fBat3bV", "czZCaGRSa3F0MzpnWDFmQmF0M2JW", "2YotnFZFEjr1zCsicMWpAA",
           "tGzv3JOkF0XG5Qx2TlKWIA", "SplxlOBeZQQYbYS6WxSbIA")
RFC7617 = ("QWxhZGRpbjpvcGVuIHNlc2FtZQ==",)
STRIPE_DOCS = ("pk_test_TYooMQauvdEDq54NiTphI7jx", "sk_test_4eC39HqLyjWDarjtT1zdp7dc")
IMAGE_DOCS = ("mysecretpassword", "mypassword", "mongoadmin", "foobared")
DOCUMENTED: tuple[str, ...] = (*K8S_DOCS, *RFC6749, *RFC7617, *STRIPE_DOCS, *IMAGE_DOCS)


@more("documented_example", "yaml")
def k8s_docs_secret_manifest(r: Random) -> Made:
    if r.random() < 0.5:
        return ("# from the Kubernetes docs: echo -n 'admin' | base64; echo -n '1f2d1e2e67df' | base64\n"
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: mysecret\ntype: Opaque\ndata:\n"
                "  username: YWRtaW4=\n  password: MWYyZDFlMmU2N2Rm\n")
    if r.random() < 0.5:
        return ("apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-basic-auth\ntype: kubernetes.io/basic-auth\n"
                "stringData:\n  username: admin # required field for kubernetes.io/basic-auth\n"
                "  password: t0p-Secret # required field for kubernetes.io/basic-auth\n")
    return ("# 'my-app' and '39528$vdg7Jb', as in the Distributing Credentials Securely task\n"
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: test-secret\ndata:\n"
            "  username: bXktYXBw\n  password: Mzk1MjgkdmRnN0pi\n")


@more("documented_example", "bash")
def k8s_docs_kubectl_from_literal(r: Random) -> Made:
    return ("# Managing Secrets using kubectl (kubernetes.io): single quotes keep the shell away from $ \\ * = !\n"
            "kubectl create secret generic db-user-pass \\\n    --from-literal=username=admin \\\n"
            "    --from-literal=password='S!B\\*d$zDsb='\n")


@more("documented_example", "text")
def rfc6749_oauth_examples(r: Random) -> Made:
    if r.random() < 0.5:
        return ("POST /token HTTP/1.1\nHost: server.example.com\nAuthorization: Basic czZCaGRSa3F0MzpnWDFmQmF0M2JW\n"
                "Content-Type: application/x-www-form-urlencoded\n\n"
                "grant_type=authorization_code&code=SplxlOBeZQQYbYS6WxSbIA\n"
                "&redirect_uri=https%3A%2F%2Fclient%2Eexample%2Ecom%2Fcb\n")
    return ("HTTP/1.1 200 OK\nContent-Type: application/json;charset=UTF-8\nCache-Control: no-store\n\n"
            '{\n  "access_token":"2YotnFZFEjr1zCsicMWpAA",\n  "token_type":"example",\n  "expires_in":3600,\n'
            '  "refresh_token":"tGzv3JOkF0XG5Qx2TlKWIA",\n  "example_parameter":"example_value"\n}\n'
            "(RFC 6749, section 4.1.4: client s6BhdRkqt3, secret gX1fBat3bV)\n")


@more("documented_example", None)
def rfc7617_basic_auth_example(r: Random) -> Made:
    return ("RFC 7617 walks through the encoding with its classic example: the user-id `Aladdin` and the password "
            "`open sesame` are joined with a colon and base64-encoded, so the client sends\n\n"
            "    Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\n\n"
            "Anyone who sees that header can decode it, which is why Basic auth must only travel over TLS.")


@more("documented_example", "python")
def django_docs_databases_setting(r: Random) -> Made:
    return ('DATABASES = {\n    "default": {\n        "ENGINE": "django.db.backends.postgresql",\n'
            '        "NAME": "mydatabase",\n        "USER": "mydatabaseuser",\n        "PASSWORD": "mypassword",\n'
            '        "HOST": "127.0.0.1",\n        "PORT": "5432",\n    }\n}\n')


@more("documented_example", "bash")
def image_docs_default_logins(r: Random) -> Made:
    return r.choice((
        "# from the mongo image docs\ndocker run -d --name some-mongo \\\n"
        "  -e MONGO_INITDB_ROOT_USERNAME=mongoadmin \\\n"
        "  -e MONGO_INITDB_ROOT_PASSWORD=secret \\\n  mongo\n",
        "# Keycloak getting started (dev mode only)\ndocker run -p 8080:8080 -e KEYCLOAK_ADMIN=admin "
        "-e KEYCLOAK_ADMIN_PASSWORD=admin \\\n  quay.io/keycloak/keycloak start-dev\n",
        "# redis.conf ships with this line commented out\n# requirepass foobared\n",
        "# RabbitMQ: the default user guest/guest can only connect from localhost\n"
        "docker run -d --hostname my-rabbit -p 15672:15672 rabbitmq:3-management\n"
        "curl -u guest:guest http://localhost:15672/api/overview\n",
        "docker run -it --rm --name some-postgres -e POSTGRES_PASSWORD=mysecretpassword -p 5432:5432 postgres\n"
        "psql -h localhost -U postgres  # password: mysecretpassword\n"))


@more("documented_example", "javascript")
def stripe_js_docs_test_keys(r: Random) -> Made:
    return ("// Stripe docs sample account: test mode only\n"
            "const stripe = Stripe('pk_test_TYooMQauvdEDq54NiTphI7jx');\n"
            "// server side: sk_test_4eC39HqLyjWDarjtT1zdp7dc\n"
            f"// test card: 4242 4242 4242 4242, any future date, any CVC ({r.randint(100, 999)})\n")


@more("documented_example", None)
def prose_secret_format_explainer(r: Random) -> Made:
    return r.choice((
        "GitHub personal access tokens start with `ghp_` followed by 36 base62 characters, the last six of which "
        "are a checksum; fine-grained tokens start with `github_pat_` instead. Secret scanning looks for exactly "
        "these prefixes, so if you see one in a log, revoke it first and investigate second.",
        "An AWS access key ID is 20 upper-case characters starting with `AKIA` (long-term) or `ASIA` (temporary); "
        "the matching secret access key is 40 characters of base64. The ID alone is not a secret, but never paste "
        "the pair into a ticket.",
        "Stripe keys carry their mode in the prefix: `sk_live_` and `rk_live_` are production secret and restricted "
        "keys, `sk_test_` only works against test data, and `pk_` keys are publishable and meant for the browser.",
        "Slack bot tokens begin with `xoxb-`, user tokens with `xoxp-`. A signing secret is 32 hex characters and "
        "only ever lives in the app's configuration, never in the message payloads."))


# --- placeholder (clean): placeholders, references and near misses ------------------------------------


@more("placeholder", "json")
def azure_keyvault_references(r: Random) -> Made:
    c, vault = ctx(r), f"kv-{ctx(r)['svc']}-{r.choice(('prod', 'weu', '001'))}"
    settings = [{"name": "DB_PASSWORD", "value": f"@Microsoft.KeyVault(SecretUri=https://{vault}.vault.azure.net/"
                 f"secrets/{c['svc']}-db-password/)", "slotSetting": False},
                {"name": "API_KEY", "value": f"@Microsoft.KeyVault(VaultName={vault};SecretName={c['svc']}-api-key)",
                 "slotSetting": False},
                {"name": "WEBSITE_RUN_FROM_PACKAGE", "value": "1", "slotSetting": False}]
    return json.dumps(settings, indent=2)


@more("placeholder", "text")
def env_lookup_many_languages(r: Random) -> Made:
    v = r.choice(("DB_PASSWORD", "API_KEY", "SIGNING_SECRET", "CLIENT_SECRET"))
    lines = (f'password = os.environ["{v}"]', f"const apiKey = process.env.{v};",
             f'String secret = System.getenv("{v}");', f'var secret = Environment.GetEnvironmentVariable("{v}");',
             f'secret := os.Getenv("{v}")', f'let secret = std::env::var("{v}")?;', f'secret = ENV.fetch("{v}")',
             f"$secret = $env:{v}", f"set PASSWORD=%{v}%", f'password="${{{v}:?must be set}}"')
    return "\n".join(r.sample(lines, r.randint(4, 7))) + "\n"


@more("placeholder", "yaml")
def compose_secrets_files(r: Random) -> Made:
    c = ctx(r)
    return (f"services:\n  {c['svc']}-db:\n    image: postgres:16\n    environment:\n"
            f"      POSTGRES_USER: {c['user']}\n      POSTGRES_PASSWORD_FILE: /run/secrets/db_password\n"
            "    secrets:\n      - db_password\nsecrets:\n  db_password:\n    file: ./secrets/db_password.txt\n")


@more("placeholder", "hcl")
def terraform_sensitive_refs(r: Random) -> Made:
    c = ctx(r)
    return (f'variable "db_password" {{\n  type      = string\n  sensitive = true\n}}\n\n'
            f'data "aws_secretsmanager_secret_version" "api" {{\n  secret_id = "{c["svc"]}/api-key"\n}}\n\n'
            f'resource "aws_db_instance" "{c["svc"]}" {{\n  username = "{c["user"]}"\n  password = var.db_password\n'
            "}\n\nlocals {\n  api_key = data.aws_secretsmanager_secret_version.api.secret_string\n}\n")


@more("placeholder", "yaml")
def ansible_vault_var_indirection(r: Random) -> Made:
    c = ctx(r)
    return (f"ansible_user: {c['user']}\nansible_become_pass: \"{{{{ vault_become_pass }}}}\"\n"
            f"{c['svc']}_db_password: \"{{{{ lookup('community.hashi_vault.hashi_vault', "
            f"'secret=secret/data/{c['svc']}/db:password') }}}}\"\n"
            f"{c['svc']}_api_token: \"{{{{ lookup('env', '{c['svc'].upper()}_API_TOKEN') }}}}\"\n")


@more("placeholder", "bash")
def cli_password_prompted(r: Random) -> Made:
    c = ctx(r)
    return r.choice((f"$ mysql -u root -p -h {c['host']} {c['db']}\nEnter password:\n",
                     f"$ psql -h {c['host']} -U {c['user']} {c['db']}\nPassword for user {c['user']}:\n",
                     f"$ docker login -u {c['user']} --password-stdin harbor.{r.choice(DOMAINS)} < ~/.secrets/harbor\n"
                     "Login Succeeded\n",
                     "read -rs -p 'DB password: ' DB_PASSWORD && export DB_PASSWORD\n"))


@more("placeholder", "text")
def token_replacement_markers(r: Random) -> Made:
    c = ctx(r)
    return r.choice((f"Server={c['host']};Database={c['db']};User Id={c['user']};Password=#{{DbPassword}}#;\n",
                     "smtp.password=@@SMTP_PASSWORD@@\nsmtp.user=@@SMTP_USER@@\n",
                     f"ConnectionString: \"Host={c['host']};Password=__DbPassword__\"\nApiKey: \"__ApiKey__\"\n",
                     "[database]\npassword = %(db_password)s\napi_key = ${API_KEY}\n"))


@more("placeholder", "yaml")
def gitlab_ci_variable_refs(r: Random) -> Made:
    c = ctx(r)
    return (f"deploy:\n  stage: deploy\n  script:\n"
            '    - docker login -u "$CI_REGISTRY_USER" -p "$CI_REGISTRY_PASSWORD" "$CI_REGISTRY"\n'
            f'    - helm upgrade --install {c["svc"]} ./chart --set db.password="$PROD_DB_PASSWORD"\n'
            '    - curl --header "JOB-TOKEN: $CI_JOB_TOKEN" "$CI_API_V4_URL/projects/$CI_PROJECT_ID/packages"\n')


@more("placeholder", None)
def chat_secret_redacted(r: Random) -> Made:
    c, (a, b) = ctx(r), r.sample(PEOPLE, 2)
    return chat(r, [(a, f"what's the {c['svc']} admin password?"),
                    (b, r.choice(("[message removed by the DLP bot: possible credential]", "`********`",
                                  "not pasting it here, check the team vault under " + f"{c['svc']}/admin"))),
                    (a, "ok, found it"), (b, "remember to log out of the shared session")])


@more("placeholder", None)
def ticket_password_sent_separately(r: Random) -> Made:
    c, who = ctx(r), r.choice(PEOPLE)
    return (f"> Subject: [INC{r.randint(10000, 99999)}] Access to {c['host']} provisioned\n>\n"
            f"> Hi {who.title()},\n>\n> your account `{c['user']}` on {c['host']} is ready. The temporary password "
            "was sent to your phone by SMS and expires in 24 hours.\n>\n> Service Desk")


# --- test_vector (clean): published test vectors, digests, hashes -------------------------------------


@more("test_vector", "python")
def rfc4226_hotp_vectors(r: Random) -> Made:
    secret = b"12345678901234567890"
    rows = []
    for count in range(10):
        digest = hmac.new(secret, struct.pack(">Q", count), hashlib.sha1).digest()
        code = (int.from_bytes(digest[(o := digest[-1] & 15) : o + 4]) & 0x7FFFFFFF) % 10**6
        rows.append(f"    ({count}, \"{code:06d}\"),")
    return (f'# RFC 4226 Appendix D\nSECRET = bytes.fromhex("{secret.hex()}")  # ASCII "{secret.decode()}"\n'
            "HOTP = [\n" + "\n".join(rows) + "\n]\n")


@more("test_vector", "text")
def rfc5869_hkdf_case1(r: Random) -> Made:
    ikm, salt, info = b"\x0b" * 22, bytes(range(13)), bytes(range(0xF0, 0xFA))
    prk = hmac.new(salt, ikm, hashlib.sha256).digest()
    okm, block = b"", b""
    for i in range(1, 3):
        block = hmac.new(prk, block + info + bytes([i]), hashlib.sha256).digest()
        okm += block
    return (f"RFC 5869 A.1 (SHA-256)\nIKM  = 0x{ikm.hex()}\nsalt = 0x{salt.hex()}\ninfo = 0x{info.hex()}\nL    = 42\n\n"
            f"PRK  = 0x{prk.hex()}\nOKM  = 0x{okm[:42].hex()}\n")


@more("test_vector", "python")
def rfc3394_aes_keywrap_vector(r: Random) -> Made:
    kek, key = bytes(range(16)), bytes.fromhex("00112233445566778899aabbccddeeff")
    return (f'# RFC 3394 section 4.1: wrap 128 bits of key data with a 128-bit KEK\nKEK = "{kek.hex().upper()}"\n'
            f'KEY_DATA = "{key.hex().upper()}"\nCIPHERTEXT = "{aes_key_wrap(kek, key).hex().upper()}"\n')


@more("test_vector", "text")
def fips180_sha_examples(r: Random) -> Made:
    rows = [(name, msg, hashlib.new(name, msg).hexdigest()) for name in ("sha1", "sha256", "sha512")
            for msg in (b"abc", b"")]
    return "".join(f'{name.upper()}("{m.decode()}") = {h}\n' for name, m, h in rows)


@more("test_vector", None)
def github_webhook_docs_vector(r: Random) -> Made:
    secret, payload = "It's a Secret to Everybody", "Hello, World!"
    sig = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    return ("To check your implementation of webhook signature validation, GitHub's docs give this example: with "
            f"the secret `{secret}` and the payload `{payload}`, the expected header is\n\n"
            f"    X-Hub-Signature-256: sha256={sig}\n")


@more("test_vector", "text")
def rfc7636_pkce_vector(r: Random) -> Made:
    verifier = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return (f"RFC 7636 Appendix B (S256)\ncode_verifier  = {verifier}\ncode_challenge = {challenge}\n"
            "code_challenge_method = S256\n")


@more("test_vector", "text")
def go_sum_lines(r: Random) -> Made:
    mods = r.sample(("github.com/google/uuid", "golang.org/x/sync", "github.com/spf13/cobra", "go.uber.org/zap",
                     "github.com/prometheus/client_golang", "google.golang.org/grpc"), 3)
    out = ""
    for m in mods:
        v = f"v{r.randint(0, 1)}.{r.randint(1, 40)}.{r.randint(0, 9)}"
        out += f"{m} {v} h1:{b64(r.randbytes(32))}\n{m} {v}/go.mod h1:{b64(r.randbytes(32))}\n"
    return out


@more("test_vector", "text")
def pip_requirements_hashes(r: Random) -> Made:
    pkgs = r.sample(("requests==2.32.3", "urllib3==2.2.2", "certifi==2024.7.4", "idna==3.7", "httpx==0.27.0"), 3)
    return "".join(f"{p} \\\n    --hash=sha256:{hexs(r, 64)} \\\n    --hash=sha256:{hexs(r, 64)}\n" for p in pkgs)


