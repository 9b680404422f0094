"""A second round of fit-only snippet shapes for scripts/build_secrets.py: always in the ``fit`` part.

Same contract as `secret_shapes` (secret families return ``(snippet, needles)``) and `secret_shapes_clean`
(clean families return the snippet). Names are prefixed ``more2-``. New formats, placements and tools, mostly in
the families where the scan generalised worst: encrypted material that is not a credential (``ciphertext``),
published example credentials (``documented_example``) and credentials placed by structure alone (``placed``).
The documented values were checked against their sources; the RFC 2617/7616 digests and the SigV4 values are
computed from their published inputs, and reproduce the published outputs.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
from random import Random

from secret_formats import (
    ALNUM,
    DOMAINS,
    PEOPLE,
    SERVICES,
    UPPER_NUM,
    Made,
    age_armor,
    age_recipient,
    api_token,
    b64,
    b64u,
    bare_token,
    bare_value,
    checksummed,
    ctx,
    date,
    hexs,
    password,
    pem,
    pgp_armor,
    pgp_packet,
    pick,
    prefixed,
    rsa_pkcs8,
    sealed,
    sops_enc,
    uuid4,
    vault_hex,
    wrap,
)

more2 = prefixed("more2")


def domain(r: Random) -> str:
    return r.choice(DOMAINS)


def host_of(r: Random) -> str:
    return f"{r.choice(SERVICES)}-mq.{domain(r)}"


def clock(r: Random) -> tuple[int, int, int]:
    return r.randint(8, 17), r.randint(0, 50), r.randint(0, 59)


# --- placed: credentials placed by structure ------------------------------------------------------------


@more2("placed", "yaml")
def yaml_block_scalar_config_secret(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(3)
    if kind == 0:
        secret = hexs(r, 40)
        return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\ndata:\n"
                f"  url: https://argocd.{domain(r)}\n  dex.config: |\n    connectors:\n      - type: github\n"
                f"        id: github\n        name: GitHub\n        config:\n          clientID: Iv1.{hexs(r, 16)}\n"
                f"          clientSecret: {secret}\n          orgs:\n            - name: northwind\n"), [secret]
    if kind == 1:
        pw = password(r)
        return (f"apiVersion: v1\nkind: Secret\nmetadata:\n  name: alertmanager-main\n  namespace: monitoring\n"
                f"stringData:\n  alertmanager.yaml: |\n    global:\n      smtp_smarthost: smtp.{domain(r)}:587\n"
                f"      smtp_from: alerts@{domain(r)}\n      smtp_auth_username: {c['user']}\n"
                f"      smtp_auth_password: {pw}\n    route:\n      receiver: ops-mail\n"), [pw]
    tok = bare_token(r)
    return (f"# values-prod.yaml for the {c['svc']} chart\nreplicaCount: {c['n']}\nconfigToml: |\n"
            f"  [server]\n  port = 8080\n\n  [upstream]\n  url = \"https://{c['host']}\"\n  token = \"{tok}\"\n"
            "  timeout = \"5s\"\n"), [tok]


@more2("placed", "java")
def java_value_annotation_default(r: Random) -> Made:
    c = ctx(r)
    key, v = r.choice((("payments.stripe.api-key", "tok"), ("spring.datasource.password", "pw"),
                       ("security.jwt.signing-secret", "bare"), (f"{c['svc']}.client.api-token", "tok")))
    value = api_token(r) if v == "tok" else password(r) if v == "pw" else bare_token(r)
    field = r.choice(("secret", "apiKey", "password", "token"))
    return (f"@Configuration\npublic class {c['svc'].title()}ClientConfig {{\n\n"
            f"    @Value(\"${{{key}:{value}}}\")\n    private String {field};\n\n"
            f"    @Value(\"${{{c['svc']}.base-url:https://{c['host']}}}\")\n    private String baseUrl;\n}}\n"), [value]


@more2("placed", "yaml")
def spring_application_yml_nested(r: Random) -> Made:
    c = ctx(r)
    pw = password(r)
    out = (f"spring:\n  application:\n    name: {c['svc']}\n  datasource:\n"
           f"    url: jdbc:postgresql://{c['host']}:5432/{c['db']}\n    username: {c['user']}\n    password: {pw}\n")
    needles = [pw]
    extra = r.randrange(3)
    if extra == 0:
        mail = password(r)
        out += f"  mail:\n    host: smtp.{domain(r)}\n    port: 587\n    username: {c['user']}\n    password: {mail}\n"
        needles.append(mail)
    elif extra == 1:
        secret = pick(r, ALNUM + "-_", 40)
        out += ("  security:\n    oauth2:\n      client:\n        registration:\n          keycloak:\n"
                f"            client-id: {c['svc']}-backend\n            client-secret: {secret}\n"
                "            scope: openid,profile\n")
        needles.append(secret)
    else:
        rabbit = password(r)
        out += f"  rabbitmq:\n    host: {host_of(r)}\n    username: {c['svc']}\n    password: {rabbit}\n"
        needles.append(rabbit)
    return out + "server:\n  port: 8080\n", needles


@more2("placed", "python")
def python_kwargs_connect(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    kind = r.randrange(5)
    if kind == 0:
        return (f'conn = psycopg2.connect(\n    host="{c["host"]}",\n    dbname="{c["db"]}",\n    user="{c["user"]}",\n'
                f'    password="{pw}",\n    connect_timeout=5,\n)\n'), [pw]
    if kind == 1:
        return f'cache = redis.Redis(host="{c["host"]}", port=6379, db=0, password="{pw}", ssl=True)\n', [pw]
    if kind == 2:
        return (f'with smtplib.SMTP("smtp.{domain(r)}", 587) as smtp:\n    smtp.starttls()\n'
                f'    smtp.login("{c["user"]}@{domain(r)}", "{pw}")\n    smtp.send_message(msg)\n'), [pw]
    if kind == 3:
        return (f'credentials = pika.PlainCredentials("{c["user"]}", "{pw}")\n'
                f'params = pika.ConnectionParameters("{c["host"]}", 5672, "/{c["svc"]}", credentials)\n'), [pw]
    return (f'DB = dict(host="{c["host"]}", port={c["port"]}, user="{c["user"]}", password="{pw}", '
            f'database="{c["db"]}")\nengine = create_engine(URL.create("postgresql+psycopg", **DB))\n'), [pw]


@more2("placed", "javascript")
def js_object_literal_options(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(4)
    if kind == 0:
        pw = password(r)
        return (f"const pool = new Pool({{\n  host: '{c['host']}',\n  database: '{c['db']}',\n  user: '{c['user']}',\n"
                f"  password: '{pw}',\n  max: {c['n']}0,\n}});\n"), [pw]
    if kind == 1:
        pw = password(r)
        return (f"const transporter = nodemailer.createTransport({{\n  host: 'smtp.{domain(r)}',\n  port: 465,\n"
                f"  secure: true,\n  auth: {{ user: '{c['user']}@{domain(r)}', pass: '{pw}' }},\n}});\n"), [pw]
    tok = bare_token(r)
    if kind == 2:
        return (f"module.exports = {{\n  port: 3000,\n  jwtSecret: '{tok}',\n  jwtExpiresIn: '12h',\n}};\n"), [tok]
    return (f"const client = new Client({{\n  node: 'https://{c['host']}:9200',\n  auth: {{ apiKey: \"{tok}\" }},\n"
            "  tls: { rejectUnauthorized: true },\n});\n"), [tok]


@more2("placed", "bash")
def shell_heredoc_env_file(r: Random) -> Made:
    c, pw, tok = ctx(r), password(r), bare_token(r)
    path = r.choice((f"/etc/default/{c['svc']}", f"/opt/{c['svc']}/.env", f"/etc/{c['svc']}/secrets.env"))
    quote = r.choice(("EOF", "'EOF'", "ENV"))
    end = quote.strip("'")
    writer = r.choice((f"cat > {path} <<{quote}", f"sudo tee {path} >/dev/null <<{quote}", f"cat <<{quote} > {path}"))
    return (f"# provision.sh (run once on the new host)\n{writer}\nDB_HOST={c['host']}\nDB_USER={c['user']}\n"
            f"DB_PASSWORD={pw}\n{c['svc'].upper()}_API_TOKEN={tok}\n{end}\nchmod 600 {path}\n"
            f"systemctl restart {c['svc']}\n"), [pw, tok]


@more2("placed", "dockerfile")
def dockerfile_env_arg_literal(r: Random) -> Made:
    c = ctx(r)
    kind = r.randrange(3)
    if kind == 0:
        tok = checksummed(r, "npm_")
        return (f"FROM node:20-alpine AS build\nARG NPM_TOKEN={tok}\nWORKDIR /app\nCOPY package*.json ./\n"
                'RUN echo "//registry.npmjs.org/:_authToken=${NPM_TOKEN}" > .npmrc && npm ci && rm .npmrc\n'
                "COPY . .\nRUN npm run build\n"), [tok]
    pw = password(r)
    if kind == 1:
        return (f"FROM python:3.12-slim\nENV DB_HOST={c['host']} \\\n    DB_USER={c['user']} \\\n"
                f"    DB_PASSWORD={pw}\nCOPY . /srv/{c['svc']}\nCMD [\"gunicorn\", \"app:app\"]\n"), [pw]
    tok = bare_token(r)
    return (f"FROM eclipse-temurin:21-jre\nENV SPRING_PROFILES_ACTIVE prod\nENV {c['svc'].upper()}_API_KEY {tok}\n"
            f"COPY target/{c['svc']}.jar /app.jar\nENTRYPOINT [\"java\", \"-jar\", \"/app.jar\"]\n"), [tok]


@more2("placed", "makefile")
def makefile_credential_variables(r: Random) -> Made:
    c = ctx(r)
    tok, pw = bare_token(r), password(r)
    op = r.choice(("?=", ":=", "="))
    return (f"REGISTRY      {op} harbor.{domain(r)}\nREGISTRY_USER {op} robot${c['svc']}\n"
            f"REGISTRY_PASS {op} {tok}\nPGPASSWORD    {op} {pw}\n\n.PHONY: push migrate\n"
            "push:\n\tdocker login -u '$(REGISTRY_USER)' -p '$(REGISTRY_PASS)' $(REGISTRY)\n"
            f"\tdocker push $(REGISTRY)/{c['svc']}:$(VERSION)\n\n"
            f"migrate:\n\tPGPASSWORD=$(PGPASSWORD) psql -h {c['host']} -U {c['user']} -f schema.sql\n"), [tok, pw]


@more2("placed", "ini")
def systemd_environment_lines(r: Random) -> Made:
    c, pw, tok = ctx(r), password(r), bare_token(r)
    if r.random() < 0.5:
        return (f"# /etc/systemd/system/{c['svc']}.service\n[Unit]\nDescription={c['svc']} worker\n"
                f"After=network-online.target\n\n[Service]\nUser={c['svc']}\n"
                f"Environment=\"DB_URL=postgres://{c['host']}:5432/{c['db']}\" \"DB_USER={c['user']}\"\n"
                f"Environment=\"DB_PASSWORD={pw}\"\nExecStart=/usr/local/bin/{c['svc']} --workers {c['n']}\n"
                "Restart=on-failure\n\n[Install]\nWantedBy=multi-user.target\n"), [pw]
    return (f"# systemctl edit {c['svc']}  ->  /etc/systemd/system/{c['svc']}.service.d/override.conf\n[Service]\n"
            f"Environment=API_TOKEN={tok}\nEnvironment=LOG_LEVEL=info\n"), [tok]


@more2("placed", "text")
def crontab_token_in_url(r: Random) -> Made:
    c, tok = ctx(r), bare_token(r)
    param = r.choice(("token", "access_token", "api_key", "key", "auth"))
    line = r.choice((f'*/15 * * * * curl -fsS "https://{c["host"]}/api/v1/sync?{param}={tok}&full=0" >/dev/null 2>&1',
                     f"0 3 * * * wget -qO- 'https://{c['host']}/cron/run.php?{param}={tok}' > /var/log/{c['svc']}.log",
                     f"@hourly /usr/bin/curl -s -X POST 'https://{c['host']}/hooks/rebuild?{param}={tok}'"))
    return (f"# crontab -l -u {c['user']}\nMAILTO=ops@{domain(r)}\nSHELL=/bin/bash\n"
            f"5 * * * * /usr/local/bin/rotate-logs.sh\n{line}\n"), [tok]


@more2("placed", "text")
def irc_log_here_you_go(r: Random) -> Made:
    c, v = ctx(r), bare_value(r)
    a, b = r.sample(PEOPLE, 2)
    what = r.choice((f"the {c['svc']} staging db password", "the jenkins admin login", f"the {c['svc']} api key",
                     "creds for the partner sftp"))
    lines = [(a, f"anyone got {what}? vault is down"), (b, f"here you go: {v}"), (a, "cheers, that works"),
             (b, "pls rotate it once vault is back")]
    h, m, s = clock(r)
    style = r.randrange(3)
    out = []
    if style == 0:
        out.append(f"{h:02d}:{m:02d} -!- {a} [~{a}@10.20.{r.randint(0, 255)}.{r.randint(1, 254)}] has joined #ops")
    for i, (who, said) in enumerate(lines):
        mm, ss = m + i, (s + 17 * i) % 60
        if style == 0:
            out.append(f"{h:02d}:{mm:02d} < {who}> {said}")
        elif style == 1:
            out.append(f"{date(r)[:10]} {h:02d}:{mm:02d}:{ss:02d}\t{who}\t{said}")
        else:
            out.append(f"[{h:02d}:{mm:02d}:{ss:02d}] <@{who}> {said}")
    return "\n".join(out) + "\n", [v]


@more2("placed", "http")
def http_request_dump_headers(r: Random) -> Made:
    c = ctx(r)
    name, tok = r.choice((("X-Api-Key", bare_token(r)), ("Authorization", "Token " + hexs(r, 40)),
                          ("X-Auth-Token", bare_token(r)), ("PRIVATE-TOKEN", "glpat-" + pick(r, ALNUM + "_-", 20))))
    needle = tok.removeprefix("Token ")
    style = r.randrange(3)
    if style == 0:
        return (f"$ curl -v https://{c['host']}/api/v2/exports -H '{name}: {tok}'\n"
                f"*   Trying 10.4.{r.randint(0, 255)}.{r.randint(1, 254)}:443...\n* Connected to {c['host']} port 443\n"
                f"> GET /api/v2/exports HTTP/2\n> Host: {c['host']}\n> user-agent: curl/8.5.0\n> accept: */*\n"
                f"> {name.lower()}: {tok}\n>\n< HTTP/2 200\n< content-type: application/json\n"), [needle]
    if style == 1:
        return (f"POST /api/v1/jobs HTTP/1.1\nHost: {c['host']}\nUser-Agent: python-requests/2.31.0\n"
                f"Accept: application/json\n{name}: {tok}\nContent-Type: application/json\nContent-Length: 42\n\n"
                f'{{"job": "{c["svc"]}-export", "priority": {c["n"]}}}\n'), [needle]
    entry = {"request": {"method": "GET", "url": f"https://{c['host']}/api/v1/status",
                         "headers": [{"name": "Accept", "value": "application/json"}, {"name": name, "value": tok},
                                     {"name": "User-Agent", "value": "Mozilla/5.0"}]},
             "response": {"status": 200, "statusText": "OK"}}
    return "// exported from the browser's network tab (HAR)\n" + json.dumps({"entries": [entry]}, indent=2), [needle]


@more2("placed", "sql")
def sql_create_user_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    kind = r.randrange(4)
    if kind == 0:
        return (f"CREATE USER '{c['user']}'@'10.%' IDENTIFIED BY '{pw}';\n"
                f"GRANT SELECT, INSERT, UPDATE ON {c['db']}.* TO '{c['user']}'@'10.%';\nFLUSH PRIVILEGES;\n"), [pw]
    if kind == 1:
        return (f"ALTER ROLE {c['user']} WITH LOGIN PASSWORD '{pw}' VALID UNTIL '2026-01-01';\n"
                f"GRANT CONNECT ON DATABASE {c['db']} TO {c['user']};\n"), [pw]
    if kind == 2:
        return (f"CREATE LOGIN {c['svc']}_app WITH PASSWORD = '{pw}', CHECK_POLICY = ON;\nGO\n"
                f"USE {c['db']};\nCREATE USER {c['svc']}_app FOR LOGIN {c['svc']}_app;\nGO\n"), [pw]
    return (f"ALTER USER {c['user'].upper().replace('-', '_')} IDENTIFIED BY \"{pw}\" ACCOUNT UNLOCK;\n"
            f"GRANT CREATE SESSION TO {c['user'].upper().replace('-', '_')};\n"), [pw]


@more2("placed", "ldif")
def ldif_user_password_plain(r: Random) -> Made:
    who, pw = r.choice(PEOPLE), password(r)
    base = "dc=" + ",dc=".join(domain(r).split("."))
    return (f"dn: uid={who},ou=people,{base}\nobjectClass: inetOrgPerson\nobjectClass: posixAccount\nuid: {who}\n"
            f"cn: {who.title()}\nsn: {who.title()}\nuidNumber: {r.randint(10000, 20000)}\ngidNumber: 10000\n"
            f"homeDirectory: /home/{who}\nmail: {who}@{domain(r)}\nuserPassword: {pw}\n"), [pw]


@more2("placed", "toml")
def toml_secret_section_plain_keys(r: Random) -> Made:
    c = ctx(r)
    section = r.choice(("secrets", "credentials", "api_keys", "tokens"))
    keys = r.sample(("stripe", "sendgrid", "github", "maps", "slack", "sentry", "smtp", "s3"), r.randint(2, 3))
    vals = [bare_token(r) if r.random() < 0.7 else password(r) for _ in keys]
    body = "".join(f'{k} = "{v}"\n' for k, v in zip(keys, vals, strict=True))
    return (f'[app]\nname = "{c["svc"]}"\nenv = "production"\n\n[{section}]\n{body}\n[server]\nport = 8080\n'), vals


# --- encoded: one layer of encoding around the credential ---------------------------------------------


@more2("encoded", "ldif")
def ldif_user_password_b64(r: Random) -> Made:
    who, enc = r.choice(PEOPLE), b64(password(r))
    base = "dc=" + ",dc=".join(domain(r).split("."))
    return (f"# ldapsearch -LLL -b ou=services,{base} '(uid=svc-*)' uid userPassword\n"
            f"dn: uid=svc-{who},ou=services,{base}\nuid: svc-{who}\nuserPassword:: {enc}\n"), [enc]


@more2("encoded", "ini")
def git_config_extraheader_basic(r: Random) -> Made:
    c = ctx(r)
    enc = b64("x-access-token:" + checksummed(r, "ghs_"))
    return (f"# .git/config on the self-hosted runner after actions/checkout\n[core]\n\trepositoryformatversion = 0\n"
            f"\tfilemode = true\n\tbare = false\n[remote \"origin\"]\n\turl = https://github.com/northwind/{c['svc']}\n"
            "\tfetch = +refs/heads/*:refs/remotes/origin/*\n[http \"https://github.com/\"]\n"
            f"\textraheader = AUTHORIZATION: basic {enc}\n"), [enc]


@more2("encoded", "yaml")
def gcp_sa_key_b64_ci_variable(r: Random) -> Made:
    c = ctx(r)
    project = f"{c['svc']}-{pick(r, '0123456789', 6)}"
    doc = {"type": "service_account", "project_id": project, "private_key_id": hexs(r, 40),
           "private_key": pem("PRIVATE KEY", rsa_pkcs8(r)) + "\n",
           "client_email": f"ci-deployer@{project}.iam.gserviceaccount.com", "client_id": pick(r, "0123456789", 21),
           "token_uri": "https://oauth2.googleapis.com/token"}
    enc = b64(json.dumps(doc, indent=2))
    return (f"variables:\n  GOOGLE_PROJECT: {project}\n  GCP_SA_KEY_B64: {enc}\n\ndeploy:\n  stage: deploy\n"
            "  script:\n    - echo \"$GCP_SA_KEY_B64\" | base64 -d > /tmp/sa.json\n"
            "    - gcloud auth activate-service-account --key-file /tmp/sa.json\n"), [enc]


@more2("encoded", "ini")
def npmrc_password_b64(r: Random) -> Made:
    c, enc = ctx(r), b64(password(r))
    reg = f"//nexus.{domain(r)}/repository/npm-private/"
    return (f"registry=https:{reg}\n{reg}:username={c['user']}\n{reg}:_password={enc}\n"
            f"{reg}:email={c['user']}@{domain(r)}\n{reg}:always-auth=true\n"), [enc]


# --- file_format: credential file formats -------------------------------------------------------------


@more2("file_format", "yaml")
def gh_cli_hosts_yml(r: Random) -> Made:
    who, tok = r.choice(PEOPLE), checksummed(r, "gho_")
    if r.random() < 0.5:
        return (f"# ~/.config/gh/hosts.yml\ngithub.com:\n    oauth_token: {tok}\n    user: {who}\n"
                "    git_protocol: https\n"), [tok]
    ghe = checksummed(r, "gho_")
    return (f"github.com:\n    user: {who}\n    oauth_token: {tok}\n    git_protocol: ssh\n"
            f"github.{domain(r)}:\n    user: {who}\n    oauth_token: {ghe}\n    git_protocol: https\n"), [tok, ghe]


@more2("file_format", "ini")
def databrickscfg_profiles(r: Random) -> Made:
    toks = [f"dapi{hexs(r, 32)}" + r.choice(("", "", "-2", "-3")) for _ in range(r.randint(1, 2))]
    out = ""
    for name, tok in zip(("DEFAULT", "prod"), toks, strict=False):
        out += (f"[{name}]\nhost  = https://adb-{pick(r, '0123456789', 16)}.{r.randint(1, 19)}.azuredatabricks.net\n"
                f"token = {tok}\n\n")
    return "# ~/.databrickscfg\n" + out, toks


@more2("file_format", "ini")
def boto_config_credentials(r: Random) -> Made:
    if r.random() < 0.5:
        key_id, secret = "GOOG1E" + pick(r, UPPER_NUM, 55), pick(r, ALNUM + "+/", 40)
        return (f"# ~/.boto\n[Credentials]\ngs_access_key_id = {key_id}\ngs_secret_access_key = {secret}\n\n"
                "[Boto]\nhttps_validate_certificates = True\n\n[GSUtil]\ndefault_project_id = "
                f"{r.choice(SERVICES)}-{pick(r, '0123456789', 6)}\n"), [secret]
    tok = "1//0" + pick(r, ALNUM + "-_", 99)
    return (f"[Credentials]\ngs_oauth2_refresh_token = {tok}\n\n[OAuth2]\n"
            "client_id = 909320924072.apps.googleusercontent.com\n"), [tok]


@more2("file_format", "ini")
def mysql_my_cnf_client(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    if r.random() < 0.5:
        return (f"# ~/.my.cnf\n[client]\nuser={c['user']}\npassword=\"{pw}\"\nhost={c['host']}\n"
                "default-character-set=utf8mb4\n"), [pw]
    dump = password(r)
    return (f"[mysql]\nuser = {c['user']}\npassword = {pw}\ndatabase = {c['db']}\n\n[mysqldump]\nuser = backup\n"
            f"password = {dump}\nsingle-transaction\n"), [pw, dump]


# --- ciphertext (clean): encrypted material -------------------------------------------------------------


def oneline(text: str) -> str:
    return text.replace("\n", "\\n") + "\\n"


@more2("ciphertext", "ini")
def sops_dotenv_kms_pgp(r: Random) -> Made:
    c = ctx(r)
    account = r.randint(10**11, 10**12 - 1)
    kms_enc = b64(b"\x01\x02\x02\x00\x78" + r.randbytes(r.randint(170, 190)))
    fp = hexs(r, 40).upper()
    pgp = pgp_armor("MESSAGE", pgp_packet(1, b"\x03" + r.randbytes(8) + b"\x01" + r.randbytes(258))
                    + pgp_packet(18, b"\x01" + r.randbytes(80)))
    return (f"DB_PASSWORD={sops_enc(r, 22)}\nSMTP_PASSWORD={sops_enc(r, 18)}\nLOG_LEVEL_unencrypted=info\n"
            f"sops_kms__list_0__map_arn=arn:aws:kms:{c['region']}:{account}:key/{uuid4(r)}\n"
            f"sops_kms__list_0__map_created_at={date(r)}\nsops_kms__list_0__map_enc={kms_enc}\n"
            "sops_kms__list_0__map_aws_profile=\n"
            f"sops_pgp__list_0__map_created_at={date(r)}\nsops_pgp__list_0__map_enc={oneline(pgp)}\n"
            f"sops_pgp__list_0__map_fp={fp}\nsops_lastmodified={date(r)}\nsops_mac={sops_enc(r, 64)}\n"
            "sops_unencrypted_suffix=_unencrypted\nsops_version=3.7.3\n")


@more2("ciphertext", "json")
def sops_json_cloud_kms(r: Random) -> Made:
    c = ctx(r)
    project = f"{c['svc']}-{pick(r, '0123456789', 6)}"
    gcp_enc = b64(b"\x0a\x24\x00" + r.randbytes(35) + b"\x12\x49\x00" + r.randbytes(72))
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{c['svc']}-api", "namespace": c["ns"]},
           "stringData": {"client_secret": sops_enc(r, 40), "webhook_secret": sops_enc(r, 32)},
           "sops": {"kms": None, "gcp_kms": [{"resource_id": f"projects/{project}/locations/global/keyRings/sops/"
                                                             "cryptoKeys/sops-key", "created_at": date(r),
                                              "enc": gcp_enc}],
                    "azure_kv": [{"vault_url": f"https://kv-{c['svc']}.vault.azure.net", "name": "sops-key",
                                  "version": hexs(r, 32), "created_at": date(r), "enc": b64u(r.randbytes(256))}],
                    "hc_vault": None, "age": [{"recipient": age_recipient(r), "enc": age_armor(r, 32) + "\n"}],
                    "lastmodified": date(r), "mac": sops_enc(r, 64), "pgp": None,
                    "encrypted_regex": "^(data|stringData)$", "version": "3.8.1"}}
    return json.dumps(doc, indent=2)


@more2("ciphertext", "bash")
def kubeseal_raw_values(r: Random) -> Made:
    c = ctx(r)
    name = f"{c['svc']}-db"
    one, two = sealed(r, r.randint(14, 28)), sealed(r, r.randint(30, 60))
    return (f"$ echo -n \"$DB_PASSWORD\" | kubeseal --raw --namespace {c['ns']} --name {name} "
            f"--controller-namespace kube-system\n{one}\n\n# pasted into the chart values (values-prod.yaml)\n"
            f"sealedSecrets:\n  {name}:\n    password: {one}\n    api-token: {two}\n")


@more2("ciphertext", "yaml")
def sealedsecret_list_annotated(r: Random) -> Made:
    c = ctx(r)
    items = []
    for suffix, keys, kind in (("registry", (".dockerconfigjson",), "kubernetes.io/dockerconfigjson"),
                               ("tls", ("tls.key",), "kubernetes.io/tls"), ("app", ("token", "password"), "Opaque")):
        data = "".join(f"        {k}: {sealed(r, r.randint(24, 200))}\n" for k in keys)
        items.append(f"  - apiVersion: bitnami.com/v1alpha1\n    kind: SealedSecret\n    metadata:\n"
                     f"      name: {c['svc']}-{suffix}\n      namespace: {c['ns']}\n      annotations:\n"
                     "        sealedsecrets.bitnami.com/namespace-wide: \"true\"\n    spec:\n      encryptedData:\n"
                     f"{data}      template:\n        metadata:\n          labels:\n            app: {c['svc']}\n"
                     f"        type: {kind}\n")
    return "apiVersion: v1\nkind: List\nitems:\n" + "".join(items)


def xxd(data: bytes) -> str:
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        hexpart = " ".join(chunk[i : i + 2].hex() for i in range(0, len(chunk), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}: {hexpart:<39}  {text}")
    return "\n".join(lines)


def hexdump_c(data: bytes) -> str:
    lines = []
    for off in range(0, len(data), 16):
        chunk = data[off : off + 16]
        left, right = " ".join(f"{b:02x}" for b in chunk[:8]), " ".join(f"{b:02x}" for b in chunk[8:])
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{off:08x}  {left:<23}  {right:<23}  |{text}|")
    lines.append(f"{len(data):08x}")
    return "\n".join(lines)


@more2("ciphertext", "text")
def git_crypt_locked_file(r: Random) -> Made:
    c = ctx(r)
    blob = b"\x00GITCRYPT\x00" + r.randbytes(12) + r.randbytes(r.randint(40, 120))
    return (f"$ cat .gitattributes\nsecrets/** filter=git-crypt diff=git-crypt\n*.key filter=git-crypt diff=git-crypt\n"
            f"$ git-crypt status -e\n    encrypted: secrets/{c['svc']}-prod.env\n    encrypted: secrets/tls.key\n"
            f"$ xxd secrets/{c['svc']}-prod.env | head -n 8\n{xxd(blob[:128])}\n")


@more2("ciphertext", "yaml")
def ansible_vault_encrypt_string_output(r: Random) -> Made:
    c = ctx(r)
    var = f"{c['svc']}_db_password"
    body = vault_hex(r).replace("\n", "\n" + " " * 10)
    if r.random() < 0.5:
        return (f"$ ansible-vault encrypt_string --vault-password-file ~/.vault_pass --stdin-name '{var}'\n"
                f"Reading plaintext input from stdin. (ctrl-d to end input, twice if your content does not already "
                f"have a newline)\n{var}: !vault |\n          {body}\nEncryption successful\n")
    return (f"{c['svc']}_users:\n  - name: {c['user']}\n    groups: [wheel]\n    password: !vault |\n"
            f"          {body}\n  - name: {r.choice(PEOPLE)}\n    groups: [users]\n")


@more2("ciphertext", "yaml")
def jasypt_yaml_custom_prefix(r: Random) -> Made:
    c = ctx(r)
    custom = r.random() < 0.5
    pre, post = ("ENC@[", "]") if custom else ("ENC(", ")")

    def enc() -> str:
        return pre + b64(r.randbytes(16) + r.randbytes(16) + r.randbytes(16 * r.randint(1, 3))) + post

    conf = ("  encryptor:\n    password: ${JASYPT_ENCRYPTOR_PASSWORD}\n    algorithm: PBEWITHHMACSHA512ANDAES_256\n"
            "    iv-generator-classname: org.jasypt.iv.RandomIvGenerator\n")
    if custom:
        conf += "    property:\n      prefix: \"ENC@[\"\n      suffix: \"]\"\n"
    return (f"spring:\n  datasource:\n    url: jdbc:postgresql://{c['host']}:5432/{c['db']}\n"
            f"    username: {c['user']}\n    password: {enc()}\n  mail:\n    password: {enc()}\n"
            f"{c['svc']}:\n  partner-api:\n    client-secret: {enc()}\njasypt:\n{conf}")


@more2("ciphertext", "bash")
def aws_kms_encrypt_cli_output(r: Random) -> Made:
    c = ctx(r)
    account, key = r.randint(10**11, 10**12 - 1), uuid4(r)
    blob = b64(b"\x01\x02\x02\x00\x78" + r.randbytes(r.randint(150, 220)))
    out = json.dumps({"CiphertextBlob": blob, "KeyId": f"arn:aws:kms:{c['region']}:{account}:key/{key}",
                      "EncryptionAlgorithm": "SYMMETRIC_DEFAULT"}, indent=4)
    return (f"$ aws kms encrypt --key-id alias/{c['svc']}-config --plaintext fileb://db-password.txt "
            f"--encryption-context service={c['svc']} --output json\n{out}\n")


@more2("ciphertext", "json")
def gcp_kms_encrypt_response(r: Random) -> Made:
    c = ctx(r)
    project = f"{c['svc']}-{pick(r, '0123456789', 6)}"
    size = r.randint(40, 120)
    ct = b64(b"\x0a\x24\x00" + r.randbytes(35) + b"\x12" + bytes([size]) + r.randbytes(size))
    key = f"projects/{project}/locations/{r.choice(('global', 'europe-west1'))}/keyRings/{c['svc']}/cryptoKeys/config"
    doc = {"name": f"{key}/cryptoKeyVersions/{r.randint(1, 4)}", "ciphertext": ct,
           "ciphertextCrc32c": str(r.randrange(2**32)), "verifiedPlaintextCrc32c": True,
           "protectionLevel": r.choice(("SOFTWARE", "HSM"))}
    return (f"// POST https://cloudkms.googleapis.com/v1/{key}:encrypt\n" + json.dumps(doc, indent=2))


@more2("ciphertext", "bash")
def azure_keyvault_encrypt_result(r: Random) -> Made:
    c = ctx(r)
    vault, key, ver = f"kv-{c['svc']}-{r.choice(('prod', 'weu'))}", f"{c['svc']}-wrap", hexs(r, 32)
    kid = f"https://{vault}.vault.azure.net/keys/{key}/{ver}"
    if r.random() < 0.5:
        out = json.dumps({"algorithm": "RSA-OAEP-256", "kid": kid, "result": b64(r.randbytes(256))}, indent=2)
        return (f"$ az keyvault key encrypt --vault-name {vault} --name {key} --algorithm RSA-OAEP-256 "
                f"--data-type base64 --value \"$(base64 -w0 dek.bin)\"\n{out}\n")
    out = json.dumps({"kid": kid, "value": b64u(r.randbytes(512))}, indent=2)
    return f"# POST {kid}/wrapkey?api-version=7.4  ->  200 OK\n{out}\n"


def transit(r: Random) -> str:
    return f"vault:v{r.randint(1, 5)}:{b64(r.randbytes(12 + r.randint(16, 60) + 16))}"


@more2("ciphertext", "hcl")
def vault_transit_terraform(r: Random) -> Made:
    c = ctx(r)
    if r.random() < 0.5:
        return (f"# envs/prod/{c['svc']}.auto.tfvars: ciphertext only, decrypted by the app via transit/decrypt\n"
                f"db_password_ciphertext   = \"{transit(r)}\"\n"
                f"smtp_password_ciphertext = \"{transit(r)}\"\ntransit_key_name         = \"{c['svc']}\"\n")
    out = {f"{c['svc']}_db_password_ct": {"sensitive": False, "type": "string", "value": transit(r)},
           f"{c['svc']}_api_key_ct": {"sensitive": False, "type": "string", "value": transit(r)}}
    return "$ terraform output -json\n" + json.dumps(out, indent=2) + "\n"


@more2("ciphertext", "json")
def jwe_compact_encrypted_field(r: Random) -> Made:
    c = ctx(r)

    def jwe() -> str:
        if r.random() < 0.5:
            head = {"alg": "RSA-OAEP-256", "enc": "A256GCM", "kid": f"{c['svc']}-pii-{r.randint(1, 9)}"}
            ek = b64u(r.randbytes(256))
        else:
            head = {"alg": "dir", "enc": "A256GCM", "kid": hexs(r, 16)}
            ek = ""
        return (f"{b64u(json.dumps(head, separators=(',', ':')))}.{ek}.{b64u(r.randbytes(12))}."
                f"{b64u(r.randbytes(r.randint(12, 60)))}.{b64u(r.randbytes(16))}")

    doc = {"customer_id": uuid4(r), "country": r.choice(("DE", "NL", "IE", "FR")), "created_at": date(r),
           "tax_id": jwe(), "iban": jwe(), "encryption": {"scheme": "JWE compact", "keyset": f"{c['svc']}-pii"}}
    return json.dumps(doc, indent=2)


def fernet(r: Random) -> str:
    """A Fernet token: version 0x80, timestamp, IV, AES-CBC blocks, HMAC; base64url with padding."""
    raw = b64u(b"\x80" + struct.pack(">Q", 1_690_000_000 + r.randrange(60_000_000)) + r.randbytes(16)
               + r.randbytes(16 * r.randint(1, 4)) + r.randbytes(32))
    return raw + "=" * (-len(raw) % 4)


@more2("ciphertext", "text")
def fernet_airflow_connections(r: Random) -> Made:
    rows = []
    for conn in r.sample(("postgres_dwh", "s3_exports", "slack_alerts", "sftp_partner", "snowflake_default"), 3):
        rows.append(f" {conn:<17} | {fernet(r)} | t")
    return ("airflow=> SELECT conn_id, password, is_encrypted FROM connection ORDER BY conn_id;\n"
            "      conn_id      | password | is_encrypted\n-------------------+----------+--------------\n"
            + "\n".join(rows) + "\n(3 rows)\n\n-- encrypted with the key in AIRFLOW__CORE__FERNET_KEY (set from the "
            "secret store, not here)\n")


def bw_cipher(r: Random, size: int) -> str:
    return f"2.{b64(r.randbytes(16))}|{b64(r.randbytes(16 * (size // 16 + 1)))}|{b64(r.randbytes(32))}"


@more2("ciphertext", "json")
def bitwarden_encrypted_export(r: Random) -> Made:
    if r.random() < 0.4:
        doc: dict[str, object] = {"encrypted": True, "passwordProtected": True, "salt": b64(r.randbytes(16)),
                                  "kdfType": 0, "kdfIterations": 600000, "kdfMemory": None, "kdfParallelism": None,
                                  "encKeyValidation_DO_NOT_EDIT": bw_cipher(r, 36),
                                  "data": bw_cipher(r, r.randint(400, 900))}
        return json.dumps(doc, indent=2)
    folder = uuid4(r)
    items = [{"id": uuid4(r), "organizationId": None, "folderId": folder, "type": 1, "reprompt": 0,
              "name": bw_cipher(r, 12), "notes": None, "favorite": False,
              "login": {"fido2Credentials": [], "uris": [{"match": None, "uri": bw_cipher(r, 40)}],
                        "username": bw_cipher(r, 14), "password": bw_cipher(r, 24), "totp": None},
              "collectionIds": None, "revisionDate": date(r)} for _ in range(r.randint(1, 2))]
    doc = {"encrypted": True, "encKeyValidation_DO_NOT_EDIT": bw_cipher(r, 36),
           "folders": [{"id": folder, "name": bw_cipher(r, 8)}], "items": items}
    return json.dumps(doc, indent=2)


@more2("ciphertext", "json")
def chef_encrypted_data_bag_item(r: Random) -> Made:
    c = ctx(r)

    def field(size: int) -> dict[str, object]:
        return {"encrypted_data": wrap(b64(r.randbytes(size + 16)), 60) + "\n", "iv": b64(r.randbytes(12)) + "\n",
                "auth_tag": b64(r.randbytes(16)) + "\n", "version": 3, "cipher": "aes-256-gcm"}

    doc = {"id": c["svc"], "db_password": field(r.randint(20, 40)), "api_token": field(r.randint(40, 70))}
    return (f"$ knife data bag show secrets {c['svc']} -F json  # without --secret-file\n"
            + json.dumps(doc, indent=2))


@more2("ciphertext", "text")
def rails_credentials_enc(r: Random) -> Made:
    env = r.choice(("production", "staging"))
    body = f"{b64(r.randbytes(r.randint(180, 520)))}--{b64(r.randbytes(12))}--{b64(r.randbytes(16))}"
    return (f"$ cat .gitignore | grep key\n/config/credentials/{env}.key\n"
            f"$ cat config/credentials/{env}.yml.enc\n{body}\n"
            f"$ bin/rails credentials:edit --environment {env}   # needs RAILS_MASTER_KEY or the key file\n")


@more2("ciphertext", "text")
def etcd_encrypted_secret_hexdump(r: Random) -> Made:
    c = ctx(r)
    path = f"/registry/secrets/{c['ns']}/{c['svc']}-db"
    provider = r.choice(("k8s:enc:aescbc:v1:key1:", "k8s:enc:aesgcm:v1:key2:", "k8s:enc:secretbox:v1:key1:"))
    data = path.encode() + b"\n" + provider.encode() + r.randbytes(r.randint(90, 160)) + b"\n"
    return (f"$ ETCDCTL_API=3 etcdctl --cacert=/etc/kubernetes/pki/etcd/ca.crt \\\n"
            "    --cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key \\\n"
            f"    get {path} | hexdump -C\n{hexdump_c(data)}\n")


@more2("ciphertext", "text")
def vault_init_pgp_unseal_keys(r: Random) -> Made:
    def share() -> str:
        pkesk = b"\x03" + r.randbytes(8) + b"\x01" + struct.pack(">H", 4096) + r.randbytes(512)
        return b64(pgp_packet(1, pkesk) + pgp_packet(18, b"\x01" + r.randbytes(r.randint(70, 90))))

    who = r.sample(PEOPLE, 3)
    keys = "\n".join(f"Unseal Key {i + 1}: {share()}" for i in range(3))
    return (f"$ vault operator init -key-shares=3 -key-threshold=2 \\\n"
            f"    -pgp-keys=\"keybase:{who[0]},keybase:{who[1]},keybase:{who[2]}\" \\\n"
            f"    -root-token-pgp-key=\"keybase:{who[0]}\"\n{keys}\n\nInitial Root Token: {share()}\n\n"
            "Vault initialized with 3 key shares and a key threshold of 2. The unseal keys and the root token are\n"
            "encrypted to the PGP keys given; each holder decrypts their own with `base64 -d | keybase pgp decrypt`.\n")


# --- documented_example (clean): vendor-documented and RFC example credentials ----------------------------

AWS_STS_DOCS = ("ASIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY",
                "AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLWsKWHGBuFqwAeMicRXmxfpSPfIeoIY"
                "RqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDv"
                "p75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOL"
                "n9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==")
SLACK_DOCS = ("xoxb-17653672481-19874698323-pdFZKVeTuE8sk7oOcBrzbqgy", "8f742231b10e8888abcd99yyyzzz85a5",
              "xyzz0WbapA4vBCDEFasx0q6G")
SLACK_BODY = ("token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
              "&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
              "&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRsk"
              "XaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
RFC7519_JWT = ("eyJ0eXAiOiJKV1QiLA0KICJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9le"
               "GFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
RFC7519_UNSECURED = ("eyJhbGciOiJub25lIn0.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9p"
                     "c19yb290Ijp0cnVlfQ.")
RFC6750 = ("mF_9.B5f-4.1JqM", "tGzv3JOkF0XG5Qx2TlKWIA")
RFC8693_JWT_LINES = ("eyJhbGciOiJFUzI1NiIsImtpZCI6IjllciJ9.eyJhdWQiOiJo",
                     "dHRwczovL2JhY2tlbmQuZXhhbXBsZS5jb20iLCJpc3MiOiJodHRwczovL2FzLmV",
                     "4YW1wbGUuY29tIiwiZXhwIjoxNDQxOTE3NTkzLCJpYXQiOjE0NDE5MTc1MzMsIn",
                     "N1YiI6ImJkY0BleGFtcGxlLmNvbSIsInNjb3BlIjoiYXBpIn0.40y3ZgQedw6rx",
                     "f59WlwHDD9jryFOr0_Wh3CGozQBihNBhnXEQgU85AI9x3KmsPottVMLPIWvmDCM", "y5-kdXjwhw")
RFC8693 = ("accVkjcJyb4BWCxGsndESCJQbdFMogUC5PbRDqceLTC", "cnMwODpsb25nLXNlY3VyZS1yYW5kb20tc2VjcmV0",
           "long-secure-random-secret", "".join(RFC8693_JWT_LINES))
DIGEST_DOCS = ("Circle of Life", "Circle Of Life")
OIDC_CORE = ("SlAV32hkKG", "8xLOxBtZp8", "czZCaGRSa3F0MzpnWDFmQmF0M2JW", "SplxlOBeZQQYbYS6WxSbIA")
SIGV4_DOCS = ("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "AKIDEXAMPLE")
DOCUMENTED: tuple[str, ...] = (*AWS_STS_DOCS, "AKIAIOSFODNN7EXAMPLE", *SLACK_DOCS, RFC7519_JWT, RFC7519_UNSECURED,
                               *RFC6750, *RFC8693, *DIGEST_DOCS, *OIDC_CORE, *SIGV4_DOCS)


@more2("documented_example", "xml")
def aws_sts_docs_assume_role_xml(r: Random) -> Made:
    key, secret, token = AWS_STS_DOCS
    folded = "\n".join("     " + token[i : i + 67] for i in range(0, len(token), 67))
    who = "John"
    return (f"<!-- AssumeRole sample response, AWS STS API Reference{r.choice(('', ' (query API)'))} -->\n"
            "<AssumeRoleResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\n<AssumeRoleResult>\n"
            "<SourceIdentity>DevUser123</SourceIdentity>\n  <AssumedRoleUser>\n"
            f"    <Arn>arn:aws:sts::123456789012:assumed-role/demo/{who}</Arn>\n"
            f"    <AssumedRoleId>ARO123EXAMPLE123:{who}</AssumedRoleId>\n  </AssumedRoleUser>\n"
            f"  <Credentials>\n    <AccessKeyId>{key}</AccessKeyId>\n"
            f"    <SecretAccessKey>{secret}</SecretAccessKey>\n    <SessionToken>\n{folded}\n    </SessionToken>\n"
            "    <Expiration>2019-11-09T13:34:41Z</Expiration>\n  </Credentials>\n"
            "  <PackedPolicySize>6</PackedPolicySize>\n</AssumeRoleResult>\n<ResponseMetadata>\n"
            "  <RequestId>c6104cbe-af31-11e0-8154-cbc7ccf896c7</RequestId>\n</ResponseMetadata>\n"
            "</AssumeRoleResponse>\n")


@more2("documented_example", "json")
def aws_sdk_docs_assume_role_json(r: Random) -> Made:
    _, secret, token = AWS_STS_DOCS
    doc = {"AssumedRoleUser": {"Arn": "arn:aws:sts::123456789012:assumed-role/demo/Bob",
                               "AssumedRoleId": "ARO123EXAMPLE123:Bob"},
           "Credentials": {"AccessKeyId": "AKIAIOSFODNN7EXAMPLE", "Expiration": "2011-07-15T23:28:33.359Z",
                           "SecretAccessKey": secret, "SessionToken": token}, "PackedPolicySize": 8}
    if r.random() < 0.5:
        return json.dumps(doc, indent=4)
    return json.dumps({"description": "To assume a role (example output from the AWS SDK documentation)",
                       "output": doc}, indent=2)


@more2("documented_example", "python")
def slack_docs_oauth_and_signing(r: Random) -> Made:
    bot, secret, _ = SLACK_DOCS
    if r.random() < 0.5:
        doc = {"ok": True, "access_token": bot, "token_type": "bot", "scope": "commands,incoming-webhook",
               "bot_user_id": "U0KRQLJ9H", "app_id": "A0KRD7HC3",
               "team": {"name": "Slack Softball Team", "id": "T9TK3CUKW"},
               "enterprise": {"name": "slack-sports", "id": "E12345678"},
               "authed_user": {"id": "U1234", "scope": "chat:write", "token_type": "user"}}
        return ("# oauth.v2.access example response from the Slack API docs\nEXAMPLE = "
                + json.dumps(doc, indent=4) + "\n")
    ts = "1531420618"
    sig = hmac.new(secret.encode(), f"v0:{ts}:{SLACK_BODY}".encode(), hashlib.sha256).hexdigest()
    body = "\n".join(f'    "{SLACK_BODY[i : i + 90]}"' for i in range(0, len(SLACK_BODY), 90))
    return ("# The worked example from Slack's \"Verifying requests from Slack\" guide\n"
            f"slack_signing_secret = \"{secret}\"\ntimestamp = \"{ts}\"\nrequest_body = (\n{body}\n)\n"
            f"expected = \"v0={sig}\"\n"
            "basestring = f\"v0:{timestamp}:{request_body}\".encode()\n"
            "assert \"v0=\" + hmac.new(slack_signing_secret.encode(), basestring, sha256).hexdigest() == expected\n")


@more2("documented_example", "text")
def rfc7519_jwt_examples(r: Random) -> Made:
    if r.random() < 0.5:
        return ("RFC 7519, section 3.1: the example JWT (HMAC SHA-256, claims iss=joe, exp=1300819380,\n"
                "http://example.com/is_root=true). Lines broken for display only:\n\n"
                + "\n".join(RFC7519_JWT[i : i + 64] for i in range(0, len(RFC7519_JWT), 64)) + "\n\n"
                "Section 6.1, the same claims as an Unsecured JWT (alg none, empty signature):\n\n"
                f"{RFC7519_UNSECURED}\n")
    return ("### Smoke test: the mock server accepts the RFC 7519 section 3.1 example token\n"
            f"GET /resource HTTP/1.1\nHost: server.example.com\nAuthorization: Bearer {RFC7519_JWT}\n")


@more2("documented_example", "http")
def rfc6750_bearer_examples(r: Random) -> Made:
    tok, refresh = RFC6750
    kind = r.randrange(3)
    if kind == 0:
        return (f"# RFC 6750 section 2.1\nGET /resource HTTP/1.1\nHost: server.example.com\n"
                f"Authorization: Bearer {tok}\n\n# section 2.3 (not recommended)\n"
                f"GET /resource?access_token={tok} HTTP/1.1\nHost: server.example.com\n")
    if kind == 1:
        return ("# RFC 6750 section 2.2, form-encoded body parameter\nPOST /resource HTTP/1.1\n"
                "Host: server.example.com\n"
                f"Content-Type: application/x-www-form-urlencoded\n\naccess_token={tok}\n\n"
                "HTTP/1.1 401 Unauthorized\nWWW-Authenticate: Bearer realm=\"example\",\n"
                "                  error=\"invalid_token\",\n"
                "                  error_description=\"The access token expired\"\n")
    return ("# RFC 6750 section 4, example access token response\nHTTP/1.1 200 OK\n"
            "Content-Type: application/json;charset=UTF-8\nCache-Control: no-store\nPragma: no-cache\n\n"
            f'{{\n  "access_token":"{tok}",\n  "token_type":"Bearer",\n  "expires_in":3600,\n'
            f'  "refresh_token":"{refresh}"\n}}\n')


@more2("documented_example", "http")
def rfc8693_token_exchange(r: Random) -> Made:
    subject, basic = RFC8693[0], RFC8693[1]
    request = ("POST /as/token.oauth2 HTTP/1.1\nHost: as.example.com\n"
               f"Authorization: Basic {basic}\nContent-Type: application/x-www-form-urlencoded\n\n"
               "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Atoken-exchange\n"
               "&resource=https%3A%2F%2Fbackend.example.com%2Fapi\n"
               f"&subject_token={subject}\n"
               "&subject_token_type=urn%3Aietf%3Aparams%3Aoauth%3Atoken-type%3Aaccess_token\n")
    if r.random() < 0.5:
        return "# RFC 8693 section 2.3, example token exchange request\n" + request
    jwt = "\n    ".join(RFC8693_JWT_LINES)
    return ("# RFC 8693 section 2.3, the response to that request\nHTTP/1.1 200 OK\nContent-Type: application/json\n"
            "Cache-Control: no-cache, no-store\n\n"
            f'{{\n  "access_token":"{jwt}",\n  "issued_token_type":\n'
            '      "urn:ietf:params:oauth:token-type:access_token",\n  "token_type":"Bearer",\n  "expires_in":60\n}\n')


@more2("documented_example", "http")
def rfc7616_digest_example(r: Random) -> Made:
    if r.random() < 0.6:
        realm, nonce = "http-auth@example.org", "7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v"
        cnonce, opaque = "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ", "FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"
        alg = r.choice(("MD5", "SHA-256"))
        h = hashlib.md5 if alg == "MD5" else hashlib.sha256
        pw, src = DIGEST_DOCS[0], "RFC 7616 section 3.9.1"
    else:
        realm, nonce, cnonce, opaque = ("testrealm@host.com", "dcd98b7102dd2f0e8b11d0f600bfb0c093", "0a4f113b",
                                        "5ccc069c403ebaf9f0171e9517f40e41")
        alg, h, pw, src = "MD5", hashlib.md5, DIGEST_DOCS[1], "RFC 2617 section 3.5"
    ha1 = h(f"Mufasa:{realm}:{pw}".encode()).hexdigest()
    ha2 = h(b"GET:/dir/index.html").hexdigest()
    resp = h(f"{ha1}:{nonce}:00000001:{cnonce}:auth:{ha2}".encode()).hexdigest()
    return (f"# {src}: user \"Mufasa\", password \"{pw}\"\nGET /dir/index.html HTTP/1.1\n"
            f"Authorization: Digest username=\"Mufasa\",\n    realm=\"{realm}\",\n    uri=\"/dir/index.html\",\n"
            + (f"    algorithm={alg},\n" if src.startswith("RFC 7616") else "")
            + f"    nonce=\"{nonce}\",\n    nc=00000001,\n    cnonce=\"{cnonce}\",\n    qop=auth,\n"
            f"    response=\"{resp}\",\n    opaque=\"{opaque}\"\n")


@more2("documented_example", "http")
def oidc_core_token_response(r: Random) -> Made:
    access, refresh, basic, code = OIDC_CORE
    if r.random() < 0.5:
        return ("# OpenID Connect Core 1.0, section 3.1.3.1 / 3.1.3.3\nPOST /token HTTP/1.1\n"
                "Host: server.example.com\nContent-Type: application/x-www-form-urlencoded\n"
                f"Authorization: Basic {basic}\n\n"
                f"grant_type=authorization_code&code={code}\n  &redirect_uri=https%3A%2F%2Fclient.example.org%2Fcb\n\n"
                "HTTP/1.1 200 OK\nContent-Type: application/json\nCache-Control: no-store\n\n"
                f'{{\n "access_token": "{access}",\n "token_type": "Bearer",\n "refresh_token": "{refresh}",\n'
                ' "expires_in": 3600,\n "id_token": "eyJhbGciOiJSUzI1NiIsImtpZCI6IjFlOWdkazcifQ.ewogImlzc..."\n}\n')
    return (f"# OpenID Connect Core 1.0, section 5.3.1: UserInfo request\nGET /userinfo HTTP/1.1\n"
            f"Host: server.example.com\nAuthorization: Bearer {access}\n")


@more2("documented_example", "python")
def aws_sigv4_docs_signing_key(r: Random) -> Made:
    secret, akid = SIGV4_DOCS

    def sign(key: bytes, msg: str) -> bytes:
        return hmac.new(key, msg.encode(), hashlib.sha256).digest()

    if r.random() < 0.5:
        k_date = sign(("AWS4" + secret).encode(), "20120215")
        k_region = sign(k_date, "us-east-1")
        k_service = sign(k_region, "iam")
        k_signing = sign(k_service, "aws4_request")
        return ("# \"Examples of how to derive a signing key for Signature Version 4\" (AWS General Reference)\n"
                f"key = '{secret}'\ndateStamp = '20120215'\nregionName = 'us-east-1'\nserviceName = 'iam'\n\n"
                f"# kDate    = '{k_date.hex()}'\n# kRegion  = '{k_region.hex()}'\n"
                f"# kService = '{k_service.hex()}'\n# kSigning = '{k_signing.hex()}'\n")
    empty = hashlib.sha256(b"").hexdigest()
    creq = f"GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\nhost;x-amz-date\n{empty}"
    sts = ("AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n"
           + hashlib.sha256(creq.encode()).hexdigest())
    key = ("AWS4" + secret).encode()
    for part in ("20150830", "us-east-1", "service", "aws4_request"):
        key = sign(key, part)
    sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
    return ("# AWS SigV4 test suite, get-vanilla (with the suite's example credentials)\n"
            f"ACCESS_KEY_ID = \"{akid}\"\nSECRET_ACCESS_KEY = \"{secret}\"\nEXPECTED_AUTHORIZATION = (\n"
            f"    \"AWS4-HMAC-SHA256 Credential={akid}/20150830/us-east-1/service/aws4_request, \"\n"
            f"    \"SignedHeaders=host;x-amz-date, Signature={sig}\"\n)\n")


@more2("documented_example", None)
def prose_token_anatomy_table(r: Random) -> Made:
    if r.random() < 0.5:
        rows = r.sample((("GitLab personal access token", "`glpat-` + 20 characters of `[0-9A-Za-z_-]`"),
                         ("npm access token", "`npm_` + 36 base62 characters, the last six a CRC32 checksum"),
                         ("PyPI API token", "`pypi-` + a base64url macaroon, usually 150+ characters"),
                         ("Google API key", "`AIza` + 35 characters of `[0-9A-Za-z_-]`"),
                         ("SendGrid API key", "`SG.` + 22 characters + `.` + 43 characters"),
                         ("HashiCorp Vault service token", "`hvs.` + about 90 base62 characters"),
                         ("Databricks personal access token", "`dapi` + 32 hex characters"),
                         ("age identity", "`AGE-SECRET-KEY-1` + 58 upper-case bech32 characters"),
                         ("Shopify admin token", "`shpat_` + 32 hex characters")), 5)
        body = "".join(f"| {name} | {what} | yes |\n" for name, what in rows)
        return ("Secret scanning in CI recognises these formats by prefix and length; if a match shows up in a log, "
                "treat it as leaked, revoke it, then investigate.\n\n| Credential | Shape | Revoke on sight |\n"
                f"|---|---|---|\n{body}")
    return ("The gitleaks rules we added for the internal formats look like this (a rule describes the shape, it "
            "holds no token):\n\n```toml\n[[rules]]\nid = \"gitlab-pat\"\ndescription = \"GitLab Personal Access "
            "Token\"\nregex = '''glpat-[0-9a-zA-Z\\-_]{20}'''\nkeywords = [\"glpat-\"]\n\n[[rules]]\n"
            "id = \"databricks-token\"\ndescription = \"Databricks API token\"\n"
            "regex = '''dapi[a-h0-9]{32}(?:-\\d)?'''\nkeywords = [\"dapi\"]\n```\n")
