"""Where the client finds its server and token: arguments beat ``RESPOOLS_*`` variables, which beat the
config file (TOML or YAML), which beats the default of a local server."""

from __future__ import annotations

from pathlib import Path

import pytest

from respools.client import Client, ConfigError
from respools.client.config import DEFAULT_URL, load_config


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_defaults_point_at_a_local_server_without_a_token() -> None:
    config = load_config(environ={})
    assert (config.url, config.token, config.source) == (DEFAULT_URL, None, "default")


def test_arguments_beat_environment_which_beats_the_file(tmp_path: Path) -> None:
    file = write(tmp_path / "c.toml", 'url = "http://file:1"\ntoken = "file-token"\ntimeout = 3\n')
    env = {"RESPOOLS_URL": "http://env:2/", "RESPOOLS_TOKEN": "env-token", "RESPOOLS_CONFIG": str(file)}

    from_file = load_config(environ={"RESPOOLS_CONFIG": str(file)})
    assert (from_file.url, from_file.token, from_file.timeout) == ("http://file:1", "file-token", 3.0)

    from_env = load_config(environ=env)
    assert (from_env.url, from_env.token, from_env.source) == ("http://env:2", "env-token", "RESPOOLS_URL")
    assert from_env.timeout == 3.0  # not in the environment: the file's

    from_args = load_config("http://arg:3", "arg-token", 7, environ=env)
    assert (from_args.url, from_args.token, from_args.timeout) == ("http://arg:3", "arg-token", 7.0)


def test_yaml_file_in_the_user_config_dir_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "config" / "respools" / "config.yaml", "url: https://pools.example.com\ntoken: yaml-token\n")
    client = Client()
    try:
        assert (client.url, client.config.token) == ("https://pools.example.com", "yaml-token")
    finally:
        client.close()


@pytest.mark.parametrize(
    ("text", "suffix", "message"),
    [
        ('url = "http://x"\ntoken = ', ".toml", "not valid TOML"),
        ("- a list\n", ".yaml", "must hold a mapping"),
        ('url = "ftp://x"\n', ".toml", "must start with http"),
        ("timeout = -1\n", ".toml", "timeout must be positive"),
        ("url = 3\n", ".toml", "url must be a non-empty string"),
        ("url: http://x\n", ".json", "use a .toml, .yaml or .yml file"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, suffix: str, message: str) -> None:
    file = write(tmp_path / f"c{suffix}", text)
    with pytest.raises(ConfigError, match=message):
        load_config(config_path=file, environ={})


def test_a_named_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="RESPOOLS_CONFIG names"):
        load_config(environ={"RESPOOLS_CONFIG": str(tmp_path / "missing.toml")})
    with pytest.raises(ConfigError, match="config_path names"):
        load_config(config_path=tmp_path / "missing.toml", environ={})
