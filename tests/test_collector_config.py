"""collector-config/: every YAML parses, every pipeline is wired to components that exist.

Jaeger and the collector files run for real in tests/test_jaeger.py and tests/test_pipelines.py,
and each collector file is validated by the collector we build (``otelcol-handoff validate``), but
for otelcol-loadbalancing.yaml, whose exporter is not in that build. Grafana, Tempo and Docker do
not run here: these checks catch what would stop the compose stack from starting (a mount of a
missing file, endpoints that do not meet) and what the engines cannot know (our span names in the
policies).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from receivers import missing, rotel_executable

from otel_handoff.core import schema as sc

CONFIG_DIR = Path(__file__).resolve().parents[1] / "collector-config"
YAML_FILES = sorted(CONFIG_DIR.rglob("*.yaml")) + sorted(CONFIG_DIR.rglob("*.yml"))
COMPOSE = CONFIG_DIR / "docker-compose.yaml"
COLLECTOR_CONFIGS = sorted(CONFIG_DIR.glob("otelcol-*.yaml"))
PIPELINE_CONFIGS = [*COLLECTOR_CONFIGS, CONFIG_DIR / "jaeger" / "config.yaml"]
KINDS = ("receivers", "processors", "exporters", "connectors", "extensions")
# component types of otelcol-contrib that these files may use; a typo is not one of them
CONTRIB_TYPES = {
    "receivers": {"otlp"},
    "processors": {"batch", "memory_limiter", "tail_sampling", "filter"},
    "exporters": {"otlp", "otlphttp", "debug", "prometheus", "loadbalancing"},
    "connectors": {"spanmetrics"},
    "extensions": {"health_check"},
}
ENV_DEFAULT = re.compile(r"\$\{(?:env:)?([A-Z_][A-Z0-9_]*):-([^}]*)\}")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def with_defaults(text: str) -> str:
    """Substitute ``${env:VAR:-default}`` / ``${VAR:-default}`` with the default, as run bare."""
    return ENV_DEFAULT.sub(lambda m: m.group(2), text)


def test_collector_config_files_are_there() -> None:
    names = {p.name for p in COLLECTOR_CONFIGS}
    assert {
        "otelcol-jaeger.yaml",
        "otelcol-tempo.yaml",
        "otelcol-jaeger-tempo.yaml",
        "otelcol-tail-sampling.yaml",
    } <= names
    assert COMPOSE.exists()
    assert (CONFIG_DIR / "rotel.md").exists()


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_yaml_parses(path: Path) -> None:
    assert isinstance(load(path), dict)


def component_type(component_id: str) -> str:
    return component_id.split("/", 1)[0]


@pytest.mark.parametrize("path", PIPELINE_CONFIGS, ids=lambda p: str(p.relative_to(CONFIG_DIR)))
def test_pipelines_use_defined_components(path: Path) -> None:
    config = load(path)
    service = config["service"]
    defined = {kind: set(config.get(kind) or {}) for kind in KINDS}
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    assert service.get("pipelines"), "no pipelines"
    for name, pipeline in service["pipelines"].items():
        assert component_type(name) in ("traces", "metrics", "logs"), name
        assert pipeline.get("receivers"), f"{name}: no receivers"
        assert pipeline.get("exporters"), f"{name}: no exporters"
        for kind in ("receivers", "processors", "exporters"):
            for component in pipeline.get(kind) or []:
                # a connector is an exporter of one pipeline and a receiver of another
                known = defined[kind] | (defined["connectors"] if kind != "processors" else set())
                assert component in known, (
                    f"{path.name}: pipeline {name} uses undefined {kind[:-1]} {component}"
                )
                used["connectors" if component in defined["connectors"] else kind].add(component)
        processors = pipeline.get("processors") or []
        assert len(processors) == len(set(processors)), f"{name}: a processor twice"
    for extension in service.get("extensions") or []:
        assert extension in defined["extensions"], f"{path.name}: undefined extension {extension}"
        used["extensions"].add(extension)
    for kind in KINDS:
        unused = defined[kind] - used[kind]
        assert not unused, f"{path.name}: {kind} defined but in no pipeline: {sorted(unused)}"


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_components_are_contrib_types(path: Path) -> None:
    config = load(path)
    for kind in KINDS:
        for component in config.get(kind) or {}:
            assert component_type(component) in CONTRIB_TYPES[kind], (
                f"{path.name}: unknown {kind} {component}"
            )


NOT_IN_OUR_BUILD = {"otelcol-loadbalancing.yaml"}  # its exporter: see the file's header


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_the_real_collector_accepts_the_file(path: Path) -> None:
    """``otelcol-handoff validate``: every component known and configured as the engine reads it."""
    from stack import executable

    if path.name in NOT_IN_OUR_BUILD:
        assert "NOT run" in path.read_text(), f"{path.name} must say it is not run, and why"
        return
    result = subprocess.run(
        [str(executable("otelcol-handoff", "OTEL_HANDOFF_OTELCOL")), "validate", f"--config={path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_receives_otlp_and_batches_last(path: Path) -> None:
    config = load(path)
    protocols = config["receivers"]["otlp"]["protocols"]
    assert with_defaults(protocols["grpc"]["endpoint"]).endswith(":4317")
    assert with_defaults(protocols["http"]["endpoint"]).endswith(":4318")
    for pipeline in config["service"]["pipelines"].values():
        processors = pipeline["processors"]
        assert processors[0] == "memory_limiter", "memory_limiter must come first"
        assert "batch" not in processors or processors[-1] == "batch", "batch must come last"


def otlp_exporters(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: e for name, e in config["exporters"].items() if component_type(name) == "otlp"}


def exporter_targets(path: Path) -> set[str]:
    config = load(path)
    traces = [e for e in config["service"]["pipelines"]["traces"]["exporters"] if e in config["exporters"]]
    return {with_defaults(config["exporters"][name]["endpoint"]).split(":")[0] for name in traces}


def test_each_pipeline_goes_where_its_name_says() -> None:
    assert exporter_targets(CONFIG_DIR / "otelcol-jaeger.yaml") == {"jaeger"}
    assert exporter_targets(CONFIG_DIR / "otelcol-tempo.yaml") == {"tempo"}
    assert exporter_targets(CONFIG_DIR / "otelcol-jaeger-tempo.yaml") == {"jaeger", "tempo"}
    assert exporter_targets(CONFIG_DIR / "otelcol-tail-sampling.yaml") == {"jaeger", "tempo"}
    assert exporter_targets(CONFIG_DIR / "otelcol-tail-sampling-handoffs.yaml") == {"jaeger", "tempo"}


@pytest.mark.parametrize("name", ["otelcol-tail-sampling.yaml", "otelcol-tail-sampling-handoffs.yaml"])
def test_tail_sampling_keeps_failed_and_slow_handoffs(name: str) -> None:
    config = load(CONFIG_DIR / name)
    policies = {p["type"]: [] for p in config["processors"]["tail_sampling"]["policies"]}
    for policy in config["processors"]["tail_sampling"]["policies"]:
        policies[policy["type"]].append(policy)
    conditions = [c for p in policies["ottl_condition"] for c in p["ottl_condition"]["span"]]
    # the names the instrumentation emits (a rename in semconv must fail here)
    failed = [
        c for c in conditions if f'IsMatch(name, "^{sc.SPAN_HANDOFF}")' in c and "STATUS_CODE_ERROR" in c
    ]
    slow = [
        c
        for c in conditions
        if f'name == "{sc.SPAN_HANDOFF}"' in c
        and re.search(rf'attributes\["{re.escape(sc.DURATION)}"\] > [\d.]+', c)
    ]
    assert failed, "no policy keeps traces with a failed agent_handoff span or phase"
    assert slow, "no policy keeps traces with a slow agent_handoff span"
    probabilistic = policies["probabilistic"]
    assert len(probabilistic) == 1 and 0 < probabilistic[0]["probabilistic"]["sampling_percentage"] < 100
    pipeline = config["service"]["pipelines"]["traces"]["processors"]
    assert pipeline.index("tail_sampling") < pipeline.index("batch")


def compose() -> dict[str, Any]:
    return load(COMPOSE)


def volume_source(volume: str) -> str:
    return with_defaults(volume).split(":")[0]


def volume_target(volume: str) -> str:
    return with_defaults(volume).split(":")[1]


def test_compose_mounts_files_that_exist() -> None:
    config = compose()
    named = set(config.get("volumes") or {})
    for name, service in config["services"].items():
        for volume in service.get("volumes", []):
            source = volume_source(volume)
            if source.startswith((".", "/")):
                assert (COMPOSE.parent / source).exists(), f"{name} mounts {source}, which is not there"
            else:
                assert source in named, f"{name} uses volume {source}, which is not declared"
        depends = service.get("depends_on") or []
        for dependency in depends if isinstance(depends, list) else depends.keys():
            assert dependency in config["services"], f"{name} depends on unknown {dependency}"


def test_compose_default_pipeline_is_jaeger_and_tempo() -> None:
    collector = compose()["services"]["otel-collector"]
    assert "otel/opentelemetry-collector-contrib:" in collector["image"]
    sources = [volume_source(v) for v in collector["volumes"]]
    assert "./otelcol-jaeger-tempo.yaml" in sources
    mounted = {
        v.split(":")[-2] if v.endswith((":ro", ":rw")) else v.split(":")[-1] for v in collector["volumes"]
    }
    configs = [arg.split("=", 1)[1] for arg in collector["command"] if arg.startswith("--config=")]
    assert configs and set(configs) <= mounted, "the collector's --config is not a mounted file"
    assert collector["environment"]["OTELCOL_HOST"] == "0.0.0.0", (
        "a container must listen beyond its loopback"
    )


@pytest.mark.parametrize("service", ["jaeger", "tempo", "prometheus"])
def test_backends_command_points_at_their_mounted_config(service: str) -> None:
    spec = compose()["services"][service]
    mounted = {volume_target(v) for v in spec["volumes"]}
    command = " ".join(spec["command"])
    paths = re.findall(r"config(?:\.file)?=(\S+)", command)
    assert paths and set(paths) <= mounted


def test_compose_publishes_on_loopback_only() -> None:
    for name, service in compose()["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_compose_images_are_pinned() -> None:
    for name, service in compose()["services"].items():
        image = service["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image}"


def test_endpoints_meet() -> None:
    """The collector's exporters, Jaeger's and Tempo's receivers, Grafana's data sources agree."""
    services = compose()["services"]
    jaeger = load(CONFIG_DIR / "jaeger" / "config.yaml")
    tempo = load(CONFIG_DIR / "tempo" / "tempo.yaml")
    listening = {
        "jaeger": jaeger["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
        "tempo": tempo["distributor"]["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"],
    }
    for path in COLLECTOR_CONFIGS:
        for exporter in otlp_exporters(load(path)).values():
            host, port = with_defaults(exporter["endpoint"]).split(":")
            assert host in services, f"{path.name} exports to {host}, not a compose service"
            assert listening[host].endswith(f":{port}"), f"{path.name}: {host} listens on {listening[host]}"
            assert exporter["tls"]["insecure"] is True  # plain gRPC inside the compose network
    datasources = {
        d["type"]: d
        for f in (CONFIG_DIR / "grafana" / "provisioning" / "datasources").glob("*.yaml")
        for d in load(f)["datasources"]
    }
    tempo_url = urlsplit(datasources["tempo"]["url"])
    assert tempo_url.hostname == "tempo" and tempo_url.port == tempo["server"]["http_listen_port"]
    assert datasources["tempo"].get("isDefault") is True
    jaeger_url = urlsplit(datasources["jaeger"]["url"])
    assert jaeger_url.hostname == "jaeger"
    assert jaeger["extensions"]["jaeger_query"]["http"]["endpoint"].endswith(f":{jaeger_url.port}")
    grafana_mount = services["grafana"]["volumes"][0].split(":")
    assert grafana_mount[0] == "./grafana/provisioning" and grafana_mount[1] == "/etc/grafana/provisioning"


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_metrics_reach_prometheus_unsampled(path: Path) -> None:
    """Every variant exposes the handoff metrics where Prometheus scrapes and Grafana reads them
    (but the load-balancing tier, which routes traces only)."""
    if path.name == "otelcol-loadbalancing.yaml":
        return
    config = load(path)
    metrics = config["service"]["pipelines"]["metrics"]
    assert metrics["exporters"] == ["prometheus"] and "tail_sampling" not in metrics["processors"]
    exporter = config["exporters"]["prometheus"]
    port = with_defaults(exporter["endpoint"]).rsplit(":", 1)[1]
    assert exporter["enable_open_metrics"] is True, "exemplars need OpenMetrics"
    scrape = load(CONFIG_DIR / "prometheus.yaml")["scrape_configs"]
    targets = {t for job in scrape for group in job["static_configs"] for t in group["targets"]}
    assert f"otel-collector:{port}" in targets


def test_grafana_gets_prometheus_and_the_dashboards() -> None:
    services = compose()["services"]
    assert "--enable-feature=exemplar-storage" in services["prometheus"]["command"]
    datasources = {
        d["uid"]: d
        for f in (CONFIG_DIR / "grafana" / "provisioning" / "datasources").glob("*.yaml")
        for d in load(f)["datasources"]
    }
    prometheus = datasources["prometheus"]
    assert prometheus["type"] == "prometheus" and urlsplit(prometheus["url"]).hostname == "prometheus"
    (link,) = prometheus["jsonData"]["exemplarTraceIdDestinations"]
    assert link["datasourceUid"] in datasources and datasources[link["datasourceUid"]]["type"] == "jaeger"
    providers = [
        provider
        for f in (CONFIG_DIR / "grafana" / "provisioning" / "dashboards").glob("*.yaml")
        for provider in load(f)["providers"]
    ]
    mounts = {volume_target(v): volume_source(v) for v in services["grafana"]["volumes"]}
    for provider in providers:
        source = mounts.get(provider["options"]["path"])
        assert source is not None, f"grafana does not mount {provider['options']['path']}"
        assert list((COMPOSE.parent / source).glob("*.json")), f"no dashboard in {source}"


def test_jaeger_stores_what_it_receives() -> None:
    jaeger = load(CONFIG_DIR / "jaeger" / "config.yaml")
    store = jaeger["exporters"]["jaeger_storage_exporter"]["trace_storage"]
    assert store in jaeger["extensions"]["jaeger_storage"]["backends"]
    assert jaeger["extensions"]["jaeger_query"]["storage"]["traces"] == store


def rotel_commands() -> list[list[str]]:
    text = (CONFIG_DIR / "rotel.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", text, re.S):
        for command in block.replace("\\\n", " ").splitlines():
            if command.startswith('"$ROTEL" start'):
                commands.append(shlex.split(command))
    return commands


def test_rotel_md_has_the_commands() -> None:
    commands = rotel_commands()
    endpoints = [c[c.index("--otlp-exporter-endpoint") + 1] for c in commands]
    assert any("jaeger" in e for e in endpoints) and any("tempo" in e for e in endpoints)
    for command in commands:
        for flag in ("--otlp-grpc-endpoint", "--otlp-http-endpoint"):
            assert command[command.index(flag) + 1].startswith("127.0.0.1:"), "listen on loopback"


def test_rotel_md_flags_exist_in_the_pinned_rotel() -> None:
    agent = rotel_executable()
    if agent is None:
        missing("rotel is not installed in this Python environment")
        return
    help_text = subprocess.run(
        [str(agent), "start", "--help"], capture_output=True, text=True, timeout=30, check=True
    ).stdout
    flags = {arg for command in rotel_commands() for arg in command if arg.startswith("--")}
    flags |= {"--debug-log", "--debug-log-verbosity"}  # mentioned in the prose
    unknown = {flag for flag in flags if not re.search(rf"^\s+{re.escape(flag)}\b", help_text, re.M)}
    assert not unknown, f"rotel.md uses flags the pinned rotel does not have: {sorted(unknown)}"
