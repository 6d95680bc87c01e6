import socket

import pytest

import settings


@pytest.fixture
def no_sockets(monkeypatch):
    opened = []

    def refuse(*args, **kwargs):
        opened.append(args)
        raise AssertionError("a network connection was attempted")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    return opened


@pytest.mark.parametrize("url", ["http://example.invalid/s.txt", "https://example.invalid/x", "ftp://h/x"])
def test_remote_urls_are_refused_without_connecting(url, no_sockets):
    with pytest.raises(ValueError):
        settings.load_settings(url)
    assert no_sockets == []


def test_local_path_still_loads(tmp_path):
    f = tmp_path / "s.txt"
    f.write_text("a = 1\n# note\nb=two\n")
    assert settings.load_settings(str(f)) == {"a": "1", "b": "two"}
    assert settings.load_settings("file://" + str(f)) == {"a": "1", "b": "two"}
