#!/usr/bin/env python3
"""Kubernetes manifests for one ISN tier: P partitions x R replicas of isnd and isn-agg in front.

Per partition: a StatefulSet of R isnd pods (the partition's index on a volume per pod), a headless
Service (its DNS name resolves to the ready pods: isn-agg's "partition = dns:NAME:PORT"), and a
PodDisruptionBudget (one pod of a partition down at a time). isn-agg: a ConfigMap with its
configuration, a Deployment, a Service and a PodDisruptionBudget. Every pod has native gRPC
readiness, liveness and startup probes (grpc.health.v1), resources, Prometheus scrape annotations,
runs as a non-root user on a read-only root file system, and with --gpu asks for nvidia.com/gpu
(the node needs the NVIDIA device plugin and container toolkit).

    deploy/kubernetes/generate.py --partitions 4 --replicas 3 --image registry.example/isn:0.1.0 >tier.yaml
    kubectl apply -f tier.yaml

Standard library only; the output is YAML (every string JSON-quoted, which YAML reads as is).
"""
import argparse
import json
import sys

GRPC_PORT = 7070
STATS_PORT = 9090
AGG_GRPC_PORT = 8070
AGG_STATS_PORT = 8090
NON_ROOT_UID = 65532  # the image's "isn" user (deploy/image/build.sh)


def yaml(value, indent=0):
    """Block-style YAML of dicts, lists and scalars."""
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return "{}"
        lines = []
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:\n{yaml(item, indent + 2)}")
            else:
                lines.append(f"{pad}{key}: {yaml(item)}")
        return "\n".join(lines)
    if isinstance(value, list):
        if not value:
            return "[]"
        lines = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                body = yaml(item, indent + 2)
                lines.append(f"{pad}- {body[indent + 2:]}")
            else:
                lines.append(f"{pad}- {yaml(item)}")
        return "\n".join(lines)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(str(value))


def labels(component, partition=None):
    out = {"app.kubernetes.io/name": "isn", "app.kubernetes.io/component": component}
    if partition is not None:
        out["isn.example.org/partition"] = str(partition)
    return out


def scrape_annotations(port):
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}


def grpc_probes(port, startup_seconds, liveness_service=None):
    """Readiness and liveness by grpc.health.v1 (kubelet's native gRPC probe); the startup probe
    gives the index load and warm-up (GPU upload included) up to startup_seconds. isn-agg's readiness
    follows its partitions' coverage, so its liveness and startup probes ask the health service
    "liveness" (SERVING while the process answers): a tier whose partitions are down must not get
    its aggregators restarted."""
    alive = {"port": port, **({"service": liveness_service} if liveness_service else {})}
    return {
        "startupProbe": {"grpc": alive, "periodSeconds": 2, "failureThreshold": max(1, startup_seconds // 2)},
        "readinessProbe": {"grpc": {"port": port}, "periodSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {"grpc": dict(alive), "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 2},
    }


def pod_security():
    return {"runAsNonRoot": True, "runAsUser": NON_ROOT_UID, "runAsGroup": NON_ROOT_UID, "fsGroup": NON_ROOT_UID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security():
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}}


def partition_name(args, p):
    return f"{args.name}-part-{p}"


def partition_dns(args, p):
    # fully qualified (the trailing dot): no search-domain lookups first
    return f"{partition_name(args, p)}.{args.namespace}.svc.{args.cluster_domain}."


def partition_objects(args, p):
    name = partition_name(args, p)
    meta = {"name": name, "namespace": args.namespace, "labels": labels("isnd", p)}
    selector = labels("isnd", p)
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {
            # headless: the name resolves to the ready pods' addresses, which isn-agg re-resolves
            "clusterIP": "None",
            "publishNotReadyAddresses": False,
            "selector": selector,
            "ports": [{"name": "grpc", "port": GRPC_PORT, "targetPort": "grpc", "appProtocol": "grpc"},
                      {"name": "metrics", "port": STATS_PORT, "targetPort": "metrics"}],
        },
    }
    resources = {"requests": {"cpu": args.isnd_cpu, "memory": args.isnd_memory},
                 "limits": {"memory": args.isnd_memory}}
    isnd_args = ["--index", "/var/lib/isn/index", "--listen", f"0.0.0.0:{GRPC_PORT}",
                 "--stats-listen", f"0.0.0.0:{STATS_PORT}", "--partition-id", str(p)]
    pod_spec = {
        "securityContext": pod_security(),
        # the preStop sleep keeps answering while the endpoint leaves DNS and isn-agg re-resolves
        # (dns_interval_ms); SIGTERM then drains what is in flight
        "terminationGracePeriodSeconds": args.prestop_seconds + 30,
        "containers": [{
            "name": "isnd",
            "image": args.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["/usr/bin/isnd"],
            "args": isnd_args,
            "ports": [{"name": "grpc", "containerPort": GRPC_PORT}, {"name": "metrics", "containerPort": STATS_PORT}],
            **grpc_probes(GRPC_PORT, args.startup_seconds),
            "lifecycle": {"preStop": {"sleep": {"seconds": args.prestop_seconds}}},
            "resources": resources,
            "securityContext": container_security(),
            "volumeMounts": [{"name": "index", "mountPath": "/var/lib/isn", "readOnly": True}],
        }],
        "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 100,
            "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": selector}},
        }]}},
    }
    if args.gpu:
        resources["limits"]["nvidia.com/gpu"] = 1
        resources["requests"]["nvidia.com/gpu"] = 1
        pod_spec["containers"][0]["args"] += ["--set", "gpu.enable=true"]
        pod_spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        if args.runtime_class:
            pod_spec["runtimeClassName"] = args.runtime_class
    statefulset = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta,
        "spec": {
            "serviceName": name,
            "replicas": args.replicas,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector, "annotations": scrape_annotations(STATS_PORT)},
                "spec": pod_spec,
            },
            # one volume per pod, holding this partition's index at /var/lib/isn/index (written by
            # the operator's copy job, read-only here)
            "volumeClaimTemplates": [{
                "metadata": {"name": "index"},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": args.index_storage}},
                         **({"storageClassName": args.storage_class} if args.storage_class else {})},
            }],
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        },
    }
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector}},
    }
    return [service, statefulset, budget]


def agg_config(args):
    lines = ["[agg]", f"listen = 0.0.0.0:{AGG_GRPC_PORT}", f"stats_listen = 0.0.0.0:{AGG_STATS_PORT}",
             f"dns_interval_ms = {args.dns_interval_ms}", f"ready_coverage = {args.ready_coverage}"]
    lines += [f"partition = dns:{partition_dns(args, p)}:{GRPC_PORT}" for p in range(args.partitions)]
    if args.global_stats:
        lines.append("global_stats = true")
    return "\n".join(lines) + "\n"


def agg_objects(args):
    name = f"{args.name}-agg"
    meta = {"name": name, "namespace": args.namespace, "labels": labels("isn-agg")}
    selector = labels("isn-agg")
    config = {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
        "data": {"isn-agg.conf": agg_config(args)},
    }
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            "replicas": args.agg_replicas,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}},
            "template": {
                "metadata": {"labels": selector, "annotations": scrape_annotations(AGG_STATS_PORT)},
                "spec": {
                    "securityContext": pod_security(),
                    "terminationGracePeriodSeconds": args.prestop_seconds + 10,
                    "containers": [{
                        "name": "isn-agg",
                        "image": args.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["/usr/bin/isn-agg"],
                        "args": ["--config", "/etc/isn/isn-agg.conf"],
                        "ports": [{"name": "grpc", "containerPort": AGG_GRPC_PORT},
                                  {"name": "metrics", "containerPort": AGG_STATS_PORT}],
                        **grpc_probes(AGG_GRPC_PORT, 60, liveness_service="liveness"),
                        "lifecycle": {"preStop": {"sleep": {"seconds": args.prestop_seconds}}},
                        "resources": {"requests": {"cpu": args.agg_cpu, "memory": args.agg_memory},
                                      "limits": {"memory": args.agg_memory}},
                        "securityContext": container_security(),
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/isn", "readOnly": True}],
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": name}}],
                },
            },
        },
    }
    service = {
        "apiVersion": "v1", "kind": "Service", "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "selector": selector,
            "ports": [{"name": "grpc", "port": AGG_GRPC_PORT, "targetPort": "grpc", "appProtocol": "grpc"},
                      {"name": "metrics", "port": AGG_STATS_PORT, "targetPort": "metrics"}],
        },
    }
    budget = {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": meta,
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector}},
    }
    return [config, deployment, service, budget]


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {text}")
    return value


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--partitions", type=positive, default=2, help="P: partitions (a StatefulSet each)")
    ap.add_argument("--replicas", type=positive, default=2, help="R: isnd pods per partition (isn-agg uses 8 at most)")
    ap.add_argument("--image", default="localhost/isn:0.1.0", help="the image of make image")
    ap.add_argument("--name", default="isn", help="prefix of every object's name")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--cluster-domain", default="cluster.local")
    ap.add_argument("--gpu", action="store_true", help="each isnd pod asks for one nvidia.com/gpu and enables [gpu]")
    ap.add_argument("--runtime-class", default="", help="runtimeClassName of GPU pods (e.g. nvidia), if the cluster needs one")
    ap.add_argument("--index-storage", default="10Gi", help="volume size per isnd pod")
    ap.add_argument("--storage-class", default="", help="storageClassName of the index volumes (default: the cluster's)")
    ap.add_argument("--isnd-cpu", default="2")
    ap.add_argument("--isnd-memory", default="4Gi")
    ap.add_argument("--agg-replicas", type=positive, default=2)
    ap.add_argument("--agg-cpu", default="1")
    ap.add_argument("--agg-memory", default="512Mi")
    ap.add_argument("--dns-interval-ms", type=positive, default=2000, help="isn-agg re-resolves the partitions this often")
    ap.add_argument("--prestop-seconds", type=positive, default=5,
                    help="a terminating pod keeps answering this long (more than the DNS interval and TTL)")
    ap.add_argument("--startup-seconds", type=positive, default=300, help="time an isnd pod has to load its index")
    ap.add_argument("--ready-coverage", default="1", help="isn-agg is ready while this share of partitions has a replica")
    ap.add_argument("--global-stats", action="store_true", help="isn-agg sends corpus-wide statistics")
    ap.add_argument("--out", default="-", help="file to write (default: standard output)")
    ap.add_argument("--agg-config", action="store_true", help="write only isn-agg.conf (the ConfigMap's file)")
    args = ap.parse_args(argv)
    if args.replicas > 8:
        ap.error("--replicas: isn-agg keeps at most 8 replicas per partition")
    if args.prestop_seconds * 1000 <= args.dns_interval_ms:
        ap.error("--prestop-seconds must outlast --dns-interval-ms, or isn-agg may still send to a pod that is gone")
    objects = []
    for p in range(args.partitions):
        objects += partition_objects(args, p)
    objects += agg_objects(args)
    header = (f"# ISN tier: {args.partitions} partitions x {args.replicas} replicas, isn-agg x {args.agg_replicas}"
              f"{', GPU' if args.gpu else ''}.\n# Generated by deploy/kubernetes/generate.py "
              f"{' '.join(argv)}\n".replace(" \n", "\n"))
    text = agg_config(args) if args.agg_config else header + "".join(f"---\n{yaml(o)}\n" for o in objects)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
