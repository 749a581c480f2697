"""``percache serve`` refuses to listen beyond loopback without a token, before loading anything."""

from __future__ import annotations

import pytest

from percache_plugin.cli import main
from percache_plugin.server.auth import BindError, Tokens, check_bind, parse_tokens

pytest.importorskip("uvicorn")


def test_a_public_bind_without_a_token_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--host", "0.0.0.0", "--model", "tiny:llama"]) == 2
    err = capsys.readouterr()
    assert "refusing to listen on '0.0.0.0' without a token" in err.err
    assert "loading" not in err.out


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_loopback_needs_no_token(host: str) -> None:
    check_bind(host, Tokens())


def test_a_token_allows_a_public_bind() -> None:
    check_bind("0.0.0.0", Tokens(parse_tokens(["alice=s1"])))
    with pytest.raises(BindError):
        check_bind("192.168.1.5", Tokens())


@pytest.mark.parametrize("specs", [["alice="], ["=s1"], ["a=s1", "b=s1"]])
def test_bad_token_specs_are_refused(specs: list[str]) -> None:
    with pytest.raises(ValueError):
        parse_tokens(specs)
