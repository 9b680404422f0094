"""Secret snippet shapes for scripts/build_secrets.py: the families ``encoded``, ``file_format`` and ``placed``.

A shape's name is its function's name with "-" for "_". It takes one `random.Random` and returns
``(snippet, needles)``: the needles are the credential as it is written in the snippet (base64'd, URL-encoded,
split into literals, or plain), so the builder can check that the document really holds it. Values come from
`secret_formats`; the clean families are in `secret_shapes_clean`.
"""

from __future__ import annotations

import json
from random import Random

from secret_formats import (
    ALNUM,
    PEOPLE,
    SERVICES,
    Made,
    api_token,
    aws_pair,
    b64,
    bare_token,
    bare_value,
    bech32,
    chat,
    checksummed,
    ctx,
    date,
    hexs,
    jwt_like,
    k8s_secret,
    openssh_private,
    password,
    pem,
    pick,
    putty_key,
    pypi_token,
    rsa_pkcs8,
    secret_value,
    shape,
    split,
    url_quote,
    user,
    x25519_keys,
)

# --- encoded: one layer of encoding around the credential ---------------------------------------------


@shape("encoded", "yaml")
def k8s_secret_data_b64_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    enc = b64(pw + ("\n" if r.random() < 0.25 else ""))  # `echo` without -n leaves the newline in
    data = f"  username: {b64(str(c['user']))}\n  password: {enc}\n  host: {b64(str(c['host']))}\n"
    return k8s_secret(c, data), [enc]


@shape("encoded", "yaml")
def k8s_secret_data_b64_token(r: Random) -> Made:
    c, enc = ctx(r), b64(api_token(r))
    key = r.choice(("api-token", "GITHUB_TOKEN", "slack-bot-token", "token", "webhook-token"))
    return k8s_secret(c, f"  {key}: {enc}\n"), [enc]


@shape("encoded", "yaml")
def k8s_secret_data_b64_credfile(r: Random) -> Made:
    key_id, secret = aws_pair(r)
    enc = b64(f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n")
    return k8s_secret(ctx(r), f"  cloud: {enc}\n"), [enc]


@shape("encoded", "yaml")
def k8s_secret_data_b64_ssh_key(r: Random) -> Made:
    c = ctx(r)
    enc = b64(openssh_private(r, f"{c['user']}@{c['host']}", rsa=r.random() < 0.3) + "\n")
    return k8s_secret(c, f"  ssh-privatekey: {enc}\n", "kubernetes.io/ssh-auth"), [enc]


@shape("encoded", "json")
def k8s_secret_json_data_b64(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    doc = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{c['svc']}-db", "namespace": c["ns"]},
           "type": "Opaque", "data": {"DB_USER": b64(str(c["user"])), "DB_PASSWORD": b64(pw)}}
    return json.dumps(doc, indent=4), [b64(pw)]


def docker_auths(r: Random) -> tuple[str, str]:
    registry = r.choice(("registry.gitlab.com", "ghcr.io", "harbor.corp.internal", "index.docker.io/v1/"))
    auth = b64(f"{user(r)}:{secret_value(r)}")
    return json.dumps({"auths": {registry: {"auth": auth}}}), auth


@shape("encoded", "yaml")
def dockerconfigjson_whole(r: Random) -> Made:
    enc = b64(docker_auths(r)[0])
    return k8s_secret(ctx(r), f"  .dockerconfigjson: {enc}\n", "kubernetes.io/dockerconfigjson"), [enc]


@shape("encoded", "json")
def dockerconfigjson_auth(r: Random) -> Made:
    text, auth = docker_auths(r)
    doc = json.loads(text) | {"HttpHeaders": {"User-Agent": "Docker-Client/24.0.7 (linux)"}}
    return json.dumps(doc, indent=2), [auth]


@shape("encoded", "ini")
def npmrc_auth_b64(r: Random) -> Made:
    c, enc = ctx(r), b64(f"{user(r)}:{password(r)}")
    return (f"registry=https://nexus.{str(c['host']).split('.', 1)[1]}/repository/npm-group/\n_auth={enc}\n"
            f"always-auth=true\nemail={c['user']}@example.org\n"), [enc]


@shape("encoded", "bash")
def http_basic_auth_header(r: Random) -> Made:
    c, enc = ctx(r), b64(f"{user(r)}:{password(r)}")
    return f'curl -sS -H "Authorization: Basic {enc}" \\\n  https://{c["host"]}/api/v2/exports?limit=50\n', [enc]


@shape("encoded", "yaml")
def b64_blob_aws_credentials(r: Random) -> Made:
    key_id, secret = aws_pair(r)
    enc = b64(f"[default]\naws_access_key_id={key_id}\naws_secret_access_key={secret}\nregion={ctx(r)['region']}\n")
    return (f"- name: Configure AWS\n  run: |\n    mkdir -p ~/.aws\n"
            f"    echo \"{enc}\" | base64 -d > ~/.aws/credentials\n"
            "- name: Deploy\n  run: make deploy\n"), [enc]


@shape("encoded", "bash")
def b64_blob_dotenv(r: Random) -> Made:
    c = ctx(r)
    env = f"DB_HOST={c['host']}\nDB_USER={c['user']}\nDB_PASSWORD={password(r)}\nAPI_TOKEN={api_token(r)}\n"
    enc = b64(env)
    return (f"# restore the env file on the runner\nexport ENV_FILE_B64='{enc}'\n"
            'echo "$ENV_FILE_B64" | base64 --decode > .env\n'), [enc]


@shape("encoded", "dockerfile")
def b64_blob_pgpass(r: Random) -> Made:
    c = ctx(r)
    enc = b64(f"{c['host']}:5432:{c['db']}:{c['user']}:{password(r)}\n")
    return (f"FROM postgres:16\nRUN echo \"{enc}\" | base64 -d > /root/.pgpass \\\n    && chmod 600 /root/.pgpass\n"
            "COPY migrate.sh /usr/local/bin/\n"), [enc]


@shape("encoded", "text")
def urlencoded_form_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    nested = url_quote(f"/api/session?user={c['user']}&password={pw}&remember=1")
    return (f'10.4.{r.randint(0, 255)}.{r.randint(1, 254)} - - [{date(r)}] "GET /sso/return?next={nested} HTTP/1.1" '
            f'302 0 "-" "Mozilla/5.0"\n'), [url_quote(pw)]


@shape("encoded", "yaml")
def urlencoded_connection_string(r: Random) -> Made:
    c = ctx(r)
    url = url_quote(f"postgresql://{c['user']}:{password(r)}@{c['host']}:5432/{c['db']}?sslmode=require")
    return (f"env:\n  - name: DATABASE_URL_ENCODED\n    value: \"{url}\"\n"
            f"  - name: POOL_SIZE\n    value: \"{c['n']}\"\n"), [url]


@shape("encoded", "json")
def json_escaped_json_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    inner = json.dumps({"username": c["user"], "password": pw, "engine": "postgres", "host": c["host"], "port": 5432})
    account = r.randint(10**11, 10**12 - 1)
    doc = {"ARN": f"arn:aws:secretsmanager:{c['region']}:{account}:secret:{c['svc']}/db-{pick(r, ALNUM, 6)}",
           "Name": f"{c['svc']}/db", "VersionId": "-".join(hexs(r, n) for n in (8, 4, 4, 4, 12)), "SecretString": inner}
    return json.dumps(doc, indent=4), [pw]


@shape("encoded", "yaml")
def yaml_block_scalar_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    return (f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {c['svc']}-config\ndata:\n"
            "  application.properties: |\n"
            f"    spring.datasource.url=jdbc:postgresql://{c['host']}:5432/{c['db']}\n"
            f"    spring.datasource.username={c['user']}\n    spring.datasource.password={pw}\n"
            "    spring.jpa.open-in-view=false\n"), [pw]


# --- file_format: credential file formats -------------------------------------------------------------


@shape("file_format", "text")
def netrc_multiline(r: Random) -> Made:
    pws = [secret_value(r) for _ in range(r.randint(1, 3))]
    return "\n".join(f"machine {ctx(r)['host']}\n  login {user(r)}\n  password {pw}\n" for pw in pws), pws


@shape("file_format", "text")
def netrc_oneline(r: Random) -> Made:
    pw = secret_value(r)
    return f"machine {ctx(r)['host']} login {user(r)} password {pw}\n", [pw]


@shape("file_format", "ini")
def npmrc_authtoken(r: Random) -> Made:
    tok = r.choice((checksummed(r, "npm_"), checksummed(r, "ghp_"), "glpat-" + pick(r, ALNUM, 20)))
    scope = r.choice(("//registry.npmjs.org/", "//npm.pkg.github.com/", "//gitlab.corp.internal/api/v4/packages/npm/"))
    return f"@acme:registry=https:{scope}\n{scope}:_authToken={tok}\n", [tok]


@shape("file_format", "ini")
def pypirc_password(r: Random) -> Made:
    tok, pw = pypi_token(r), password(r)
    return ("[distutils]\nindex-servers =\n    pypi\n    internal\n\n[pypi]\nusername = __token__\n"
            f"password = {tok}\n\n[internal]\nrepository = https://{ctx(r)['host']}/simple/\nusername = {user(r)}\n"
            f"password = {pw}\n"), [tok, pw]


@shape("file_format", "text")
def pgpass_lines(r: Random) -> Made:
    rows = [(ctx(r), password(r)) for _ in range(r.randint(1, 3))]
    text = "".join(f"{c['host']}:5432:{c['db']}:{c['user']}:{pw}\n" for c, pw in rows)
    return text, [pw for _, pw in rows]


@shape("file_format", "text")
def git_credentials_url(r: Random) -> Made:
    gh, gl = checksummed(r, "ghp_"), "glpat-" + pick(r, ALNUM + "_-", 20)
    return f"https://{user(r)}:{gh}@github.com\nhttps://oauth2:{gl}@gitlab.corp.internal\n", [gh, gl]


@shape("file_format", "json")
def docker_config_identitytoken(r: Random) -> Made:
    reg = f"{pick(r, 'abcdefghijklmnopqrstuvwxyz', 8)}.azurecr.io"
    tok = jwt_like(r, {"jti": hexs(r, 32), "sub": f"{user(r)}@northwind-data.net", "nbf": 1_700_000_000,
                       "exp": 1_701_000_000, "iss": "Azure Container Registry", "aud": reg, "version": "1.0",
                       "grant_type": "refresh_token"})
    return json.dumps({"auths": {reg: {"auth": "", "identitytoken": tok}}}, indent=2), [tok]


@shape("file_format", "yaml")
def kubeconfig_user_token(r: Random) -> Made:
    c = ctx(r)
    tok = jwt_like(r, {"iss": "kubernetes/serviceaccount", "kubernetes.io/serviceaccount/namespace": c["ns"],
                       "kubernetes.io/serviceaccount/service-account.name": f"{c['svc']}-deployer"})
    return (f"apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://{c['host']}:6443\n  name: prod\n"
            f"users:\n- name: {c['svc']}-deployer\n  user:\n    token: {tok}\ncurrent-context: prod\n"), [tok]


@shape("file_format", "ini")
def aws_credentials_file(r: Random) -> Made:
    (k1, s1), (k2, s2) = aws_pair(r), aws_pair(r)
    return (f"[default]\naws_access_key_id = {k1}\naws_secret_access_key = {s1}\n\n[{ctx(r)['svc']}-prod]\n"
            f"aws_access_key_id = {k2}\naws_secret_access_key = {s2}\nregion = us-east-1\n"), [k1, s1, k2, s2]


@shape("file_format", "text")
def putty_ppk_v2_ed25519(r: Random) -> Made:
    text, lines = putty_key(r, 2, False, f"ed25519-key-{date(r)[:10].replace('-', '')}")
    return text, [lines]


@shape("file_format", "text")
def putty_ppk_v3_ed25519(r: Random) -> Made:
    text, lines = putty_key(r, 3, False, f"{user(r)}@laptop")
    return text, [lines]


@shape("file_format", "text")
def putty_ppk_v3_rsa(r: Random) -> Made:
    text, lines = putty_key(r, 3, True, f"rsa-key-{date(r)[:10].replace('-', '')}")
    return text, [lines]


@shape("file_format", "text")
def age_secret_key_file(r: Random) -> Made:
    sk, pk = x25519_keys(r)
    key = bech32("age-secret-key-", sk).upper()
    return f"# created: {date(r)[:-1]}+00:00\n# public key: {bech32('age', pk)}\n{key}\n", [key]


@shape("file_format", "ini")
def wireguard_interface_config(r: Random) -> Made:
    sk = b64(x25519_keys(r)[0])
    peer = b64(x25519_keys(r)[1])
    return (f"[Interface]\nAddress = 10.{r.randint(0, 255)}.0.1/24\nListenPort = 51820\nPrivateKey = {sk}\n\n[Peer]\n"
            f"PublicKey = {peer}\nAllowedIPs = 10.{r.randint(0, 255)}.0.0/16\n"
            f"Endpoint = {ctx(r)['host']}:51820\n"), [sk]


@shape("file_format", "text")
def openssh_private_key_ed25519(r: Random) -> Made:
    key = openssh_private(r, f"{user(r)}@build-{r.randint(1, 40)}")
    return key, [key.splitlines()[1]]


@shape("file_format", "text")
def openssh_private_key_rsa(r: Random) -> Made:
    key = openssh_private(r, f"{user(r)}@bastion", rsa=True)
    return key, [key.splitlines()[3]]


@shape("file_format", "bash")
def azure_sas_token_url(r: Random) -> Made:
    sig = url_quote(b64(r.randbytes(32)))
    acct = pick(r, "abcdefghijklmnopqrstuvwxyz", 10)
    return (f"azcopy copy ./backup.tar.gz \"https://{acct}.blob.core.windows.net/backups/backup.tar.gz?sv=2022-11-02&ss=b"
            f"&srt=co&sp=rwdlac&se=2025-{r.randint(1, 12):02d}-01T00:00:00Z&st=2024-01-01T00:00:00Z&spr=https"
            f"&sig={sig}\"\n"), [sig]


@shape("file_format", "ini")
def azure_storage_connection_string(r: Random) -> Made:
    key = b64(r.randbytes(64))
    acct = pick(r, "abcdefghijklmnopqrstuvwxyz0123456789", 14)
    return (f"AZURE_STORAGE_CONNECTION_STRING=DefaultEndpointsProtocol=https;AccountName={acct};AccountKey={key};"
            "EndpointSuffix=core.windows.net\n"), [key]


@shape("file_format", "json")
def gcp_service_account_json(r: Random) -> Made:
    c = ctx(r)
    project = f"{c['svc']}-{pick(r, '0123456789', 6)}"
    key = pem("PRIVATE KEY", rsa_pkcs8(r)) + "\n"
    doc = {"type": "service_account", "project_id": project, "private_key_id": hexs(r, 40), "private_key": key,
           "client_email": f"{c['svc']}-sa@{project}.iam.gserviceaccount.com", "client_id": pick(r, "0123456789", 21),
           "auth_uri": "https://accounts.google.com/o/oauth2/auth", "token_uri": "https://oauth2.googleapis.com/token"}
    return json.dumps(doc, indent=2), [json.dumps(key)[1:80]]


@shape("file_format", "hcl")
def terraformrc_credentials(r: Random) -> Made:
    tok = f"{pick(r, ALNUM, 14)}.atlasv1.{pick(r, ALNUM, 67)}"
    return f'credentials "app.terraform.io" {{\n  token = "{tok}"\n}}\n', [tok]


@shape("file_format", "ini")
def pip_conf_index_url(r: Random) -> Made:
    pw = url_quote(password(r))
    return f"[global]\nindex-url = https://{user(r)}:{pw}@{ctx(r)['host']}/simple/\ntimeout = 60\n", [pw]


@shape("file_format", "json")
def composer_auth_json(r: Random) -> Made:
    key, gho = hexs(r, 40), checksummed(r, "gho_")
    doc = {"http-basic": {"repo.packagist.com": {"username": "token", "password": key}},
           "github-oauth": {"github.com": gho}}
    return json.dumps(doc, indent=4), [key, gho]


# --- placed: credentials placed by structure ----------------------------------------------------------


@shape("placed", None)
def chat_log_inline(r: Random) -> Made:
    c, a, b = ctx(r), *r.sample(PEOPLE, 2)
    what, v = r.choice(((f"the {c['svc']} db password", password(r)), ("pw for the staging admin", password(r)),
                        (f"{c['user']}'s password on {c['host']}", password(r)),
                        ("the token for the deploy bot", bare_token(r)), ("the api key", api_token(r))))
    return chat(r, [(a, f"is {c['host']} back?"), (b, "yes, restarted it"), (b, f"{what} is {v}"),
                    (a, "thanks, I'm in"), (b, "will rotate it after the demo")]), [v]


@shape("placed", None)
def chat_log_next_message(r: Random) -> Made:
    c, v = ctx(r), bare_value(r)
    a, b = r.sample(PEOPLE, 2)
    ask = r.choice((f"what's the password for the {c['svc']} admin?", "anyone have the grafana login?",
                    f"which token does the {c['svc']} bot use?"))
    return chat(r, [(a, ask), (b, "one sec"), (b, v), (a, "+1 works")]), [v]


@shape("placed", "json")
def chat_slack_export_json(r: Random) -> Made:
    c, v = ctx(r), bare_value(r)
    said = (f"deploying {c['svc']} now", f"creds for {c['host']}: {c['user']} / {v}", "ty")
    msgs = [{"type": "message", "user": "U0" + pick(r, "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789", 8),
             "ts": f"17{pick(r, '0123456789', 8)}.000{r.randint(100, 999)}", "text": t} for t in said]
    return json.dumps(msgs, indent=2), [v]


@shape("placed", None)
def prose_root_password(r: Random) -> Made:
    pw = password(r)
    s = r.choice((f"The root password is {pw}, rotate it after the demo.",
                  f"For the workshop the appliance admin password was reset to {pw} and shared with the attendees.",
                  f"Log in as root (the password is {pw}) and check that the disks are mounted."))
    return f"{s} The console listens on port 8443 and only accepts connections from the office network.", [pw]


@shape("placed", None)
def prose_use_token(r: Random) -> Made:
    tok = bare_token(r) if r.random() < 0.6 else api_token(r)
    s = r.choice((f"To try the API from your laptop, use token {tok} to log in; it expires on Friday.",
                  f"The CI job authenticates with {tok}, which belongs to the shared bot account.",
                  f"If the dashboard asks for credentials, paste the access token {tok} into the field."))
    return s, [tok]


def literal_parts(r: Random) -> tuple[str, list[str]]:
    value = secret_value(r)
    return value, split(r, value)


@shape("placed", "python")
def split_literal_python(r: Random) -> Made:
    _, parts = literal_parts(r)
    if r.random() < 0.5:
        return "API_TOKEN = " + " + ".join(f'"{p}"' for p in parts) + "\n", parts
    return "DB_PASSWORD = (\n" + "".join(f'    "{p}"\n' for p in parts) + ")\n", parts


@shape("placed", "javascript")
def split_literal_js(r: Random) -> Made:
    _, parts = literal_parts(r)
    return "const apiKey = " + " +\n  ".join(f"'{p}'" for p in parts) + ";\nclient.configure({ apiKey });\n", parts


@shape("placed", "java")
def split_literal_java(r: Random) -> Made:
    _, parts = literal_parts(r)
    return "private static final String PASSWORD = " + " + ".join(f'"{p}"' for p in parts) + ";\n", parts


@shape("placed", "go")
def split_literal_go(r: Random) -> Made:
    _, parts = literal_parts(r)
    return "const token = " + " +\n\t".join(f'"{p}"' for p in parts) + "\n", parts


@shape("placed", None)
def markdown_table_password(r: Random) -> Made:
    rows = [(ctx(r), password(r)) for _ in range(r.randint(2, 4))]
    head = r.choice(("password", "Password", "pass"))
    body = "".join(f"| {c['ns']} | {c['host']} | {c['user']} | {pw} |\n" for c, pw in rows)
    return f"| env | host | user | {head} |\n|---|---|---|---|\n{body}", [pw for _, pw in rows]


@shape("placed", None)
def markdown_table_api_key(r: Random) -> Made:
    rows = [(r.choice(SERVICES), bare_token(r) if r.random() < 0.6 else api_token(r)) for _ in range(r.randint(2, 4))]
    head = r.choice(("api key", "API key", "token"))
    body = "".join(f"| {s} | {tok} | {r.choice(('team-a', 'sre', 'data'))} |\n" for s, tok in rows)
    return f"| service | {head} | owner |\n|---|---|---|\n{body}", [t for _, t in rows]


@shape("placed", "yaml")
def datadog_api_key(r: Random) -> Made:
    key, app = hexs(r, 32), hexs(r, 40)
    if r.random() < 0.5:
        return f"api_key: {key}\nsite: datadoghq.eu\nlogs_enabled: true\n", [key]
    return f"datadog:\n  apiKey: {key}\n  appKey: {app}\n  clusterName: prod-{r.randint(1, 9)}\n", [key, app]


@shape("placed", "yaml")
def newrelic_license_key(r: Random) -> Made:
    key = hexs(r, 40) if r.random() < 0.5 else hexs(r, 36) + "NRAL"
    return f"common: &default_settings\n  license_key: '{key}'\n  app_name: {ctx(r)['svc']}\n  log_level: info\n", [key]


@shape("placed", "python")
def sentry_dsn(r: Random) -> Made:
    dsn = f"https://{hexs(r, 32)}@o{r.randint(10**5, 10**7)}.ingest.sentry.io/{r.randint(10**6, 10**7)}"
    return f'sentry_sdk.init(\n    dsn="{dsn}",\n    traces_sample_rate=0.2,\n)\n', [dsn]


@shape("placed", "bash")
def honeycomb_api_key(r: Random) -> Made:
    key = pick(r, ALNUM, 22) if r.random() < 0.5 else hexs(r, 32)
    return (f'export OTEL_EXPORTER_OTLP_ENDPOINT="https://api.honeycomb.io"\n'
            f'export OTEL_EXPORTER_OTLP_HEADERS="x-honeycomb-team={key}"\n'), [key]


@shape("placed", "hcl")
def grafana_cloud_token(r: Random) -> Made:
    body = {"o": str(r.randint(10**5, 10**6)), "n": f"stack-{r.randint(10**5, 10**6)}-alloy-{ctx(r)['svc']}",
            "k": pick(r, ALNUM, 24), "m": {"r": "prod-eu-west-2"}}
    tok = "glc_" + b64(json.dumps(body, separators=(",", ":")))
    return (f'prometheus.remote_write "cloud" {{\n  endpoint {{\n    url = "https://prometheus-prod-24.grafana.net/api/prom/push"'
            f'\n    basic_auth {{\n      username = "{r.randint(10**5, 10**7)}"\n      password = "{tok}"\n'
            "    }\n  }\n}\n"), [tok]


@shape("placed", "python")
def django_secret_key(r: Random) -> Made:
    key = r.choice(("", "django-insecure-")) + pick(r, "abcdefghijklmnopqrstuvwxyz0123456789!@#$%^&*(-_=+)", 50)
    return f"DEBUG = False\nALLOWED_HOSTS = ['{ctx(r)['host']}']\nSECRET_KEY = '{key}'\n", [key]


@shape("placed", "yaml")
def rails_secret_key_base(r: Random) -> Made:
    key = hexs(r, 128)
    return f"production:\n  secret_key_base: {key}\n  host: {ctx(r)['host']}\n", [key]


@shape("placed", "python")
def flask_secret_key(r: Random) -> Made:
    key = repr(r.randbytes(16)) if r.random() < 0.5 else f"'{hexs(r, 64)}'"
    return f"app = Flask(__name__)\napp.config['SECRET_KEY'] = {key}\n", [key]


@shape("placed", "xml")
def xml_password_element(r: Random) -> Made:
    pw = password(r)
    return ("<settings>\n  <servers>\n    <server>\n      <id>internal-releases</id>\n"
            f"      <username>{user(r)}</username>\n"
            f"      <password>{pw}</password>\n    </server>\n  </servers>\n</settings>\n"), [pw]


@shape("placed", "xml")
def xml_appsettings_add_key(r: Random) -> Made:
    v = bare_token(r) if r.random() < 0.6 else api_token(r)
    key = r.choice(("ApiKey", "StripeSecretKey", "SendGridApiKey", "ClientSecret"))
    return (f'<appSettings>\n  <add key="Environment" value="Production" />\n  <add key="{key}" value="{v}" />\n'
            "</appSettings>\n"), [v]


@shape("placed", "xml")
def xml_connection_string(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    return ('<connectionStrings>\n  <add name="Default" '
            f'connectionString="Server=tcp:{c["host"]},1433;Database={c["db"]};'
            f'User ID={c["user"]};Password={pw};Encrypt=True;" providerName="System.Data.SqlClient" />\n'
            "</connectionStrings>\n"), [pw]


@shape("placed", "ini")
def ini_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    return f"[database]\nhost = {c['host']}\nport = {c['port']}\nuser = {c['user']}\npassword = {pw}\n", [pw]


@shape("placed", "toml")
def toml_password(r: Random) -> Made:
    c, pw = ctx(r), password(r)
    return f'[database]\nhost = "{c["host"]}"\nuser = "{c["user"]}"\npassword = "{pw}"\npool = {c["n"]}\n', [pw]
