"""Secret removal and anonymisation for everything ddp-doctor writes.

Reports, facts snapshots, smoke logs and bundles end up in support tickets and CI logs,
so two passes exist:

* **Secrets are always removed**: the values of variables whose names look secret
  (``HF_TOKEN=...``, ``export WANDB_API_KEY=...``, ``"aws_secret_access_key": "..."``,
  ``--hf-token ...``), credentials inside URLs (``https://user:pass@host``) and
  well-known token shapes wherever they appear (Hugging Face, GitHub, GitLab, AWS
  access keys and the secret key next to them, W&B keys given to ``wandb login``,
  PyPI, NVIDIA API keys, Slack, OpenAI-style ``sk-``, PEM private-key blocks).
* **``--anonymize``** also replaces what identifies a site: host names, user names,
  home paths, IPv4/IPv6 and MAC addresses, GPU UUIDs and serial numbers. Each value
  gets a stable placeholder (``host-1``, ``user-1``, ``/home/user-1``, ``ip-1``,
  ``mac-1``, ``GPU-uuid-1``, ``serial-1``): the same value always maps to the same
  placeholder within one ``Redactor``, so a reader can still tell "the same GPU" from
  "another GPU" across the console, JSON, Markdown, JUnit and bundle of one run.

Concrete values (the host name, the users, the GPU UUIDs and serials) are learned from
the run's facts; shapes (addresses, UUIDs) are also found by pattern anywhere.
Placeholders never match a pattern again, so redacting twice changes nothing and
counts nothing.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

from ddp_doctor.model import Report

REDACTED = "<redacted>"

# Kinds counted by Redactor.summary() (the bundle's MANIFEST lists them).
SECRET_VARIABLE = "secret variable"
URL_CREDENTIAL = "url credential"
SECRET_TOKEN = "secret token"
PRIVATE_KEY = "private key"
HOSTNAME = "hostname"
USER_NAME = "user name"
HOME_PATH = "home path"
IP_ADDRESS = "ip address"
MAC_ADDRESS = "mac address"
GPU_UUID = "gpu uuid"
SERIAL_NUMBER = "serial number"

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


def _hides_secret(name: str, value: str) -> bool:
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
        if not _hides_secret(m.group("name") or m.groupdict().get("name2") or "", value):
            return m.group(0)
        quoted = len(value) > 1 and value[0] in "\"'" and value[-1] == value[0]
        quote = value[0] if quoted else ""
        count(SECRET_VARIABLE, 1)
        start, end = m.span("val")
        whole = m.group(0)
        offset = m.start()
        return (whole[: start - offset] + f"{quote}{REDACTED}{quote}" + whole[end - offset:])

    return pattern.sub(repl, text)


def _redact_secrets(text: str, count: Count) -> str:
    """Every secret removed from ``text``; ``count(kind, n)`` hears what was replaced."""
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
    return _redact_secrets(text, _no_count)


# ---------------------------------------------------------------------------------------
# Anonymisation shapes
# ---------------------------------------------------------------------------------------

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"  # no leading zeros: 13.590.48.01 is a version
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w+]|\.\d|-\d)")
# Text just before a dotted quad that makes it a version: "cuDNN 9.1.0.70",
# "nvidia-cudnn-cu12==9.1.0.70", "Version: 4.10.0.84", "nvidia-cudnn-cu12   9.1.0.70".
_VERSION_BEFORE = re.compile(
    r"(?i)(?:version|\bver\.?|release|build|cudnn|nccl|cublas|cufft|cusparse|tensorrt|"
    r"opencv\S*|nvidia-\S+|\S+-cu\d+\S*|==|>=|<=|~=|!=)\s*[:=]?\s*$")
_HEX4 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = re.compile(
    rf"(?<![\w.])(?:(?:{_HEX4}:){{7}}{_HEX4}"
    rf"|(?:{_HEX4}:){{1,7}}:(?:{_HEX4}(?::{_HEX4}){{0,6}})?"
    rf"|::{_HEX4}(?::{_HEX4}){{0,6}})(?![\w:])")
_MAC = re.compile(r"(?<![\w:.-])[0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}\1){4,18}[0-9A-Fa-f]{2}"
                  r"(?![\w:.-])")
_UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# GPU and MIG UUIDs as NVML and `nvidia-smi -L` print them ("GPU-<uuid>", "MIG-<uuid>"):
# https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
_GPU_UUID = re.compile(rf"(?<![\w-])(?P<prefix>GPU|MIG)-(?P<hex>{_UUID_HEX})(?![\w-])")
_BARE_UUID = re.compile(rf"(?:(?:GPU|MIG)-)?(?P<hex>{_UUID_HEX})")
# `nvidia-smi -q`: "Serial Number                         : 1324321012345"
_SERIAL_LINE = re.compile(r"(?P<pre>\bSerial Number\s*:\s*)(?P<val>[^\s<]+)", re.I)
# Home directories: /home/NAME, /Users/NAME (macOS, and /mnt/c/Users/NAME under WSL),
# C:\Users\NAME (also JSON-escaped, C:\\Users\\NAME).
_HOME = re.compile(r"(?P<pre>/home/|/Users/|\b[A-Za-z]:(?:\\\\|\\)Users(?:\\\\|\\))"
                   r"(?P<name>[^/\\\s\"'`:;,<>|*?()\[\]{}]+)")
# The prefix NCCL puts on every log line (NCCL_DEBUG): "HOST:PID:TID [DEV] NCCL INFO ...",
# "HOST:PID:TID [DEV] misc/socket.cc:484 NCCL WARN ...".
# Launchers may put their own "[rank0]:" / "[default0]:" in front.
_NCCL_PREFIX = re.compile(r"^(?:\[[\w-]+\]:?[ \t]*)?(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] "
                          r"[^\n]*\bNCCL\b", re.M)

_PLACEHOLDER = re.compile(r"(?:host|user|ip|mac|serial|uuid)-\d+", re.I)
_NOT_A_USER = frozenset({"", "root", "shared", "public", "default", "all users", "default user",
                         "guest"})
# Account names too common to replace as bare words ("the user", "runner"): they are still
# replaced inside home paths.
_GENERIC_USERS = frozenset({"user", "users", "admin", "ubuntu", "runner", "nobody", "jovyan",
                            "ec2-user", "centos", "vagrant", "docker", "test", "root", "guest"})
_NOT_A_HOST = frozenset({"", "localhost", "localhost.localdomain", "none", "null", "unknown"})
_NOT_A_SERIAL = frozenset({"", "n/a", "[n/a]", "na", "none", "null", "not supported",
                           "[not supported]", "unknown", "0", "0000000000000"})
_HOST_SHAPE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*")
_USER_SHAPE = re.compile(r"[A-Za-z_][\w.-]{0,31}")

_HOST_KEYS = frozenset({"hostname", "host_name", "nodename", "node_name", "fqdn"})
_USER_KEYS = frozenset({"user", "username", "user_name", "owner", "logname", "login"})
_USER_ENV = frozenset({"USER", "LOGNAME", "USERNAME", "SUDO_USER"})
_HOME_ENV = frozenset({"HOME", "USERPROFILE"})


def _is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.fullmatch(value))


def _norm_key(key: object) -> str:
    return re.sub(r"[\s-]+", "_", str(key).strip().lower()) if isinstance(key, str) else ""


class Redactor:
    """One run's redaction: every artifact of the run goes through the same instance.

    Secrets are always removed. With ``anonymize`` host and user names, home paths,
    addresses, GPU UUIDs and serials get stable placeholders; see ``for_run``.
    """

    def __init__(self, anonymize: bool = False) -> None:
        self.anonymize = anonymize
        self.counts: dict[str, int] = {}  # what was replaced, by kind, for the MANIFEST
        self._maps: dict[str, dict[str, str]] = {}  # kind -> value -> placeholder
        self._hosts: set[str] = set()
        self._users: set[str] = set()
        self._uuids: set[str] = set()  # lower-case hex of GPU UUIDs learned from facts
        self._serials: set[str] = set()
        self._known: re.Pattern[str] | None = None  # one pattern for the learned literals

    # -- construction ------------------------------------------------------------------

    @classmethod
    def for_run(cls, facts: object = None, anonymize: bool = False) -> Redactor:
        """A redactor for one run, knowing the run's facts.

        ``facts`` is a ``Facts`` object, its ``to_dict()`` form, or None. With
        ``anonymize`` the host name (``os.hostname``), users (``env_vars`` HOME/USER/
        LOGNAME, home paths, process owners), GPU UUIDs and serials (``nvml``) are learned
        from it, and every value the facts hold gets its placeholder in the facts' own
        order, so the snapshot and the report of one run agree.
        """
        redactor = cls(anonymize=anonymize)
        if anonymize and facts is not None:
            data = _facts_values(facts)
            redactor.learn(data)
            redactor.value(data)  # assign placeholders in a stable order
            redactor.counts.clear()
        return redactor

    def learn(self, data: object) -> None:
        """Learn the concrete host/user names, GPU UUIDs and serials held by ``data``."""
        if not self.anonymize:
            return
        for key, value in _walk_pairs(data, ""):
            self._learn_pair(key, value)
        self._known = None

    def _learn_pair(self, key: str, value: str) -> None:
        text = value.strip()
        if key in _HOST_KEYS:
            self._add_host(text)
        elif key in _USER_KEYS or key.upper() in _USER_ENV:
            self._add_user(text)
        elif key.upper() in _HOME_ENV:
            home = _HOME.match(text)
            if home:
                self._add_user(home.group("name"))
        elif key == "uuid" or key.endswith("_uuid"):
            found = _BARE_UUID.fullmatch(text)
            if found:
                self._uuids.add(found.group("hex").lower())
        elif "serial" in key and text.lower() not in _NOT_A_SERIAL and not _is_placeholder(text):
            self._serials.add(text)
        for m in _HOME.finditer(value):
            self._add_user(m.group("name"))
        for m in _NCCL_PREFIX.finditer(value):
            self._add_host(m.group("host"))

    def _add_host(self, name: str) -> None:
        if (name.lower() in _NOT_A_HOST or _is_placeholder(name) or not _HOST_SHAPE.fullmatch(name)
                or name.isdigit() or _looks_like_ip(name)):
            return
        self._hosts.update({name, name.lower()})
        short = name.split(".", 1)[0]
        if short != name and len(short) >= 2 and not short.isdigit():
            self._hosts.update({short, short.lower()})

    def _add_user(self, name: str) -> None:
        if (name.lower() in _NOT_A_USER or _is_placeholder(name)
                or not _USER_SHAPE.fullmatch(name)):
            return
        self._users.add(name)

    # -- the interface -----------------------------------------------------------------

    def text(self, text: str, *, version_context: bool = False) -> str:
        """Free text with every secret removed (and, with ``anonymize``, identities).

        ``version_context`` says the text is a version (a "version" key or label), so a
        dotted quad in it is not an IP address.
        """
        if not text:
            return text
        text = _redact_secrets(text, self._count)
        if self.anonymize:
            hosts = len(self._hosts)
            for m in _NCCL_PREFIX.finditer(text):  # a log names its hosts on every NCCL line
                self._add_host(m.group("host"))
            if len(self._hosts) != hosts:
                self._known = None
            text = self._anonymize(text, version_context)
        return text

    def summary(self) -> dict[str, int]:
        """How many values of each kind this redactor replaced so far."""
        return dict(sorted(self.counts.items()))

    def value(self, value: object) -> object:
        """Any JSON-like value (dicts, lists, dataclasses) with every string redacted.

        Keys give context: a string under a secret-looking key (``HF_TOKEN``,
        ``password``) is replaced whole; under a ``version`` key a dotted quad stays.
        """
        if self.anonymize:
            self.learn(value)
        return self._map(value, "")

    def report(self, report: Report) -> Report:
        """The whole Report, every string in it redacted (a new Report)."""
        redacted = self.value(report)
        if not isinstance(redacted, Report):  # _map rebuilds a dataclass as its own type
            raise TypeError(f"redacting a Report gave a {type(redacted).__name__}")
        return redacted

    def facts(self, facts: object) -> dict[str, Any]:
        """A facts snapshot (``Facts`` or its dict form) as a redacted dict, for writing."""
        data = facts.to_dict() if hasattr(facts, "to_dict") else facts
        result = self.value(data)
        return result if isinstance(result, dict) else {}

    # -- internals ---------------------------------------------------------------------

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def _placeholder(self, kind: str, key: str, make: Callable[[int], str]) -> str:
        table = self._maps.setdefault(kind, {})
        if key not in table:
            table[key] = make(len(table) + 1)
        return table[key]

    def _map(self, value: object, key: str) -> object:
        if isinstance(value, Enum):
            return value
        if isinstance(value, str):
            if key and _hides_secret(key, value):
                self._count(SECRET_VARIABLE, 1)
                return REDACTED
            return self.text(value, version_context="version" in key)
        if isinstance(value, dict):
            mapped = {}
            for k, item in value.items():
                new_key = self.text(k) if self.anonymize and isinstance(k, str) else k
                mapped[new_key] = self._map(item, _norm_key(k))
            return mapped
        if isinstance(value, (list, tuple)):
            items = [self._map(item, key) for item in value]
            return tuple(items) if isinstance(value, tuple) else items
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            label = getattr(value, "label", None)
            label_key = _norm_key(label) if isinstance(label, str) else ""
            changes = {}
            for f in dataclasses.fields(value):
                if not f.init:
                    continue
                field_key = label_key if f.name == "value" and label_key else f.name
                changes[f.name] = self._map(getattr(value, f.name), field_key)
            return dataclasses.replace(value, **changes)
        return value

    def _known_pattern(self) -> re.Pattern[str] | None:
        """One pattern for every learned literal, longest first, whole words only."""
        if self._known is None:
            alternatives = []
            for group, names in (("host", self._hosts), ("user", self._users - _GENERIC_USERS),
                                 ("serial", self._serials)):
                if names:
                    ordered = sorted(names, key=lambda n: (-len(n), n))
                    # DNS names are case-insensitive; a two-letter one ("vm") only as written
                    words = [re.escape(n) if group != "host" or len(n) < 4
                             else f"(?i:{re.escape(n)})" for n in ordered]
                    alternatives.append(f"(?P<{group}>{'|'.join(words)})")
            if self._uuids:
                hexes = "|".join(sorted(self._uuids))
                alternatives.append(f"(?P<uuid>(?:(?:GPU|MIG)-)?(?i:{hexes}))")
            if not alternatives:
                return None
            self._known = re.compile(r"(?<![\w.-])(?:" + "|".join(alternatives) + r")(?![\w-])")
        return self._known

    def _anonymize(self, text: str, version_context: bool) -> str:
        text = _HOME.sub(self._replace_home, text)
        known = self._known_pattern()
        if known is not None:
            text = known.sub(self._replace_known, text)
        text = _GPU_UUID.sub(self._replace_uuid, text)
        text = _SERIAL_LINE.sub(self._replace_serial_line, text)
        text = _MAC.sub(self._replace_mac, text)
        text = _IPV4.sub(lambda m: self._replace_ipv4(m, version_context), text)
        text = _IPV6.sub(self._replace_ipv6, text)
        return text

    def _replace_known(self, m: re.Match[str]) -> str:
        group = m.lastgroup or ""
        value = m.group(group)
        if group == "host":
            return self._host(value)
        if group == "user":
            self._count(USER_NAME, 1)
            return self._placeholder(USER_NAME, value, lambda n: f"user-{n}")
        if group == "serial":
            return self._serial(value)
        found = _BARE_UUID.fullmatch(value)
        return self._replace_uuid(found) if found else value

    def _host(self, name: str) -> str:
        """node1, NODE1 and node1.cluster.example are one host: one placeholder."""
        self._count(HOSTNAME, 1)
        return self._placeholder(HOSTNAME, name.lower().split(".", 1)[0], lambda n: f"host-{n}")

    def _serial(self, value: str) -> str:
        self._count(SERIAL_NUMBER, 1)
        return self._placeholder(SERIAL_NUMBER, value, lambda n: f"serial-{n}")

    def _replace_uuid(self, m: re.Match[str]) -> str:
        prefix = m.group(0).split("-", 1)[0] if m.group(0)[:4] in ("GPU-", "MIG-") else "GPU"
        self._count(GPU_UUID, 1)
        number = self._placeholder(GPU_UUID, m.group("hex").lower(), lambda n: str(n))
        return f"{prefix}-uuid-{number}"

    def _replace_serial_line(self, m: re.Match[str]) -> str:
        value = m.group("val")
        if value.lower() in _NOT_A_SERIAL or _is_placeholder(value):
            return m.group(0)
        return m.group("pre") + self._serial(value)

    def _replace_home(self, m: re.Match[str]) -> str:
        name = m.group("name")
        if name.lower() in _NOT_A_USER or _is_placeholder(name):
            return m.group(0)
        self._count(HOME_PATH, 1)
        return m.group("pre") + self._placeholder(USER_NAME, name, lambda n: f"user-{n}")

    def _replace_mac(self, m: re.Match[str]) -> str:
        value = m.group(0).lower().replace("-", ":")
        if set(value) <= {"0", ":"} or set(value) <= {"f", ":"}:
            return m.group(0)
        self._count(MAC_ADDRESS, 1)
        return self._placeholder(MAC_ADDRESS, value, lambda n: f"mac-{n}")

    def _replace_ipv4(self, m: re.Match[str], version_context: bool) -> str:
        value = m.group(0)
        known = value in self._maps.get(IP_ADDRESS, {})
        if not known:
            if version_context or _keep_ipv4(value):
                return value
            line_start = m.string.rfind("\n", 0, m.start()) + 1
            if _VERSION_BEFORE.search(m.string[max(line_start, m.start() - 48):m.start()]):
                return value
        self._count(IP_ADDRESS, 1)
        return self._placeholder(IP_ADDRESS, value, lambda n: f"ip-{n}")

    def _replace_ipv6(self, m: re.Match[str]) -> str:
        value = m.group(0)
        try:
            address = ipaddress.IPv6Address(value)
        except ValueError:
            return value
        groups = [g for g in value.split(":") if g]
        if (address.is_loopback or address.is_unspecified or len(groups) < 2
                or (len(groups) < 3 and max(len(g) for g in groups) < 3)):
            return value
        self._count(IP_ADDRESS, 1)
        return self._placeholder(IP_ADDRESS, address.compressed, lambda n: f"ip-{n}")


def _keep_ipv4(value: str) -> bool:
    """Addresses that identify nothing: loopback, unspecified, broadcast and netmasks."""
    return value.startswith(("127.", "0.", "255."))


def _looks_like_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _facts_values(facts: object) -> dict[str, Any]:
    """The facts as a plain dict (``Facts.to_dict()`` form), whatever was passed."""
    to_dict = getattr(facts, "to_dict", None)
    data = to_dict() if callable(to_dict) else facts
    return data if isinstance(data, dict) else {}


def _walk_pairs(value: object, key: str) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` with the (normalised) key or label it sits under."""
    if isinstance(value, Enum):
        return
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _walk_pairs(item, _norm_key(k))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk_pairs(item, key)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        label = getattr(value, "label", None)
        label_key = _norm_key(label) if isinstance(label, str) else ""
        for f in dataclasses.fields(value):
            field_key = label_key if f.name == "value" and label_key else f.name
            yield from _walk_pairs(getattr(value, f.name), field_key)
