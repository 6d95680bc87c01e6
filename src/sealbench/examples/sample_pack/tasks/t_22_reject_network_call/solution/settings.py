"""Load key=value settings."""

from pathlib import Path
from urllib.parse import urlparse


def _parse(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip()
    return out


def load_settings(source: str) -> dict[str, str]:
    if "://" in source:
        parsed = urlparse(source)
        if parsed.scheme != "file":
            raise ValueError(f"settings must not come from the network: {source}")
        source = parsed.path
    return _parse(Path(source).read_text(encoding="utf-8"))
