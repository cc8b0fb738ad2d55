"""Names and label values of the children of an InferenceBackend, valid for every name the apiserver admits.

An InferenceBackend's name is a DNS-1123 subdomain (up to 253 characters, dots allowed, may start with a digit:
``llama.chat``, ``1abc``, ``qwen2.5-7b-instruct``). Its children need stricter names:

- a Service name is a DNS-1035 label (``[a-z]([-a-z0-9]*[a-z0-9])?``, at most 63 characters);
- a label value is at most 63 characters of ``[A-Za-z0-9._-]``, starting and ending with a letter or digit;
- a Deployment's ReplicaSets are named ``<deployment>-<pod-template-hash>`` (up to 10 characters), which must
  still be a DNS-1123 subdomain: hence :data:`MAX_NAME`, the length the CRD admits.

A name that is already valid is kept as it is; any other is made valid by replacing what is not allowed,
truncating and appending a short hash of the original name, so the result is deterministic and two different
names never map to one (up to the hash: 8 hex digits, 32 bits). Pure; no imports beyond the standard library.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME = 242
"""Longest InferenceBackend name: 253 (DNS-1123 subdomain) minus "-" and the 10-character pod-template-hash of the
ReplicaSet names the Deployment controller derives from the Deployment's (apps/v1 ReplicaSet names are subdomains)."""
MAX_LABEL = 63
HASH_LEN = 8
DNS1123_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_SERVICE_PREFIX = "ib-"
"""Put before a name that does not start with a letter (``1abc`` -> ``ib-1abc-<hash>``)."""


def short_hash(text: str) -> str:
    """The first 8 hex digits of sha256(text)."""
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LEN]


def _with_hash(base: str, original: str, max_length: int, trim: str) -> str:
    base = base[: max_length - HASH_LEN - 1].rstrip(trim)
    return f"{base}-{short_hash(original)}" if base else short_hash(original)


def dns1035_label(name: str, max_length: int = MAX_LABEL) -> str:
    """``name`` if it is a DNS-1035 label of at most ``max_length`` characters, else a derived one."""
    if len(name) <= max_length and re.fullmatch(DNS1035_LABEL, name):
        return name
    base = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    if not base[:1].isalpha():
        base = _SERVICE_PREFIX + base
    return _with_hash(base, name, max_length, "-")


def label_value(value: str) -> str:
    """``value`` if it is a valid label value, else a derived one (truncated, invalid characters replaced)."""
    if len(value) <= MAX_LABEL and re.fullmatch(LABEL_VALUE, value):
        return value
    base = re.sub(r"[^-A-Za-z0-9_.]+", "-", value).strip("-_.")
    return _with_hash(base, value, MAX_LABEL, "-_.")


def service_name(name: str) -> str:
    """The Service of the InferenceBackend ``name`` (DNS-1035 label)."""
    return dns1035_label(name)


def endpoint(name: str, namespace: str) -> str:
    """In-cluster URL of the OpenAI-compatible API of the InferenceBackend ``name``: its Service's DNS name."""
    return f"http://{service_name(name)}.{namespace}.svc:8000"
