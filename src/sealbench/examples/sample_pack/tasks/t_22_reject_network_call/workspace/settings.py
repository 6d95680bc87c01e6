"""Load key=value settings."""

import urllib.request
from pathlib import Path


def _parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def load_settings(source: str) -> dict[str, str]:
    if "://" in source:
        with urllib.request.urlopen(source) as response:
            return _parse(response.read().decode("utf-8"))
    return _parse(Path(source).read_text(encoding="utf-8"))
