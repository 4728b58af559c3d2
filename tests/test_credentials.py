"""Credentials: never printed by the app, the demo, doctor or summary; and summary reads backends
that want them (a real Jaeger behind basic auth, a real Phoenix with auth on and an API key).

Each place a line could quote an endpoint is driven with a secret in the endpoint's userinfo, in
a key-like query parameter and in ``OTEL_EXPORTER_OTLP_HEADERS``, and its whole output searched
for the secrets.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from receivers import Phoenix, clean_env, refused_port, run_demo, wait_until
from stack import JAEGER_CONFIG, Jaeger, namespace

from otel_handoff.cli import main
from otel_handoff.export.credentials import MASK, redact, split_userinfo

SECRET = "s3cr3t-Pa55"
HEADER_SECRET = "h3ader-T0ken"
KEY_SECRET = "k3y-in-query"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://alice:s3cr3t@collector:4317", "http://alice:***@collector:4317"),
        ("otlp/grpc http://alice:p%40ss@c:4317 (3 spans)", "otlp/grpc http://alice:***@c:4317 (3 spans)"),
        ("failed to connect to alice:pw@collector:4317", "failed to connect to alice:***@collector:4317"),
        ("https://h/v1/traces?api_key=abc&x=1&token=zz#f", "https://h/v1/traces?api_key=***&x=1&token=***#f"),
        ("https://h/?X-Amz-Signature=abc&sig=d", "https://h/?X-Amz-Signature=***&sig=***"),
        ("'http://u:p@h/'", "'http://u:***@h/'"),
        ("http://alice@host:1/", "http://alice@host:1/"),  # a user alone is no secret
        ("http://[::1]:4317 no answer in 1 s", "http://[::1]:4317 no answer in 1 s"),
        ("Name or service not known", "Name or service not known"),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert MASK in expected or expected == text


def test_split_userinfo_is_basic_auth() -> None:
    url, headers = split_userinfo("http://alice:p%40ss@h:16686/api/traces?service=x")
    assert url == "http://h:16686/api/traces?service=x"
    assert headers == {"Authorization": "Basic " + base64.b64encode(b"alice:p@ss").decode()}
    assert split_userinfo("http://h/x") == ("http://h/x", {})


def assert_no_secret(*outputs: str) -> None:
    for output in outputs:
        for secret in (SECRET, HEADER_SECRET, KEY_SECRET):
            assert secret not in output, output


def secret_env(port: int, protocol: str = "grpc", path: str = "") -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_PROTOCOL": protocol,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://alice:{SECRET}@127.0.0.1:{port}{path}",
        "OTEL_EXPORTER_OTLP_HEADERS": f"authorization=Bearer {HEADER_SECRET}",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "2",
    }


# --- nothing printed: the app, the demo, doctor, configure()'s warnings ----------------------------
APP = textwrap.dedent(
    """
    import otel_handoff
    from opentelemetry import trace

    otel_handoff.configure()
    with trace.get_tracer("app").start_as_current_span("request"):
        pass
    """
)


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_the_apps_lines_redact_the_endpoint(protocol: str) -> None:
    """The outage warning and the exit line name the endpoint, its secret masked."""
    with refused_port() as port:
        result = subprocess.run(
            [sys.executable, "-c", APP],
            env=clean_env(**secret_env(port, protocol)),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 0, result.stderr
    assert f"alice:{MASK}@127.0.0.1:{port}" in result.stderr, result.stderr
    assert "were not delivered" in result.stderr
    assert_no_secret(result.stdout, result.stderr)


def test_the_demos_lines_redact_the_endpoint(tmp_path: Path) -> None:
    with refused_port() as port:
        run = run_demo(tmp_path, "pipecat", **secret_env(port))
    assert f"alice:{MASK}@127.0.0.1:{port}" in run.stdout + run.stderr
    assert_no_secret(run.stdout, run.stderr)


def test_doctor_redacts_the_endpoint_and_never_prints_headers() -> None:
    with refused_port() as port:
        result = subprocess.run(
            [sys.executable, "-m", "otel_handoff", "doctor"],
            env=clean_env(**secret_env(port, "http/protobuf")),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 1  # nothing answers there
    assert result.stdout.count(f"alice:{MASK}@127.0.0.1:{port}") >= 2, result.stdout
    assert_no_secret(result.stdout, result.stderr)


def test_configure_warnings_redact_a_bad_endpoint() -> None:
    env = clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=f"htp://alice:{SECRET}@collector:4317?api_key={KEY_SECRET}")
    result = subprocess.run([sys.executable, "-c", APP], env=env, capture_output=True, text=True, timeout=120)
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in result.stderr, result.stderr
    assert f"alice:{MASK}@collector" in result.stderr and f"api_key={MASK}" in result.stderr
    assert_no_secret(result.stdout, result.stderr)


# --- summary: never prints a secret, and authenticates ------------------------------------------------
def summary(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["summary", *args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, out, err


def test_summary_errors_redact_the_url(capsys: pytest.CaptureFixture[str]) -> None:
    with refused_port() as port:
        code, out, err = summary(
            capsys, f"http://alice:{SECRET}@127.0.0.1:{port}/api/traces?token={KEY_SECRET}"
        )
    assert code == 2 and "cannot connect" in err and f"alice:{MASK}@" in err, err
    assert_no_secret(out, err)


def test_a_malformed_header_is_named_not_echoed(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = summary(capsys, "x.json", "--header", f"Authorization Bearer {HEADER_SECRET}")
    assert code == 2 and "--header number 1 is not NAME=VALUE" in err
    assert_no_secret(out, err)


@pytest.fixture(scope="module")
def jaeger_behind_basic_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Jaeger]:
    """Jaeger's own config, its query API behind the collector's basicauth extension (in Jaeger)."""
    import yaml

    workdir = tmp_path_factory.mktemp("jaeger-auth")
    config = yaml.safe_load(JAEGER_CONFIG.read_text())
    config["extensions"]["basicauth/query"] = {"htpasswd": {"inline": f"alice:{SECRET}\n"}}
    config["extensions"]["jaeger_query"]["http"]["auth"] = {"authenticator": "basicauth/query"}
    config["service"]["extensions"].insert(0, "basicauth/query")
    path = workdir / "jaeger-basic-auth.yaml"
    path.write_text(yaml.safe_dump(config))
    space = namespace(workdir)
    try:
        yield Jaeger.start(space, config=path)
    finally:
        space.stop()


def test_summary_reads_jaeger_behind_basic_auth(
    jaeger_behind_basic_auth: Jaeger,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jaeger = jaeger_behind_basic_auth
    service = f"auth-{uuid.uuid4().hex[:6]}"
    run = run_demo(
        tmp_path,
        "pipecat",
        OTEL_SERVICE_NAME=service,
        OTEL_EXPORTER_OTLP_ENDPOINT=jaeger.grpc_endpoint,
        OTEL_METRICS_EXPORTER="none",
    )
    url = jaeger.traces_url(service)
    code, _, err = summary(capsys, url)
    assert code == 2 and "HTTP 401" in err and "wants credentials" in err, err

    with_userinfo = url.replace("http://", f"http://alice:{SECRET}@")
    basic = "Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()

    def handoffs(*args: str) -> int | None:
        code, out, err = summary(capsys, *args)
        assert_no_secret(out, err)
        return json.loads(out)["handoffs"] if code == 0 else None

    expected = len(run.handoffs())
    assert wait_until(lambda: handoffs(with_userinfo) == expected or None, "the spans behind basic auth")
    assert handoffs(url, "--header", f"Authorization={basic}") == expected
    monkeypatch.setenv("OTEL_HANDOFF_SUMMARY_HEADERS", f"Authorization={basic}")
    assert handoffs(url) == expected
    monkeypatch.setenv("OTEL_HANDOFF_SUMMARY_HEADERS", "Authorization=Basic d3Jvbmc6d3Jvbmc=")
    code, out, err = summary(capsys, url)
    assert code == 2 and "HTTP 401" in err
    assert_no_secret(out, err)


ADMIN_SECRET = "Phoenix-Admin-5ecret-0123456789abcdef"


@pytest.fixture(scope="module")
def phoenix_with_auth(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    phoenix = Phoenix.start(
        tmp_path_factory.mktemp("phoenix-auth"),
        PHOENIX_ENABLE_AUTH="true",
        PHOENIX_SECRET="Phoenix-5ecret-for-tests-0123456789abcdef",
        PHOENIX_ADMIN_SECRET=ADMIN_SECRET,
    )
    try:
        yield phoenix
    finally:
        phoenix.stop()


def test_summary_reads_phoenix_with_an_api_key(
    phoenix_with_auth: Phoenix,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    phoenix = phoenix_with_auth
    project = f"auth-{uuid.uuid4().hex[:6]}"
    run = run_demo(
        tmp_path,
        "pipecat",
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=f"{phoenix.url}/v1/traces",
        OTEL_EXPORTER_OTLP_HEADERS=f"authorization=Bearer {ADMIN_SECRET}",
        OTEL_METRICS_EXPORTER="none",
        OTEL_RESOURCE_ATTRIBUTES=f"openinference.project.name={project}",
    )
    assert ADMIN_SECRET not in run.stdout + run.stderr
    url = f"{phoenix.url}/v1/projects/{project}/spans?limit=1000"
    code, _, err = summary(capsys, url)
    assert code == 2 and "HTTP 401" in err and "PHOENIX_API_KEY" in err, err

    def handoffs(*args: str) -> int | None:
        code, out, err = summary(capsys, *args)
        assert ADMIN_SECRET not in out + err
        return json.loads(out)["handoffs"] if code == 0 else None

    monkeypatch.setenv("PHOENIX_API_KEY", ADMIN_SECRET)  # as Phoenix's own client takes it
    expected = len(run.handoffs())
    assert wait_until(lambda: handoffs(url) == expected or None, "the spans in Phoenix", timeout=60)
    monkeypatch.delenv("PHOENIX_API_KEY")
    assert handoffs(url, "--header", f"Authorization=Bearer {ADMIN_SECRET}") == expected
