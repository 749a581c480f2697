"""Bearer tokens and their scopes; the rule that a non-loopback bind needs a token.

Each token names a scope: ``--token alice=SECRET`` lets the holder of ``SECRET`` read and write
the documents and answers of scope ``alice`` only (a bare ``--token SECRET`` is the unscoped
data). Without any token the server is open, and only on a loopback address; it then answers
requests addressed to this machine from this machine's pages only (:func:`check_local`), so a
web page elsewhere cannot use it through the user's browser.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .errors import APIError

__all__ = ["Tokens", "parse_tokens", "read_tokens_file", "is_loopback", "check_bind", "check_local",
           "BindError"]


class BindError(ValueError):
    """The server would listen beyond this machine without a token."""


@dataclass(frozen=True)
class Tokens:
    """Secret -> scope (None: the unscoped data). Empty: no authentication."""

    scopes: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def required(self) -> bool:
        return bool(self.scopes)

    def scope_of(self, authorization: str | None) -> str | None:
        """The scope of the request's ``Authorization: Bearer ...`` header.

        :raises APIError: 401 when a token is required and the header is missing or wrong."""
        if not self.required:
            return None
        if not authorization:
            raise APIError(401, "You didn't provide an API key. Send it in the Authorization header "
                           "(Authorization: Bearer YOUR_KEY).", code="invalid_api_key")
        kind, _, secret = authorization.partition(" ")
        secret = secret.strip()
        found: tuple[bool, str | None] = (False, None)
        for known, scope in self.scopes.items():  # every comparison constant-time, none skipped
            if hmac.compare_digest(known.encode(), secret.encode()) and kind.lower() == "bearer":
                found = (True, scope)
        if not found[0]:
            raise APIError(401, "Incorrect API key provided.", code="invalid_api_key")
        return found[1]


def parse_tokens(specs: Iterable[str]) -> dict[str, str | None]:
    """``NAME=SECRET`` (scope NAME) or ``SECRET`` (unscoped) -> {secret: scope}.

    :raises ValueError: an empty secret or name, or one secret given twice."""
    out: dict[str, str | None] = {}
    for spec in specs:
        name, sep, secret = spec.partition("=")
        scope: str | None = name.strip() if sep else None
        secret = (secret if sep else name).strip()
        if not secret or (sep and not scope):
            raise ValueError(f"token {spec!r}: expected NAME=SECRET or SECRET, both non-empty")
        if secret in out:
            raise ValueError("the same secret is given twice; each token must be distinct")
        out[secret] = scope
    return out


def read_tokens_file(path: Path) -> list[str]:
    """Token specs of a file: one ``NAME=SECRET`` a line; blank lines and ``#`` comments skipped."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [s.strip() for s in lines if s.strip() and not s.strip().startswith("#")]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tokens: Tokens) -> None:
    """:raises BindError: ``host`` is not a loopback address and no token is configured."""
    if not is_loopback(host) and not tokens.required:
        raise BindError(f"refusing to listen on {host!r} without a token: anyone who can reach it "
                        "could read your documents; give --token NAME=SECRET (or --tokens-file), "
                        "or bind to 127.0.0.1")


def _loopback_url(url: str) -> bool:
    """Whether ``url`` (``//host:port`` or ``scheme://host:port``) names this machine."""
    try:
        host = urlsplit(url).hostname
    except ValueError:  # a malformed address (an unclosed IPv6 bracket, a bad port)
        return False
    return host is not None and is_loopback(host)


def check_local(host: str | None, origin: str | None) -> None:
    """Refuse what a web page elsewhere could send an open server through the user's browser:
    a cross-site POST (``Content-Type: text/plain`` needs no CORS preflight, so it reaches the
    server; its ``Origin`` names the other site, or is ``null``), and DNS rebinding (a site's own
    name resolving to 127.0.0.1: same-origin for the browser, so it could read the answers; its
    ``Host`` is that name). Clients that send no ``Origin`` (the OpenAI SDKs, curl) are served.

    :raises APIError: 403 ``forbidden_origin``."""
    if host is not None and not _loopback_url(f"//{host}"):
        raise APIError(403, f"this server has no token and answers requests to this machine only, "
                       f"not to {host!r}; give it a token to serve other names",
                       type_="permission_error", code="forbidden_origin")
    if origin is not None and not (origin.startswith(("http://", "https://")) and _loopback_url(origin)):
        raise APIError(403, f"this server has no token and answers pages of this machine only, not "
                       f"of {origin!r}", type_="permission_error", code="forbidden_origin")
