"""Where the client finds its server and token: arguments, then ``RESPOOLS_URL`` / ``RESPOOLS_TOKEN``,
then a config file, then the defaults of a local ``respools server``.

The file is TOML or YAML (by suffix): ``RESPOOLS_CONFIG`` names it; otherwise the first of
``config.toml``, ``config.yaml``, ``config.yml`` in the user config directory (``~/.config/respools`` on
Linux). It is a flat mapping; the client reads ``url``, ``token`` and ``timeout`` and leaves other keys to
the tools that share the file (the CLI). Precedence follows the twelve-factor habit of every SDK in the
field: what the caller says beats the environment, which beats the file, so one shell variable can
redirect a script without editing anything.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import yaml

from respools.client.errors import ConfigError

URL_ENV = "RESPOOLS_URL"
TOKEN_ENV = "RESPOOLS_TOKEN"
TIMEOUT_ENV = "RESPOOLS_TIMEOUT"
CONFIG_ENV = "RESPOOLS_CONFIG"
DEFAULT_URL = "http://127.0.0.1:8000"
"""Where ``respools server`` listens by default."""
DEFAULT_TIMEOUT_S = 10.0
FILE_NAMES = ("config.toml", "config.yaml", "config.yml")


@dataclass(frozen=True)
class ClientConfig:
    url: str
    """The server's URL, or several replicas' URLs separated by commas (the client fails over between
    them); as given, for messages."""
    token: str | None
    timeout: float
    source: str
    """Where the URL came from (``argument``, ``RESPOOLS_URL``, a file path or ``default``), for messages."""

    @property
    def urls(self) -> tuple[str, ...]:
        """Each replica's URL, in the order given: the client starts with the first."""
        return split_urls(self.url)


def split_urls(value: str) -> tuple[str, ...]:
    """``http://a:8000, http://b:8000/`` → ``("http://a:8000", "http://b:8000")``."""
    return tuple(part.strip().rstrip("/") for part in value.split(",") if part.strip())


def default_config_dir() -> Path:
    return Path(platformdirs.user_config_dir("respools", appauthor=False))


def find_config_file(config_path: str | os.PathLike[str] | None, environ: Mapping[str, str]) -> Path | None:
    """The file to read: the one named (which must exist), else the first default that exists."""
    named = config_path if config_path is not None else environ.get(CONFIG_ENV) or None
    if named is not None:
        path = Path(named).expanduser()
        if not path.is_file():
            origin = "config_path" if config_path is not None else CONFIG_ENV
            raise ConfigError(f"{origin} names {str(path)!r}, which is not a file")
        return path
    for name in FILE_NAMES:
        candidate = default_config_dir() / name
        if candidate.is_file():
            return candidate
    return None


def read_config_file(path: Path) -> dict[str, Any]:
    """The file's mapping; a syntax error or a non-mapping names the file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc
    try:
        if path.suffix == ".toml":
            data: Any = tomllib.loads(text)
        elif path.suffix in {".yaml", ".yml"}:
            data = yaml.safe_load(text) or {}
        else:
            raise ConfigError(f"config file {path}: use a .toml, .yaml or .yml file")
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"config file {path} is not valid {path.suffix.lstrip('.').upper()}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping with url and token")
    return data


def _string(value: Any, key: str, origin: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{origin}: {key} must be a non-empty string")
    return value.strip()


def _timeout(value: Any, origin: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{origin}: timeout must be a number of seconds, got {value!r}") from None
    if not number > 0:
        raise ConfigError(f"{origin}: timeout must be positive, got {value!r}")
    return number


def load_config(
    url: str | None = None,
    token: str | None = None,
    timeout: float | None = None,
    config_path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> ClientConfig:
    """Resolve the client's settings (see the module docstring for the order)."""
    env = os.environ if environ is None else environ
    path = find_config_file(config_path, env)
    file = read_config_file(path) if path is not None else {}
    origin = str(path) if path is not None else ""

    if url is not None:
        resolved_url, source = _string(url, "url", "argument"), "argument"
    elif env.get(URL_ENV):
        resolved_url, source = _string(env[URL_ENV], "url", URL_ENV), URL_ENV
    elif file.get("url") is not None:
        resolved_url, source = _string(file["url"], "url", origin), origin
    else:
        resolved_url, source = DEFAULT_URL, "default"
    urls = split_urls(resolved_url)
    if not urls:
        raise ConfigError(f"{source}: url is empty; give the server's URL, or several replicas' separated by commas")
    for one in urls:
        if not one.startswith(("http://", "https://")):
            raise ConfigError(
                f"{source}: each url must start with http:// or https://, got {one!r} "
                "(several replicas' URLs are separated by commas)"
            )

    if token is not None:
        resolved_token: str | None = _string(token, "token", "argument")
    elif env.get(TOKEN_ENV):
        resolved_token = _string(env[TOKEN_ENV], "token", TOKEN_ENV)
    elif file.get("token") is not None:
        resolved_token = _string(file["token"], "token", origin)
    else:
        resolved_token = None

    if timeout is not None:
        resolved_timeout = _timeout(timeout, "argument")
    elif env.get(TIMEOUT_ENV):
        resolved_timeout = _timeout(env[TIMEOUT_ENV], TIMEOUT_ENV)
    elif file.get("timeout") is not None:
        resolved_timeout = _timeout(file["timeout"], origin)
    else:
        resolved_timeout = DEFAULT_TIMEOUT_S

    return ClientConfig(",".join(urls), resolved_token, resolved_timeout, source)
