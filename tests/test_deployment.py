"""The deployment: what ``kameleon serve`` refuses and warns about, API keys (``kameleon
hash-key``, the key file), one line for a bad setting; the Dockerfile, compose.yaml and
nginx.conf as files (no container engine is needed), with the image's environment and
command run here as a process; nginx and hadolint when they are installed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from kameleon.service.cli import is_loopback
from kameleon.service.config import Settings, hash_api_key
from tests.servers import KAMELEON, free_port, serving

pytestmark = pytest.mark.slow  # starts service processes and nginx

ROOT = Path(__file__).resolve().parents[1]
KEY = "a-test-key"
KEY_HASH = hash_api_key(KEY)


# --- running the CLI ---------------------------------------------------------------


def _env(**settings: str) -> dict[str, str]:
    """This process's environment without any KAMELEON_* variable, plus ``settings``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAMELEON_")}
    return {**env, **settings}


def _run(
    argv: list[str], env: Mapping[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [KAMELEON, *argv],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=dict(env),
        timeout=60,
    )


@contextmanager
def _serving(argv: list[str], env: Mapping[str, str], port: int, log: Path) -> Iterator[str]:
    """Run ``kameleon`` with exactly ``env`` (its output to ``log``) until health answers."""
    with serving([KAMELEON, *argv], env, port, log=log, inherit_environment=False) as url:
        yield url


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("kameleon: error: "), stderr
    return lines[0]


def _creates_sessions_only_with_the_key(url: str) -> None:
    body = {"algorithm": "rwm", "dim": 1}
    assert httpx.post(url + "/v1/sessions", json=body).status_code == 401
    wrong = httpx.post(url + "/v1/sessions", json=body, headers={"X-API-Key": "other"})
    assert wrong.status_code == 403
    right = httpx.post(url + "/v1/sessions", json=body, headers={"X-API-Key": KEY})
    assert right.status_code == 201


# --- open by default: refused, or allowed and said ------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "kameleon.example"])
def test_a_non_loopback_address_without_keys_is_refused_in_one_line(host: str) -> None:
    out = _run(["serve", "--host", host, "--port", str(free_port())], _env())
    assert out.returncode == 2
    line = _one_error_line(out.stderr)
    assert f"{host}:" in line and "no API key" in line
    # it says how to go on: keys, or the explicit permission
    assert "KAMELEON_API_KEY_HASHES" in line and "--allow-unauthenticated" in line
    assert out.stdout == ""


def test_the_environment_alone_is_refused_too() -> None:
    out = _run(["serve"], _env(KAMELEON_HOST="0.0.0.0", KAMELEON_PORT=str(free_port())))
    assert out.returncode == 2 and "no API key" in _one_error_line(out.stderr)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("", False),
        ("example.org", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("argv", "settings"),
    [
        (["--allow-unauthenticated"], {}),
        ([], {"KAMELEON_ALLOW_UNAUTHENTICATED": "true"}),
    ],
    ids=["flag", "environment"],
)
def test_allowed_open_it_starts_and_warns(
    argv: list[str], settings: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    args = ["serve", "--host", "0.0.0.0", "--port", str(port), *argv]
    with _serving(args, _env(**settings), port, tmp_path / "log") as url:
        created = httpx.post(url + "/v1/sessions", json={"algorithm": "rwm", "dim": 1})
        assert created.status_code == 201  # open, as asked
    warnings = [line for line in (tmp_path / "log").read_text().splitlines() if "warning" in line]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("kameleon: warning: ") and f"0.0.0.0:{port}" in warnings[0]


def test_allow_false_in_the_environment_still_refuses() -> None:
    env = _env(KAMELEON_ALLOW_UNAUTHENTICATED="false")
    out = _run(["serve", "--host", "0.0.0.0", "--port", str(free_port())], env)
    assert out.returncode == 2 and "no API key" in _one_error_line(out.stderr)


def test_with_keys_it_starts_without_a_warning(tmp_path: Path) -> None:
    port = free_port()
    env = _env(KAMELEON_API_KEY_HASHES=json.dumps([KEY_HASH]))
    with _serving(
        ["serve", "--host", "0.0.0.0", "--port", str(port)], env, port, tmp_path / "log"
    ) as url:
        _creates_sessions_only_with_the_key(url)
    log = (tmp_path / "log").read_text()
    assert "warning" not in log and "error" not in log


# --- API keys: hash-key and the key file ---------------------------------------------


def _key_and_hash(stdout: str) -> tuple[str, str]:
    lines = stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith("key: ") and lines[1].startswith("hash: ")
    return lines[0].removeprefix("key: ").strip(), lines[1].removeprefix("hash: ").strip()


def test_hash_key_makes_a_new_key_and_its_hash() -> None:
    first, second = _run(["hash-key"], _env()), _run(["hash-key"], _env())
    assert first.returncode == 0 and first.stderr == ""
    key, digest = _key_and_hash(first.stdout)
    assert digest == hashlib.sha256(key.encode()).hexdigest()
    assert len(key) >= 43 and re.fullmatch(r"[A-Za-z0-9_-]+", key)  # 256 bits, header-safe
    assert _key_and_hash(second.stdout)[0] != key


def test_hash_key_hashes_the_key_on_stdin() -> None:
    out = _run(["hash-key"], _env(), stdin="my key\n")
    assert out.returncode == 0
    assert _key_and_hash(out.stdout) == ("my key", hashlib.sha256(b"my key").hexdigest())


def test_hash_key_reads_one_key() -> None:
    out = _run(["hash-key"], _env(), stdin="one\ntwo\n")
    assert out.returncode == 2 and out.stdout == ""
    _one_error_line(out.stderr)


def test_a_printed_hash_lets_its_key_in(tmp_path: Path) -> None:
    made = _run(["hash-key"], _env(), stdin=KEY)
    digest = _key_and_hash(made.stdout)[1]
    port = free_port()
    env = _env(KAMELEON_API_KEY_HASHES=json.dumps([digest]))
    with _serving(["serve", "--port", str(port)], env, port, tmp_path / "log") as url:
        _creates_sessions_only_with_the_key(url)


def test_the_key_file_adds_its_hashes(tmp_path: Path) -> None:
    other = hash_api_key("another key")
    keys = tmp_path / "keys"
    keys.write_text(f"# the clients' keys\n\n{KEY_HASH}\n  {other}  \n{KEY_HASH}\n")
    settings = Settings(api_key_hashes=[other], api_key_hashes_file=keys)
    assert settings.api_key_hashes == [other, KEY_HASH]
    port = free_port()
    env = _env(KAMELEON_API_KEY_HASHES_FILE=str(keys))
    with _serving(
        ["serve", "--host", "0.0.0.0", "--port", str(port)], env, port, tmp_path / "log"
    ) as url:
        _creates_sessions_only_with_the_key(url)
    assert "warning" not in (tmp_path / "log").read_text()


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (f"{KEY_HASH}\nmy-secret-key\n", "line 2"),
        (f"{KEY_HASH.upper()}\n", "line 1"),
        ("# only a comment\n\n", "holds no key hash"),
    ],
)
def test_a_bad_key_file_is_one_line_that_names_it(content: str, says: str, tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(content)
    out = _run(["serve"], _env(KAMELEON_API_KEY_HASHES_FILE=str(keys)))
    assert out.returncode == 2
    line = _one_error_line(out.stderr)
    assert "KAMELEON_API_KEY_HASHES_FILE" in line and says in line and str(keys) in line
    assert "my-secret-key" not in line  # a key written where its hash belongs is not echoed


# --- a malformed setting: one line, no traceback --------------------------------------


@pytest.mark.parametrize(
    ("argv", "settings", "names"),
    [
        ([], {"KAMELEON_PORT": "70000"}, "KAMELEON_PORT"),
        (["--port", "70000"], {}, "--port"),
        ([], {"KAMELEON_PORT": "eighty"}, "KAMELEON_PORT"),
        ([], {"KAMELEON_WORKERS": "0"}, "KAMELEON_WORKERS"),
        ([], {"KAMELEON_STORE": "disk"}, "KAMELEON_STORE"),
        ([], {"KAMELEON_API_KEY_HASHES": "not json"}, "KAMELEON_API_KEY_HASHES"),
        ([], {"KAMELEON_API_KEY_HASHES": '["my-secret-key"]'}, "KAMELEON_API_KEY_HASHES"),
        ([], {"KAMELEON_API_KEY_HASHES": "[1]"}, "KAMELEON_API_KEY_HASHES"),
        ([], {"KAMELEON_API_KEY_HASHES_FILE": "/nonexistent/keys"}, "KAMELEON_API_KEY_HASHES_FILE"),
        ([], {"KAMELEON_ALLOW_UNAUTHENTICATED": "maybe"}, "KAMELEON_ALLOW_UNAUTHENTICATED"),
        ([], {"KAMELEON_MAX_BODY_BYTES": "12"}, "KAMELEON_MAX_BODY_BYTES"),
    ],
)
def test_a_malformed_setting_is_one_line_on_stderr(
    argv: list[str], settings: dict[str, str], names: str
) -> None:
    out = _run(["serve", *argv], _env(**settings))
    assert out.returncode == 2 and out.stdout == ""
    line = _one_error_line(out.stderr)
    assert "bad setting" in line and names in line
    assert "my-secret-key" not in line


# --- the Dockerfile -------------------------------------------------------------------


def _instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined."""
    joined = re.sub(r"\\\n", " ", path.read_text(encoding="utf-8"))
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


DOCKERFILE = _instructions(ROOT / "Dockerfile")


def _runtime_stage() -> list[tuple[str, str]]:
    last_from = max(i for i, (word, _) in enumerate(DOCKERFILE) if word == "FROM")
    return DOCKERFILE[last_from:]


def _image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in _runtime_stage():
        if word == "ENV":
            for pair in shlex.split(rest):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def _image_cmd() -> list[str]:
    (cmd,) = [rest for word, rest in _runtime_stage() if word == "CMD"]
    argv: list[str] = json.loads(cmd)
    return argv


#: An exact image reference: a tag with a full x.y.z version, or a digest.
EXACT_IMAGE = re.compile(r"^[\w./-]+(:[\w.-]*\d+\.\d+\.\d+[\w.-]*|@sha256:[0-9a-f]{64})$")


def test_the_base_images_are_pinned_exactly() -> None:
    images = [rest.split()[0] for word, rest in DOCKERFILE if word == "FROM"]
    assert len(images) >= 2
    for image in images:
        assert EXACT_IMAGE.match(image) and "latest" not in image, image


def test_the_image_runs_as_a_numeric_non_root_user() -> None:
    users = [rest for word, rest in _runtime_stage() if word == "USER"]
    assert users, "no USER"
    match = re.fullmatch(r"(\d+)(?::(\d+))?", users[-1])
    assert match, f"USER {users[-1]}: Kubernetes' runAsNonRoot needs a number"
    assert int(match.group(1)) != 0 and match.group(2) != "0"


def test_the_command_hard_codes_no_setting() -> None:
    assert _image_cmd() == ["kameleon", "serve"]
    env = _image_env()
    assert env["KAMELEON_HOST"] == "0.0.0.0" and env["KAMELEON_STORE"] == "redis"
    assert env["KAMELEON_PORT"] == "8000" and "KAMELEON_REDIS_URL" in env
    # keys required by default: running open is the operator's explicit choice
    assert env.get("KAMELEON_ALLOW_UNAUTHENTICATED", "false") == "false"
    assert "KAMELEON_API_KEY_HASHES" not in env


def test_every_pip_install_uses_the_constraints_file() -> None:
    copied = {
        parts[-1]: parts[-2]
        for word, rest in DOCKERFILE
        if word == "COPY" and not (parts := shlex.split(rest))[0].startswith("--")
    }
    installs = [rest for word, rest in DOCKERFILE if word == "RUN" and "pip install" in rest]
    assert len(installs) == 2  # the build backend, and the wheel
    for run in installs:
        match = re.search(r"--constraint[ =](\S+)", run)
        assert match, run
        target = match.group(1)
        # the file given is deploy/constraints.txt, copied to where pip reads it
        assert any(
            source == "deploy/constraints.txt" and target.endswith(dest.lstrip("./"))
            for dest, source in copied.items()
        ), (target, copied)
    assert "pip wheel" in " ".join(rest for word, rest in DOCKERFILE if word == "RUN")


def _constraints() -> dict[str, str]:
    pins: dict[str, str] = {}
    text = (ROOT / "deploy" / "constraints.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[\w.+]+", version), f"not an exact pin: {line}"
            pins[canonicalize_name(name)] = version
    return pins


def test_the_constraints_pin_every_dependency_within_the_projects_ranges() -> None:
    text = (ROOT / "deploy" / "constraints.txt").read_text(encoding="utf-8")
    assert text.startswith("#") and "pip freeze" in text  # says how it is regenerated
    pins = _constraints()
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    build = pyproject["build-system"]["requires"]
    for spec in [*pyproject["project"]["dependencies"], *build]:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not pinned"
        assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside {spec}"


def _image_process_env(**overrides: str) -> dict[str, str]:
    """The image's environment on this machine: its ENV, then ``docker run -e`` ones."""
    return _env(**{**_image_env(), "KAMELEON_PORT": str(free_port()), **overrides})


def test_the_images_command_refuses_to_start_without_keys() -> None:
    out = _run(_image_cmd()[1:], _image_process_env())
    assert out.returncode == 2 and "no API key" in _one_error_line(out.stderr)


def test_the_images_settings_come_from_the_environment(redis_url: str, tmp_path: Path) -> None:
    keys = {"KAMELEON_API_KEY_HASHES": json.dumps([KEY_HASH])}
    env = _image_process_env(**keys, KAMELEON_REDIS_URL=redis_url)
    port = int(env["KAMELEON_PORT"])
    with _serving(_image_cmd()[1:], env, port, tmp_path / "redis.log") as url:
        assert httpx.get(url + "/v1/health").json()["store"] == "redis"
    # `docker run -e KAMELEON_STORE=memory` is heard: no flag in the command beats it
    env = _image_process_env(**keys, KAMELEON_STORE="memory")
    port = int(env["KAMELEON_PORT"])
    with _serving(_image_cmd()[1:], env, port, tmp_path / "memory.log") as url:
        assert httpx.get(url + "/v1/health").json()["store"] == "memory"
        _creates_sessions_only_with_the_key(url)


def test_the_build_context_keeps_what_the_dockerfile_copies() -> None:
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    for word, rest in DOCKERFILE:
        if word == "COPY" and not rest.startswith("--from"):
            for source in shlex.split(rest)[:-1]:
                top = source.split("/")[0]
                assert top not in ignored and (ROOT / source).exists(), source


def test_hadolint_passes() -> None:
    found = Path(sys.executable).with_name("hadolint")
    hadolint = str(found) if found.exists() else shutil.which("hadolint")
    if hadolint is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("hadolint is not installed (the test extra brings it)")
        pytest.skip("hadolint is not installed (pip install -e '.[test]' brings it)")
    out = subprocess.run(
        [hadolint, "--no-color", "Dockerfile"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stdout + out.stderr


# --- compose and nginx ----------------------------------------------------------------

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
NGINX_CONF = (ROOT / "deploy" / "nginx.conf").read_text(encoding="utf-8")


def _interpolate(value: str, env: Mapping[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR-default}``."""

    def one(match: re.Match[str]) -> str:
        name, op, default = match.group(1), match.group(2), match.group(3) or ""
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        return env.get(name, "")

    return re.sub(r"\$\{(\w+)(?:(:?-)([^}]*))?\}", one, value)


def _published() -> list[tuple[str, str]]:
    return [
        (name, port)
        for name, service in COMPOSE["services"].items()
        for port in service.get("ports", [])
    ]


def test_compose_publishes_one_port_on_loopback_by_default() -> None:
    ((service, port),) = _published()
    assert service == "nginx"
    host_ip, host_port, container_port = _interpolate(port, {}).rsplit(":", 2)
    assert host_ip == "127.0.0.1" and host_port == "8000" and container_port == "8000"
    # beyond loopback only when asked
    asked = _interpolate(port, {"KAMELEON_PUBLISH": "0.0.0.0:80"})
    assert asked == "0.0.0.0:80:8000"


def test_compose_puts_nginx_in_front_of_the_replicas() -> None:
    services = COMPOSE["services"]
    nginx, kameleon = services["nginx"], services["kameleon"]
    assert EXACT_IMAGE.match(nginx["image"]) and nginx["image"].startswith("nginx:")
    assert EXACT_IMAGE.match(services["redis"]["image"])
    mounts = {m.split(":")[0]: m.split(":")[1] for m in nginx["volumes"]}
    assert mounts["./deploy/nginx.conf"] == "/etc/nginx/nginx.conf"
    assert "kameleon" in nginx["depends_on"]
    assert "ports" not in kameleon and kameleon["deploy"]["replicas"] >= 2
    # the upstream is the service's name and the image's port
    assert f"http://kameleon:{_image_env()['KAMELEON_PORT']}" in NGINX_CONF


def test_compose_takes_keys_from_the_environment_and_requires_them() -> None:
    env = COMPOSE["services"]["kameleon"]["environment"]
    assert _interpolate(env["KAMELEON_API_KEY_HASHES"], {}) == ""
    given = json.dumps([KEY_HASH])
    assert _interpolate(env["KAMELEON_API_KEY_HASHES"], {"KAMELEON_API_KEY_HASHES": given}) == given
    assert _interpolate(env["KAMELEON_ALLOW_UNAUTHENTICATED"], {}) == "false"


def _directive(name: str) -> str:
    match = re.search(rf"^\s*{name}\s+([^;]+);", NGINX_CONF, re.M)
    assert match, name
    return match.group(1).strip()


def _seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(ms|s|m)?", value)
    assert match, value
    return float(match.group(1)) * {"ms": 0.001, "s": 1, "m": 60, None: 1}[match.group(2)]


def test_nginx_fits_the_service() -> None:
    size = _directive("client_max_body_size")
    units = {"k": 1024, "m": 1024**2, "g": 1024**3}
    limit = int(size[:-1]) * units[size[-1].lower()] if size[-1].isalpha() else int(size)
    assert limit == Settings().max_body_bytes
    # an ask that waits 60 s for a proposal (a long poll) must not be cut off
    for name in ("proxy_read_timeout", "proxy_send_timeout"):
        assert _seconds(_directive(name)) > 60, name
    # Docker's DNS, re-asked, so that scaled replicas are found
    resolver = _directive("resolver")
    assert resolver.startswith("127.0.0.11") and "valid=" in resolver
    assert _directive("listen") == "8000"


def _nginx() -> str:
    nginx = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
    if nginx is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("nginx is not installed (.ci/run installs it)")
        pytest.skip("nginx is not installed")
    return nginx


def _local_nginx_conf(tmp_path: Path, text: str) -> Path:
    """``text`` with its temporary files under ``tmp_path`` (they are compiled-in paths)."""
    temp = "".join(
        f"    {kind}_temp_path {tmp_path / kind};\n"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    conf = tmp_path / "nginx.conf"
    conf.write_text(text.replace("http {\n", "http {\n" + temp, 1))
    return conf


def test_nginx_accepts_the_configuration(tmp_path: Path) -> None:
    nginx = _nginx()
    conf = _local_nginx_conf(tmp_path, NGINX_CONF)
    out = subprocess.run(
        [nginx, "-t", "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr


def test_nginx_proxies_to_the_service(tmp_path: Path) -> None:
    """The configuration, with the replica and listening address of this machine."""
    nginx = _nginx()
    port, front = free_port(), free_port()
    text = NGINX_CONF.replace("http://kameleon:8000", f"http://127.0.0.1:{port}")
    text = text.replace("listen 8000;", f"listen 127.0.0.1:{front};")
    conf = _local_nginx_conf(tmp_path, text)
    argv = [nginx, "-p", str(tmp_path), "-c", str(conf), "-e", "stderr"]
    argv += ["-g", f"daemon off; pid {tmp_path / 'nginx.pid'};"]
    env = _env(KAMELEON_API_KEY_HASHES=json.dumps([KEY_HASH]))
    with _serving(["serve", "--port", str(port)], env, port, tmp_path / "kameleon.log"):
        proxy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{front}"
            deadline = time.monotonic() + 20
            while True:
                try:
                    if httpx.get(url + "/v1/health", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "nginx did not answer"
                time.sleep(0.1)
            _creates_sessions_only_with_the_key(url)
            too_big = httpx.post(
                url + "/v1/sessions",
                content=b" " * (Settings().max_body_bytes + 1),
                headers={"X-API-Key": KEY, "Content-Type": "application/json"},
            )
            assert too_big.status_code == 413
        finally:
            proxy.terminate()
            proxy.wait(timeout=10)
