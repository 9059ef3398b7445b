"""Secrets: the one place that decides what is a credential and how it is hidden.

Everything glm5lib writes (server logs it captures, configs, run folders, reports, notebook
output) passes names and values through here, so a key that one writer masks is masked by all:

* :func:`is_secret_name` tells whether a field, JSON key or environment variable names a secret
  (``api_key``, ``admin_api_key``, ``hf_token``, ``GLM5_API_KEY``, ``*_password``...), with the
  SGLang fields that merely end like one (``radix_eviction_key``) excluded;
* :func:`mask_value` and :func:`mask_mapping` replace set secrets by ``"***"`` (nested mappings
  and lists too, and values that look like credentials whatever their key: ``hf_...``,
  ``sk-...``, ``Bearer ...``, JWTs);
* :func:`mask_text` hides ``api_key='...'``-style assignments, credential-looking words and any
  known secret value in free text (a log line, an argv element);
* :func:`mask_argv` and :func:`mask_env` do the same for a command line and an environment.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "MASK",
    "is_secret_name",
    "mask_argv",
    "mask_env",
    "mask_mapping",
    "mask_text",
    "mask_value",
]

MASK = "***"

# A name is a secret when its last word is one of these (``api_key``, ``GLM5_API_KEY``,
# ``ssl_keyfile_password``) or it holds one of the compound words anywhere (``hf_token_path``).
_SECRET_NAME_RE = re.compile(
    r"(?:^|_)(?:api_?key|key|token|secret|password|passwd|passphrase|credentials?|auth)$"
    r"|(?:^|_)(?:hf_token|access_token|auth_token|api_token|secret_key|access_key|private_key)(?:$|_)",
    re.IGNORECASE,
)
# Names that end like a secret but hold none (an eviction policy, a header name, vLLM's CORS switch).
_NOT_SECRET_NAMES = frozenset({"radix_eviction_key", "tokenizer_metrics_custom_labels_header", "sort_key",
                               "allow_credentials"})
# ``..._token`` names a unit, not a credential, after these words (``time_to_first_token``,
# ``max_deferred_experts_per_token``, ``eos_token``).
_TOKEN_AS_UNIT = re.compile(r"(?:^|_)(?:per|first|last|next|new|output|input|eos|bos|pad|stop|special|sep|cls|unk|mask)_token$")
# Values that are credentials whatever their key.
_SECRET_VALUE_RE = re.compile(
    r"^(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|xox[abpr]-[A-Za-z0-9-]{10,}|Bearer\s+\S+|eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*)$"
)
# ``api_key='abc'``, ``admin_api_key: abc``, ``password=abc`` inside free text.
_ASSIGNMENT_IN_TEXT_RE = re.compile(
    r"(?P<key>\b(?:[a-z_]*api_key|hf_token|access_token|auth_token|api_token|secret_key|secret|password)\s*[=:]\s*)"
    r"(?P<q>['\"]?)(?P<val>(?!None\b)[^'\",\s)]+)(?P=q)",
    re.IGNORECASE,
)
_TOKEN_IN_TEXT_RE = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{20,}|sk-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,})"
    r"|(?<=Bearer )\S+"
)
# Known secret values shorter than this are not replaced in free text: a one-letter key would
# mask every occurrence of that letter.
_MIN_LITERAL = 4


def _unset(value: Any) -> bool:
    return value is None or value is False or (isinstance(value, str | list | tuple | dict) and len(value) == 0)


def is_secret_name(name: str) -> bool:
    """True when ``name`` (a config field, JSON key, flag or environment variable) names a secret."""
    key = str(name).strip().lstrip("-").replace("-", "_").lower()
    if key in _NOT_SECRET_NAMES or _TOKEN_AS_UNIT.search(key):
        return False
    return bool(_SECRET_NAME_RE.search(key))


def mask_value(name: str | None, value: Any) -> Any:
    """``"***"`` for a set value under a secret name or a credential-looking value; the value otherwise.

    Mappings and lists are masked element by element (keys of nested mappings are names too).
    """
    if name is not None and is_secret_name(name) and not _unset(value):
        return MASK
    if isinstance(value, Mapping):
        return {k: mask_value(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_value(None, v) for v in value)
    if isinstance(value, str) and _SECRET_VALUE_RE.match(value.strip()):
        return MASK
    return value


def mask_mapping(data: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``data`` (server args, ``/get_server_info``, a config) with its secrets masked."""
    if not isinstance(data, Mapping):
        raise TypeError(f"mask_mapping expects a mapping (e.g. server_args), got {type(data).__name__}")
    return {k: mask_value(str(k), v) for k, v in data.items()}


def mask_text(text: str, secrets: Iterable[str | None] = ()) -> str:
    """``text`` with assignments to secret names, credential-looking words and the given values masked."""
    if not text:
        return text
    for secret in secrets:
        if secret and len(secret) >= _MIN_LITERAL and secret in text:
            text = text.replace(secret, MASK)
    text = _ASSIGNMENT_IN_TEXT_RE.sub(lambda m: f"{m['key']}{m['q']}{MASK}{m['q']}", text)
    return _TOKEN_IN_TEXT_RE.sub(MASK, text)


def mask_argv(argv: Sequence[str], secrets: Iterable[str | None] = ()) -> list[str]:
    """A command line with the values of secret flags (``--api-key X``, ``--api-key=X``) masked."""
    known = [s for s in secrets if s]
    out: list[str] = []
    hide_next = False
    for token in map(str, argv):
        if hide_next and not token.startswith("--"):
            out.append(MASK)
            hide_next = False
            continue
        hide_next = False
        if token.startswith("--"):
            flag, eq, value = token.partition("=")
            if is_secret_name(flag):
                if eq:
                    out.append(f"{flag}={MASK}" if value else token)
                else:
                    out.append(token)
                    hide_next = True
                continue
        out.append(mask_text(token, known))
    return out


def mask_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment (or its overrides) with secret variables masked."""
    return {k: (MASK if is_secret_name(k) and v else v) for k, v in env.items()}


def secret_env_values(env: Mapping[str, str]) -> list[str]:
    """The values of an environment's secret variables, for :func:`mask_text`'s ``secrets``."""
    return [v for k, v in env.items() if is_secret_name(k) and v and len(v) >= _MIN_LITERAL]


__all__ += ["secret_env_values"]
