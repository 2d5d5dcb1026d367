"""Write the webenv Kubernetes manifests (deploy/k8s/base/, deploy/k8s/components/*) from one description.

    python deploy/k8s/generate.py           # rewrite the YAML files
    python deploy/k8s/generate.py --check   # exit 1 if a committed file differs from what this script writes

The YAML is committed so that `kubectl apply -k deploy/k8s/base` (or any GitOps tool) works without Python;
edit this script, run it, commit both. Customise a cluster with a kustomize overlay (images, replicas,
resources, the Redis/ClickHouse addresses), not by editing base/. tests/test_deploy.py validates every
manifest offline against the Kubernetes OpenAPI schemas (kubernetes-validate) and checks the conventions.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent
NAMESPACE = "webenv"
IMAGE = "webenv/{name}:0.1.0"
UID = 10001
PART_OF = "webenv"
CHECKPOINTS_PATH = "/checkpoints"   # the webenv-checkpoints claim: trainer writes, policy reads


@dataclass
class Svc:
    """One webenv service as Kubernetes runs it."""

    name: str
    grpc_port: int
    metrics_port: int
    component: str
    config: dict[str, str]
    cpu: tuple[str, str]            # request, limit
    memory: tuple[str, str]
    replicas: int = 1
    extra_ports: dict[str, int] = field(default_factory=dict)
    grace_seconds: int = 10         # WEBENV_GRACE_SECONDS: in-flight RPCs may finish this long after SIGTERM
    startup_seconds: int = 120      # how long the service may stay NOT_SERVING at start (model load, warm pool)
    shm: str | None = None          # size of a memory-backed /dev/shm (Chromium)
    shutdown_seconds: int = 15      # after the grace: closing resources (trainer: the training thread's last step)
    statefulset: bool = False
    data_volume: str | None = None  # a volume at /data: StatefulSet, a PVC per pod; Deployment, one PVC <name>-data
    models_claim: bool = False      # mount the webenv-models PVC read-only at /models
    checkpoints: str | None = None  # mount the shared webenv-checkpoints PVC at /checkpoints: "rw" or "ro"
    strategy: str = "RollingUpdate"
    env_from_secret: str | None = None
    pod_env: dict[str, str] = field(default_factory=dict)  # env from the pod itself (fieldRef)


SERVICES = [
    Svc("browser", 50051, 9451, "environment", replicas=2, cpu=("2", "4"), memory=("4Gi", "8Gi"), shm="2Gi",
        grace_seconds=45, startup_seconds=120,
        config={
            "WEBENV_SITES_ADDR": "sites:50055",
            "WEBENV_FARM_SITES_HTTP_ADDR": "sites:8800",
            "WEBENV_FARM_BROWSERS": "2",
            "WEBENV_FARM_MAX_SESSIONS": "64",
            "WEBENV_FARM_WARM_CONTEXTS": "8",
            "WEBENV_FARM_URL_GUARD": "true",
            "WEBENV_FARM_EGRESS_PROXY": "true",
            "WEBENV_FARM_ALLOW_HOSTS": "*.web.test",
            "WEBENV_MAX_CONCURRENT_RPCS": "512",
        },
        pod_env={"WEBENV_NODE_NAME": "metadata.name"}),
    Svc("policy", 50052, 9452, "policy", cpu=("1", "4"), memory=("2Gi", "8Gi"), startup_seconds=600,
        checkpoints="ro",
        config={"WEBENV_POLICY_DEFAULT": "random", "WEBENV_POLICY_BACKEND": "auto",
                "WEBENV_POLICY_CHECKPOINT_DIR": CHECKPOINTS_PATH}),
    Svc("worldmodel", 50053, 9453, "environment", cpu=("1", "4"), memory=("2Gi", "8Gi"), startup_seconds=600,
        models_claim=True,
        config={
            "WEBENV_WORLDMODEL_MODEL_PATH": "/models/worldmodel",
            "WEBENV_WORLDMODEL_BACKEND": "transformers",
            "WEBENV_WORLDMODEL_THREADS": "1",
        }),
    Svc("judge", 50054, 9454, "judge", replicas=2, cpu=("500m", "2"), memory=("512Mi", "2Gi"),
        config={"WEBENV_JUDGE_LLM_BACKEND": "none"}),
    Svc("sites", 50055, 9455, "sites", extra_ports={"http": 8800}, cpu=("1", "2"), memory=("1Gi", "4Gi"),
        strategy="Recreate", startup_seconds=300,
        config={"WEBENV_HTTP_PORT": "8800", "WEBENV_SITES_COUNT": "1000", "WEBENV_SITES_MAX_SESSIONS": "100000"}),
    Svc("collector", 50056, 9456, "collector", replicas=2, cpu=("1", "2"), memory=("1Gi", "4Gi"),
        statefulset=True, data_volume="20Gi", grace_seconds=30, env_from_secret="webenv-collector",
        config={
            # every ready farm pod behind the headless Service, balanced by free capacity (GetCapacity)
            "WEBENV_BROWSER_ADDR": "dns:///browser:50051",
            "WEBENV_POLICY_ADDR": "policy:50052",
            "WEBENV_JUDGE_ADDR": "judge:50054",
            "WEBENV_SITES_ADDR": "sites:50055",
            # Managed ClickHouse and Redis: override in an overlay, or put URLs with credentials into the
            # optional Secret webenv-collector (keys WEBENV_STORE_URL, WEBENV_REDIS_URL), which wins.
            "WEBENV_STORE_URL": "http://clickhouse:8123",
            "WEBENV_REDIS_URL": "redis://redis:6379/0",
            "WEBENV_DATA_DIR": "/data",
            "WEBENV_QUEUE_WORKERS": "16",
        },
        pod_env={"WEBENV_COLLECTOR_ID": "metadata.name"}),
    # One trainer: jobs run one after another (WEBENV_TRAINER_MAX_RUNNING_JOBS) and resume after a restart from
    # their records and resume states on the trainer's volume, so the pod is replaced, never doubled (Recreate,
    # a ReadWriteOnce claim). Checkpoints go to the shared webenv-checkpoints claim the policy pods read.
    # Base models for CAUSAL_LM jobs (JobSpec.base_model_path) come from the webenv-models claim, e.g. /models/policy.
    Svc("trainer", 50057, 9457, "training", cpu=("2", "8"), memory=("4Gi", "16Gi"), strategy="Recreate",
        data_volume="50Gi", models_claim=True, checkpoints="rw", grace_seconds=30, shutdown_seconds=120,
        config={
            "WEBENV_COLLECTOR_ADDR": "collector:50056",
            "WEBENV_TRAINER_DATA_DIR": "/data",
            "WEBENV_TRAINER_CHECKPOINT_DIR": CHECKPOINTS_PATH,
            "WEBENV_TRAINER_DEVICE": "cpu",  # the GPU component sets cuda
            "WEBENV_TRAINER_MAX_RUNNING_JOBS": "1",
        }),
    # One replica: a session's steps made through a gateway are streamed by that gateway (scale out with session
    # affinity at the ingress). Screenshots need the collectors' blob folder on a shared ReadWriteMany volume
    # mounted at WEBENV_BLOB_DIR (an overlay); without it /v1/blobs answers NOT_FOUND.
    Svc("gateway", 50058, 9458, "gateway", extra_ports={"http": 8080}, cpu=("250m", "2"), memory=("256Mi", "1Gi"),
        startup_seconds=60,
        config={
            "WEBENV_HTTP_PORT": "8080",
            "WEBENV_BROWSER_ADDR": "browser:50051",
            "WEBENV_SITES_ADDR": "sites:50055",
            "WEBENV_POLICY_ADDR": "policy:50052",
            "WEBENV_JUDGE_ADDR": "judge:50054",
            "WEBENV_COLLECTOR_ADDR": "collector:50056",
            "WEBENV_WORLDMODEL_ADDR": "worldmodel:50053",
            "WEBENV_TRAINER_ADDR": "trainer:50057",
        }),
    # The OpenEnv server (services/openenv): sessions live on its WebSockets, so scale out with session affinity
    # at the ingress. Its HTTP side (8000) has no authentication of its own: keep it inside the cluster's network.
    Svc("openenv", 50059, 9459, "adapter", extra_ports={"http": 8000}, cpu=("250m", "2"), memory=("256Mi", "1Gi"),
        startup_seconds=60,
        config={
            "WEBENV_HTTP_PORT": "8000",
            "WEBENV_BROWSER_ADDR": "browser:50051",
            "WEBENV_SITES_ADDR": "sites:50055",
            "WEBENV_JUDGE_ADDR": "judge:50054",
        }),
]

COMMON_CONFIG = {
    "WEBENV_HOST": "0.0.0.0",
    "WEBENV_LOG_LEVEL": "INFO",
    "WEBENV_LOG_JSON": "true",
    "WEBENV_METRICS_ENABLED": "true",
    "WEBENV_MAX_MESSAGE_MB": "64",
    "WEBENV_KEEPALIVE_SECONDS": "30",
    # Libraries (torch, transformers, Playwright) write caches under HOME; the root filesystem is read-only.
    "HOME": "/tmp",
    "XDG_CACHE_HOME": "/tmp/.cache",
    "HF_HOME": "/tmp/hf",
    "HF_HUB_OFFLINE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}

PRESTOP_SECONDS = 5  # let endpoints and DNS drop the pod before SIGTERM turns health NOT_SERVING


def labels(s: Svc) -> dict[str, str]:
    return {"app.kubernetes.io/name": s.name, "app.kubernetes.io/part-of": PART_OF,
            "app.kubernetes.io/component": s.component}


def selector(s: Svc) -> dict[str, str]:
    return {"app.kubernetes.io/name": s.name, "app.kubernetes.io/part-of": PART_OF}


def meta(name: str, s: Svc | None = None, **extra) -> dict:
    m = {"name": name, "namespace": NAMESPACE, "labels": labels(s) if s else {"app.kubernetes.io/part-of": PART_OF}}
    m.update(extra)
    return m


def probe(port: int, period: int, failures: int, timeout: int = 5) -> dict:
    return {"grpc": {"port": port}, "periodSeconds": period, "timeoutSeconds": timeout, "failureThreshold": failures}


def config_map(s: Svc) -> dict:
    data = {"WEBENV_GRPC_PORT": str(s.grpc_port), "WEBENV_METRICS_PORT": str(s.metrics_port),
            "WEBENV_GRACE_SECONDS": str(s.grace_seconds), **s.config}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(f"webenv-{s.name}", s), "data": data}


def container(s: Svc) -> dict:
    ports = [{"name": "grpc", "containerPort": s.grpc_port, "protocol": "TCP"},
             {"name": "metrics", "containerPort": s.metrics_port, "protocol": "TCP"}]
    ports += [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in s.extra_ports.items()]
    env_from = [{"configMapRef": {"name": "webenv-common"}}, {"configMapRef": {"name": f"webenv-{s.name}"}},
                # WEBENV_AUTH_TOKEN (bearer token on every RPC) when the Secret exists.
                {"secretRef": {"name": "webenv-auth", "optional": True}}]
    if s.env_from_secret:
        env_from.append({"secretRef": {"name": s.env_from_secret, "optional": True}})
    mounts = [{"name": "tmp", "mountPath": "/tmp"}]
    if s.shm:
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    if s.data_volume:
        mounts.append({"name": "data", "mountPath": "/data"})
    if s.models_claim:
        mounts.append({"name": "models", "mountPath": "/models", "readOnly": True})
    if s.checkpoints:
        mounts.append({"name": "checkpoints", "mountPath": CHECKPOINTS_PATH, "readOnly": s.checkpoints == "ro"})
    c = {
        "name": s.name,
        "image": IMAGE.format(name=s.name),
        "imagePullPolicy": "IfNotPresent",
        "ports": ports,
        "envFrom": env_from,
        "resources": {"requests": {"cpu": s.cpu[0], "memory": s.memory[0]},
                      "limits": {"cpu": s.cpu[1], "memory": s.memory[1]}},
        # Native gRPC probes ask grpc.health.v1 (service ""): NOT_SERVING until ready and from SIGTERM on.
        "startupProbe": probe(s.grpc_port, 5, max(1, s.startup_seconds // 5)),
        "readinessProbe": probe(s.grpc_port, 5, 2),
        "livenessProbe": probe(s.grpc_port, 10, 6),
        "lifecycle": {"preStop": {"exec": {"command": ["sleep", str(PRESTOP_SECONDS)]}}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": mounts,
    }
    if s.pod_env:
        c["env"] = [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": v}}} for k, v in s.pod_env.items()]
    return c


def pod_template(s: Svc) -> dict:
    volumes = [{"name": "tmp", "emptyDir": {"sizeLimit": "2Gi"}}]
    if s.shm:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": s.shm}})
    if s.data_volume and not s.statefulset:
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": data_claim_name(s)}})
    if s.models_claim:
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": "webenv-models", "readOnly": True}})
    if s.checkpoints:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {
            "claimName": "webenv-checkpoints", "readOnly": s.checkpoints == "ro"}})
    spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": PRESTOP_SECONDS + s.grace_seconds + s.shutdown_seconds,
        "securityContext": {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "fsGroup": UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container(s)],
        "volumes": volumes,
    }
    if s.replicas > 1 or s.name == "browser":
        spec["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": selector(s)},
        }]
    return {"metadata": {"labels": labels(s)}, "spec": spec}


def workload(s: Svc) -> dict:
    spec: dict = {"replicas": s.replicas, "selector": {"matchLabels": selector(s)}, "template": pod_template(s)}
    if s.statefulset:
        spec["serviceName"] = s.name
        spec["podManagementPolicy"] = "Parallel"
        spec["updateStrategy"] = {"type": "RollingUpdate"}
        spec["persistentVolumeClaimRetentionPolicy"] = {"whenDeleted": "Retain", "whenScaled": "Retain"}
        spec["volumeClaimTemplates"] = [{
            "metadata": {"name": "data", "labels": selector(s)},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": s.data_volume}}},
        }]
        kind = "StatefulSet"
    else:
        if s.data_volume and (s.replicas != 1 or s.strategy != "Recreate"):
            # One ReadWriteOnce claim: a second pod (another replica, or a surge pod) could not mount it.
            raise ValueError(f"{s.name}: a Deployment with a data volume needs replicas=1 and strategy Recreate")
        spec["strategy"] = ({"type": "Recreate"} if s.strategy == "Recreate"
                            else {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
        spec["revisionHistoryLimit"] = 5
        kind = "Deployment"
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta(s.name, s), "spec": spec}


def headless_service(s: Svc) -> dict:
    # Headless: DNS returns every ready pod's address, so gRPC clients connect to pods directly
    # (kube-proxy would pin a long-lived HTTP/2 connection to one pod anyway).
    ports = [{"name": "grpc", "port": s.grpc_port, "targetPort": "grpc", "protocol": "TCP", "appProtocol": "grpc"},
             {"name": "metrics", "port": s.metrics_port, "targetPort": "metrics", "protocol": "TCP"}]
    ports += [{"name": n, "port": p, "targetPort": n, "protocol": "TCP"} for n, p in s.extra_ports.items()]
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(s.name, s),
            "spec": {"clusterIP": "None", "selector": selector(s), "ports": ports,
                     "publishNotReadyAddresses": False}}


def data_claim_name(s: Svc) -> str:
    return f"webenv-{s.name}-data"


def data_pvc(s: Svc) -> dict:
    """A Deployment's own volume at /data (a StatefulSet gets one per pod from its volumeClaimTemplates)."""
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta(data_claim_name(s), s),
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": s.data_volume}}}}


def pdb(s: Svc) -> dict:
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta(s.name, s),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector(s)}}}


def hpa_browser(s: Svc) -> dict:
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta(s.name, s),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": s.name},
            "minReplicas": 2, "maxReplicas": 20,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                                                          "target": {"type": "Utilization", "averageUtilization": 70}}}],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 60,
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]},
                # A removed node ends its open sessions (episodes are retried elsewhere): scale in slowly.
                "scaleDown": {"stabilizationWindowSeconds": 600,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 300}]},
            },
        },
    }


def hpa_collector(s: Svc) -> dict:
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": meta(s.name, s),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": s.name},
            "minReplicas": 1, "maxReplicas": 10,
            "metrics": [
                # Episodes waiting in the Redis stream, from Prometheus through prometheus-adapter's external
                # metrics API (rule in docs/operations.md): one replica per 64 queued episodes.
                {"type": "External", "external": {
                    "metric": {"name": "webenv_collector_queue_depth",
                               "selector": {"matchLabels": {"app": "webenv"}}},
                    "target": {"type": "AverageValue", "averageValue": "64"}}},
                {"type": "Resource", "resource": {"name": "cpu",
                                                  "target": {"type": "Utilization", "averageUtilization": 75}}},
            ],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 60,
                            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]},
                "scaleDown": {"stabilizationWindowSeconds": 900,
                              "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]},
            },
        },
    }


def namespace() -> dict:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": NAMESPACE, "labels": {
                "app.kubernetes.io/part-of": PART_OF,
                # Pod Security Admission: every webenv pod meets the "restricted" profile.
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/warn": "restricted"}}}


def common_config() -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta("webenv-common"), "data": dict(COMMON_CONFIG)}


def models_pvc() -> dict:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("webenv-models"),
            "spec": {"accessModes": ["ReadOnlyMany"], "resources": {"requests": {"storage": "50Gi"}}}}


def checkpoints_pvc() -> dict:
    # ReadWriteMany (NFS, CephFS, a cloud file store): the trainer writes checkpoints (a version is written under a
    # temporary name and renamed into place), every policy pod reads them (mounted read-only).
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta("webenv-checkpoints"),
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "100Gi"}}}}


def network_policies() -> list[dict]:
    webenv_pods = {"podSelector": {"matchLabels": {"app.kubernetes.io/part-of": PART_OF}}}
    metrics_ports = [{"protocol": "TCP", "port": s.metrics_port} for s in SERVICES]
    grpc_ports = [{"protocol": "TCP", "port": s.grpc_port} for s in SERVICES] + [{"protocol": "TCP", "port": 8800}]
    private = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"]
    dns = {"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
           "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    collector = next(s for s in SERVICES if s.name == "collector")
    return [
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("webenv-ingress"),
         "spec": {
             "podSelector": {"matchLabels": {"app.kubernetes.io/part-of": PART_OF}},
             "policyTypes": ["Ingress"],
             "ingress": [
                 # webenv pods call each other (the trainer the collector; `webenv train` in a webenv-labelled
                 # pod the trainer, collector and policy); clients outside the namespace need a rule of their own.
                 {"from": [webenv_pods], "ports": grpc_ports},
                 # Prometheus (namespace labelled webenv.dev/monitoring=true) scrapes /metrics.
                 {"from": [{"namespaceSelector": {"matchLabels": {"webenv.dev/monitoring": "true"}}}],
                  "ports": metrics_ports},
             ]}},
        # The gateway's REST API, live streams and console (HTTP 8080) are for clients outside the namespace
        # (an ingress controller, people): open to any source; its token (Secret webenv-auth) guards /v1/.
        {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta("gateway-http"),
         "spec": {
             "podSelector": {"matchLabels": {"app.kubernetes.io/name": "gateway"}},
             "policyTypes": ["Ingress"],
             "ingress": [{"ports": [{"protocol": "TCP", "port": 8080}]}]}},
        # Defence in depth behind the farm's URL guard: browsers reach DNS, the sites service and the public
        # internet on 80/443, never cluster or cloud-metadata addresses. Synthetic web only? Drop the last rule.
        egress_policy("browser", [
            dns,
            {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "sites"}}}],
             "ports": [{"protocol": "TCP", "port": 8800}, {"protocol": "TCP", "port": 50055}]},
            {"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": private}}],
             "ports": [{"protocol": "TCP", "port": 80}, {"protocol": "TCP", "port": 443}]},
        ]),
        # The trainer reads training data from the collector (ReadEpisodes) and nothing else: models come from
        # volumes (HF_HUB_OFFLINE), checkpoints go to a volume. A collector elsewhere needs a rule here too.
        egress_policy("trainer", [
            dns,
            {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "collector"}}}],
             "ports": [{"protocol": "TCP", "port": collector.grpc_port}]},
        ]),
    ]


def egress_policy(app: str, rules: list[dict]) -> dict:
    """NetworkPolicy `<app>-egress`: the pods of one service reach only what ``rules`` allow."""
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": meta(f"{app}-egress"),
            "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": app}}, "policyTypes": ["Egress"],
                     "egress": rules}}


def service_docs(s: Svc) -> list[dict]:
    docs = [config_map(s), workload(s), headless_service(s)]
    if s.data_volume and not s.statefulset:
        docs.append(data_pvc(s))
    if s.replicas > 1:
        docs.append(pdb(s))
    if s.name == "browser":
        docs.append(hpa_browser(s))
    if s.name == "collector":
        docs.append(hpa_collector(s))
    return docs


# --- the GPU variant (a kustomize Component) ------------------------------------------------------------------

GPU_README = """\
# GPU variant for policy, worldmodel and trainer: `components: [../../components/gpu]` in an overlay.
# Each pod gets one GPU (nvidia.com/gpu, NVIDIA device plugin), a memory-backed /dev/shm and a toleration for
# tainted GPU nodes; policy and worldmodel the vLLM backend, the trainer WEBENV_TRAINER_DEVICE=cuda. Needs images
# built on a CUDA base (vLLM for policy and worldmodel, torch's CUDA build for the trainer; see
# docs/operations.md, "GPU images"); set them with kustomize `images:`. Scale policy and worldmodel by replicas
# (one GPU each) or give a pod several GPUs and tensor parallelism; the HPA does not scale them (GPU utilisation
# is not a core metric). The trainer stays one pod (jobs resume from its volume); it trains on one GPU.
"""


def gpu_patch(name: str, env: dict[str, str], with_models: bool) -> dict:
    c = {"name": name,
         "env": [{"name": k, "value": v} for k, v in env.items()],
         "resources": {"requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
                       "limits": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "1"}},
         "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}
    volumes = [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}]
    if with_models:
        c["volumeMounts"].append({"name": "models", "mountPath": "/models", "readOnly": True})
        volumes.append({"name": "models", "persistentVolumeClaim": {"claimName": "webenv-models", "readOnly": True}})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"template": {"spec": {
                "containers": [c], "volumes": volumes,
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodeSelector": {"nvidia.com/gpu.present": "true"}}}}}


def gpu_component() -> dict[str, str]:
    policy = gpu_patch("policy", {"WEBENV_POLICY_BACKEND": "vllm", "WEBENV_POLICY_MODEL_PATH": "/models/policy",
                                  "WEBENV_POLICY_VLLM_GPU_MEMORY_UTILIZATION": "0.85",
                                  "WEBENV_POLICY_VLLM_MAX_NUM_SEQS": "64"}, with_models=True)
    worldmodel = gpu_patch("worldmodel", {"WEBENV_WORLDMODEL_BACKEND": "vllm", "WEBENV_WORLDMODEL_DEVICE": "cuda",
                                          "WEBENV_WORLDMODEL_THREADS": "0", "WEBENV_WORLDMODEL_MAX_BATCH": "64"},
                           with_models=False)  # base already mounts the models claim
    trainer = gpu_patch("trainer", {"WEBENV_TRAINER_DEVICE": "cuda"}, with_models=False)  # base mounts /models
    patches = {"policy-gpu.yaml": policy, "worldmodel-gpu.yaml": worldmodel, "trainer-gpu.yaml": trainer}
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component",
                     "patches": [{"path": path} for path in patches]}
    return {"kustomization.yaml": GPU_README + dump([kustomization]), **{p: dump([d]) for p, d in patches.items()}}


# --- output -------------------------------------------------------------------------------------------------

HEADER = "# Generated by deploy/k8s/generate.py; edit that script (or patch in an overlay), not this file.\n"


def dump(docs: list[dict]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False, width=120) for d in docs)


def render() -> dict[str, str]:
    """Relative path -> file text."""
    files = {
        "base/namespace.yaml": HEADER + dump([namespace()]),
        "base/common.yaml": HEADER + dump([common_config(), models_pvc(), checkpoints_pvc()]),
        "base/network-policies.yaml": HEADER + dump(network_policies()),
    }
    for s in SERVICES:
        files[f"base/{s.name}.yaml"] = HEADER + dump(service_docs(s))
    resources = [p.removeprefix("base/") for p in files]
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
                     "namespace": NAMESPACE, "resources": resources}
    files["base/kustomization.yaml"] = HEADER + dump([kustomization])
    for name, text in gpu_component().items():
        files[f"components/gpu/{name}"] = HEADER + text
    return files


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for rel, text in render().items():
        path = ROOT / rel
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(rel)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if stale:
        print(f"stale manifests (run python deploy/k8s/generate.py): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
