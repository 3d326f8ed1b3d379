"""Where the server is and which token to send: flags, then the environment, then a file."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml

URL_VARIABLE = "HAMIADMIN_URL"
TOKEN_VARIABLE = "HAMIADMIN_TOKEN"
DEFAULT_URL = "http://127.0.0.1:8000"


class ConfigError(Exception):
    """The configuration cannot be used; the message says how to fix it."""


def default_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "hamiadmin" / "config.yaml"


@dataclass(frozen=True)
class Settings:
    url: str
    token: str


def _read_file(path: Path, named: bool) -> dict:
    """The file's `url` and `token`; a missing default file is no error, a missing named one is."""
    if not path.exists():
        if named:
            raise ConfigError(f"config file {path} does not exist")
        return {}
    try:
        read = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if read is None:
        return {}
    if not isinstance(read, dict):
        raise ConfigError(f"config file {path}: must be a mapping with url and token")
    for key in ("url", "token"):
        if key in read and not isinstance(read[key], str):
            raise ConfigError(f"config file {path}: {key} must be a string")
    return read


def resolve(url: str | None, token: str | None, config: str | None) -> Settings:
    """Each of url and token from the flag, else the environment, else the config file
    (`--config FILE` or ~/.config/hamiadmin/config.yaml); the url defaults to localhost."""
    path = Path(config).expanduser() if config else default_config_path()
    stored = _read_file(path, named=config is not None)
    url = url or os.environ.get(URL_VARIABLE) or stored.get("url") or DEFAULT_URL
    token = token or os.environ.get(TOKEN_VARIABLE) or stored.get("token")
    if not token:
        raise ConfigError(
            f"no API token: set {TOKEN_VARIABLE}, pass --token, or put `token: <key>` in {path} "
            "(an admin makes one with `manage.py apitoken USER --role viewer`)"
        )
    return Settings(url=url.rstrip("/"), token=token)
