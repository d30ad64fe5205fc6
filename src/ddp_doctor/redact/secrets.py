"""Secret removal: what is never written, whatever the options.

Reports, facts snapshots, smoke logs and bundles end up in support tickets and CI logs,
so the values of variables whose names look secret (``HF_TOKEN=...``, ``export
WANDB_API_KEY=...``, ``"aws_secret_access_key": "..."``, ``--hf-token ...``), credentials
inside URLs (``https://user:pass@host``) and well-known token shapes wherever they appear
(Hugging Face, GitHub, GitLab, AWS access keys and the secret key next to them, W&B keys
given to ``wandb login``, PyPI, NVIDIA API keys, Slack, OpenAI-style ``sk-``, PEM
private-key blocks) are replaced by ``<redacted>``.

This module is the pattern knowledge alone, as pure functions over text: gatherers that
store free text (environment variables, probe output, scanned logs) call ``redact_text``
directly; ``redactor.Redactor`` applies the same passes to a whole run's artifacts and
counts what they replaced. ``<redacted>`` matches no pattern again, so redacting twice
changes nothing and counts nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

REDACTED = "<redacted>"

# Kinds counted by Redactor.summary() (the bundle's MANIFEST lists them).
SECRET_VARIABLE = "secret variable"
URL_CREDENTIAL = "url credential"
SECRET_TOKEN = "secret token"
PRIVATE_KEY = "private key"

# ``count(kind, n)``: told how many values of a kind a pass replaced.
Count = Callable[[str, int], None]

# ---------------------------------------------------------------------------------------
# Secret names
# ---------------------------------------------------------------------------------------

# TOKEN but not TOKENS/TOKENIZER (max_tokens, TOKENIZERS_PARALLELISM are not secrets);
# AUTH but not AUTHOR (AUTHORIZATION is); PASSW(ORD|D); *_KEY, KEY; *_PAT (GITHUB_PAT).
_SECRET_NAME = re.compile(
    r"TOKEN(?!S|IZ)|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH(?!OR(?!IZ))|API_?KEY|ACCESS_?KEY"
    r"|PRIVATE_?KEY|_KEY$|^KEY$|COOKIE|SESSION_?(?:ID|KEY)|_PASS$|^PASS$|_PAT$|^PAT$|_DSN$"
    r"|JWT",
    re.IGNORECASE,
)
# Values that are not secrets even under a secret name: flags, empties, references to
# another variable ($HF_TOKEN, ${{ secrets.X }}, %(token)s) and our own marker.
_NOT_A_VALUE = re.compile(
    r"(?:|none|null|nil|true|false|yes|no|on|off|0|1|\*+|x+|<redacted>|\.\.\.|"
    r"\$.*|%\(.*|<[^>]*>|\[[^\]]*\])",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    """True for variable, key or flag names whose values must never be shown.

    Dashes and dots count as underscores, so ``--hf-token``, ``api-key`` and
    ``wandb.api_key`` are recognised like ``HF_TOKEN``.
    """
    return bool(_SECRET_NAME.search(re.sub(r"[-.]", "_", name.strip().lstrip("-"))))


def hides_secret(name: str, value: str) -> bool:
    """True when ``value``, held under ``name``, must be replaced: a secret name holding a
    real value rather than a flag, an empty, a reference to another variable or a marker."""
    return is_secret_name(name) and not _NOT_A_VALUE.fullmatch(value.strip().strip("\"'"))


# ---------------------------------------------------------------------------------------
# Secret shapes
# ---------------------------------------------------------------------------------------

# PEM private keys, RFC 7468 section 10/11 ("PRIVATE KEY", "ENCRYPTED PRIVATE KEY") and the
# de-facto "RSA/EC/DSA/OPENSSH PRIVATE KEY" labels, plus OpenPGP armor
# ("PGP PRIVATE KEY BLOCK", RFC 4880 6.2): https://www.rfc-editor.org/rfc/rfc7468
# A block cut off by a truncated log is removed up to the end of its base64 lines.
_PEM = re.compile(
    r"-----BEGIN (?P<label>[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
    r"(?:.*?-----END (?P=label)-----"
    r"|(?:[ \t]*(?:\r?\n|\\n)(?:[A-Za-z0-9+/=]{16,}|(?:Proc-Type|DEK-Info|Comment):[^\n\\]*))*)",
    re.S,
)

# (pattern, doc URL): tokens recognised by their published prefixes, anywhere in text.
_TOKEN_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    # JSON Web Tokens (GitLab's CI_JOB_JWT, OIDC id tokens): three base64url parts, the
    # first two JSON objects, so both start "eyJ" ('{"').
    (re.compile(r"\beyJ[\w-]{10,}\.eyJ[\w-]{10,}\.[\w-]{10,}"),
     "https://datatracker.ietf.org/doc/html/rfc7519#section-3"),
    # Hugging Face user access tokens start with "hf_"; deprecated organisation API
    # tokens with "api_org_".
    (re.compile(r"\b(?:hf|api_org)_[A-Za-z0-9]{30,}\b"),
     "https://huggingface.co/docs/hub/security-tokens"),
    # GitHub: ghp_ (personal), gho_ (OAuth), ghu_/ghs_ (app user/server), ghr_ (refresh),
    # 36+ characters after the prefix (up to 255 in all); fine-grained "github_pat_".
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,251}\b"),
     "https://github.blog/changelog/2021-03-31-authentication-token-format-updates-are-"
     "generally-available"),
    (re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
     "https://github.blog/engineering/platform-security/behind-githubs-new-authentication-"
     "token-formats/"),
    # GitLab personal/project/group access tokens: "glpat-".
    (re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}"),
     "https://docs.gitlab.com/ee/security/tokens/#token-prefixes"),
    # AWS access key ids: AKIA (long-term), ASIA (STS temporary), ABIA (STS bearer), 20
    # upper-case characters in all.
    (re.compile(r"\b(?:AKIA|ASIA|ABIA)[A-Z0-9]{16}\b"),
     "https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html"
     "#identifiers-unique-ids"),
    # PyPI API tokens are macaroons serialised after a "pypi-" prefix.
    (re.compile(r"\bpypi-Ag[A-Za-z0-9_-]{40,}"), "https://pypi.org/help/#apitoken"),
    # NVIDIA API catalog keys (build.nvidia.com) start with "nvapi-".
    (re.compile(r"\bnvapi-[A-Za-z0-9_-]{20,}"),
     "https://docs.nvidia.com/nemo/retriever/latest/extraction/api-keys/index.html"),
    # Slack tokens: xoxb- (bot), xoxp- (user), xoxa-/xoxr-/xoxs-/xoxo-.
    (re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
     "https://api.slack.com/authentication/token-types"),
    # OpenAI-style secret keys "sk-" / "sk-proj-" (Anthropic's "sk-ant-" share the shape).
    (re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
     "https://platform.openai.com/docs/api-reference/authentication"),
    # OAuth 2.0 bearer tokens in an Authorization header, RFC 6750 section 2.1 (b64token).
    (re.compile(r"(?<=\bBearer )[A-Za-z0-9._~+/-]{16,}=*"),
     "https://www.rfc-editor.org/rfc/rfc6750#section-2.1"),
)

# AWS secret access keys are 40 characters of base64 alphabet, with nothing to recognise
# them by but the access key id next to them, so only lines holding an id are searched:
# https://docs.aws.amazon.com/IAM/latest/UserGuide/id_credentials_access-keys.html
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA|ABIA)[A-Z0-9]{16}\b")
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")

# W&B API keys: 40 characters (legacy), now about 86; on-prem keys carry a "name-"
# prefix; the SDK checks that what follows the last dash is 40+ word characters:
# https://docs.wandb.ai/support/models/articles/why-does-my-api-key-fail-with-must-be-40-characters
# They have no prefix of their own, so they are recognised where they are used:
# `wandb login <key>` (WANDB_API_KEY=..., key=... and netrc passwords are covered by the
# secret-name and netrc rules).
_WANDB_LOGIN = re.compile(r"(?P<pre>\bwandb\s+login\b(?:\s+--?[\w-]+(?:[= ]\S+)?)*?\s+)"
                          r"(?P<val>(?:[\w]+-)?\w{40,})\b")
# ~/.netrc (wandb, huggingface and pip write them): "machine HOST login USER password X".
_NETRC_PASSWORD = re.compile(r"(?P<pre>(?:^|\blogin\s+\S+\s+)\s*password\s+)(?P<val>\S+)", re.M)

# scheme://user:password@host -> scheme://<redacted>@host, any scheme (RFC 3986 3.2.1
# userinfo). For http(s) a user part alone is a token too (https://TOKEN@github.com).
_URL_CREDENTIALS = re.compile(
    r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/\s:@<>\"']+):(?P<pw>[^/\s@<>\"']+)@")
_URL_TOKEN_USER = re.compile(r"(?P<scheme>\bhttps?://)(?P<user>[^/\s:@<>\"']{16,})@")

# NAME=value, export NAME="value", NAME = 'value' (shell, .env, INI, Python kwargs).
# NAME=value; "NAME = value" (spaces on both sides) too, but "NAME= next" is an empty
# assignment followed by another word, which must stay ("HF_TOKEN= python train.py").
_ASSIGNMENT = re.compile(
    r"(?<![\w.$-])(?P<name>[A-Za-z_][\w.-]*)(?P<eq>=(?!=)|[ \t]+=(?!=)[ \t]*)"
    r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'`,;&|()<>\[\]{}]+)")
# os.environ["NAME"] = "value", environ.setdefault("NAME", "value"), os.putenv("NAME", "v"):
# how scripts and notebooks set tokens, and so how tracebacks and pasted cells show them.
# Only after "[" or a setter's "(": a JSON list or object ("status": "pass",\n "summary")
# must never be read as NAME, value.
_SUBSCRIPT = re.compile(
    r"(?:\[[ \t]*(?P<q>[\"'])(?P<name>[A-Za-z_][\w.-]*)(?P=q)(?P<eq>[ \t]*\][ \t]*=[ \t]*)"
    r"|(?:setdefault|putenv|setenv)\([ \t]*(?P<q2>[\"'])(?P<name2>[A-Za-z_][\w.-]*)(?P=q2)"
    r"[ \t]*,[ \t]*)(?P<val>\"[^\"\n]*\"|'[^'\n]*')")
# NAME value, as printenv-style tables, `aws configure list` and `env | column -t` show it:
# only for secret-looking names, and only a long token-like value.
_SPACED = re.compile(
    r"(?<![\w.$-])(?P<name>[A-Z][A-Z0-9_]*)(?P<eq>[ \t]+)(?P<val>[A-Za-z0-9/+=_.-]{16,})(?=\s|$)")
# "NAME": "value" and 'NAME': 'value' (JSON, Python reprs, YAML flow style).
_QUOTED_PAIR = re.compile(
    r"(?P<q>[\"'])(?P<name>[A-Za-z_][\w.-]*)(?P=q)(?P<eq>\s*:\s*)"
    r"(?P<vq>[\"'])(?P<val>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)")
# NAME: value at the start of a line (YAML, HTTP headers such as "Authorization: Basic x").
_COLON_LINE = re.compile(
    r"^(?P<pre>[ \t]*(?:-[ \t]+)?)(?P<name>[A-Za-z_][\w.-]*)(?P<eq>:[ \t]+)"
    r"(?P<val>[^\s\"'#][^\n]*?)(?=[ \t]*$)", re.M)
# --token VALUE, --hf-token=VALUE, --api-key 'VALUE'.
_FLAG = re.compile(
    r"(?<![\w-])(?P<name>--[A-Za-z][\w-]*)(?P<eq>=|[ \t]+)"
    r"(?P<val>\"[^\"\n]*\"|'[^'\n]*'|[^\s\"'-]\S*)")


def _sub_secret_values(pattern: re.Pattern[str], text: str, count: Count) -> str:
    def repl(m: re.Match[str]) -> str:
        value = m.group("val")
        if not hides_secret(m.group("name") or m.groupdict().get("name2") or "", value):
            return m.group(0)
        quoted = len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]
        quote = value[0] if quoted else ""
        count(SECRET_VARIABLE, 1)
        start, end = m.span("val")
        whole = m.group(0)
        offset = m.start()
        return (whole[: start - offset] + f"{quote}{REDACTED}{quote}" + whole[end - offset:])

    return pattern.sub(repl, text)


def redact_secrets(text: str, count: Count) -> str:
    """Every secret removed from ``text``; ``count(kind, n)`` hears what was replaced.

    The counting form of ``redact_text``, for ``Redactor``, whose summary says what a run's
    artifacts lost.
    """
    if not text:
        return text

    def pem(m: re.Match[str]) -> str:
        count(PRIVATE_KEY, 1)
        return REDACTED

    text = _PEM.sub(pem, text)

    def url(m: re.Match[str]) -> str:
        count(URL_CREDENTIAL, 1)
        return f"{m.group('scheme')}{REDACTED}@"

    text = _URL_CREDENTIALS.sub(url, text)
    text = _URL_TOKEN_USER.sub(
        lambda m: m.group(0) if m.group("user") == REDACTED else url(m), text)

    if _AWS_KEY_ID.search(text):
        def aws_line(m: re.Match[str]) -> str:
            line = m.group(0)
            if not _AWS_KEY_ID.search(line):
                return line

            def secret(s: re.Match[str]) -> str:
                count(SECRET_TOKEN, 1)
                return REDACTED

            return _AWS_SECRET.sub(secret, line)

        text = re.sub(r"[^\n]+", aws_line, text)

    def keyed(m: re.Match[str]) -> str:
        count(SECRET_TOKEN, 1)
        return m.group("pre") + REDACTED

    text = _WANDB_LOGIN.sub(keyed, text)
    text = _NETRC_PASSWORD.sub(
        lambda m: m.group(0) if _NOT_A_VALUE.fullmatch(m.group("val")) else keyed(m), text)

    for pattern in (_QUOTED_PAIR, _SUBSCRIPT, _ASSIGNMENT, _FLAG, _COLON_LINE, _SPACED):
        text = _sub_secret_values(pattern, text, count)

    for shape, _doc in _TOKEN_SHAPES:
        found = len(shape.findall(text))
        if found:
            count(SECRET_TOKEN, found)
            text = shape.sub(REDACTED, text)
    return text


def _no_count(kind: str, n: int) -> None:
    return None


def redact_text(text: str) -> str:
    """Remove secrets (secret-named values, URL credentials, token shapes) from free text."""
    return redact_secrets(text, _no_count)

