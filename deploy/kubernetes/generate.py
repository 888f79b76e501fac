#!/usr/bin/env python3
"""Kubernetes manifests for one ISN tier: P partitions x R replicas of isnd and isn-agg in front.

Per partition: a StatefulSet of R isnd pods (the partition's index on a volume per pod), a headless
Service (its DNS name resolves to the ready pods: isn-agg's "partition = dns:NAME:PORT"), and a
PodDisruptionBudget (one pod of a partition down at a time). isn-agg: a ConfigMap with its
configuration, a Deployment, a Service and a PodDisruptionBudget. Every pod has native gRPC
readiness, liveness and startup probes (grpc.health.v1), resources, Prometheus scrape annotations,
runs as a non-root user on a read-only root file system, and with --gpu asks for nvidia.com/gpu
(the node needs the NVIDIA device plugin and container toolkit). NetworkPolicies admit isnd's gRPC
only from isn-agg and every stats port only from Prometheus (--no-network-policy leaves them out).

TLS (issue 37): --cert-manager-issuer NAME makes cert-manager Certificate resources (ECDSA P-256,
renewed well before they expire) whose Secrets the pods mount; --tls-secret-isnd and --tls-secret-agg
name Secrets made some other way instead (type kubernetes.io/tls with ca.crt). Then every port speaks
TLS: isn-agg to isnd with mutual TLS (isnd admits only isn-agg's SPIFFE ID), the stats ports HTTPS
(Prometheus scrapes with the CA, annotation prometheus.io/scheme: https). The kubelet's gRPC probe
speaks plaintext only, so with TLS the probes are HTTPS GETs of the stats endpoint's /readyz and
/healthz (the kubelet does not verify the certificate). isnd and isn-agg watch the mounted files and
take a renewed certificate for new connections without a restart.

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


TLS_DIR = "/etc/isn-tls"  # a Secret's tls.crt, tls.key and ca.crt


def scrape_annotations(port, tls=False):
    out = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": "/metrics"}
    if tls:
        out["prometheus.io/scheme"] = "https"
    return out


def https_probes(port, startup_seconds, startup_path):
    """With TLS: the stats endpoint's /readyz and /healthz over HTTPS (the kubelet's gRPC probe
    cannot speak TLS; its HTTPS probe does not verify the certificate)."""
    def get(path):
        return {"httpGet": {"path": path, "port": port, "scheme": "HTTPS"}}
    return {
        "startupProbe": {**get(startup_path), "periodSeconds": 2, "failureThreshold": max(1, startup_seconds // 2)},
        "readinessProbe": {**get("/readyz"), "periodSeconds": 2, "failureThreshold": 2},
        "livenessProbe": {**get("/healthz"), "periodSeconds": 10, "failureThreshold": 3, "timeoutSeconds": 2},
    }


def tls_on(args):
    return bool(args.cert_manager_issuer or args.tls_secret_isnd)


def isnd_secret(args):
    return args.tls_secret_isnd or f"{args.name}-isnd-tls"


def agg_secret(args):
    return args.tls_secret_agg or f"{args.name}-agg-tls"


def isnd_tls_name(args):
    """The name every isnd certificate carries and isn-agg checks (it reaches pods by address)."""
    return f"{args.name}-isnd.{args.namespace}.svc"


def agg_spiffe_id(args):
    return f"spiffe://{args.cluster_domain}/ns/{args.namespace}/sa/{args.name}-agg"


def tls_volume(secret):
    return {"name": "tls", "secret": {"secretName": secret, "defaultMode": 0o440}}


def tls_mount():
    return {"name": "tls", "mountPath": TLS_DIR, "readOnly": True}


def certificates(args):
    """cert-manager Certificates for isnd (server) and isn-agg (server and client, with its SPIFFE ID)."""
    def certificate(name, secret, dns_names, usages, uris=None):
        spec = {
            "secretName": secret,
            "duration": args.cert_duration,
            "renewBefore": args.cert_renew_before,
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Always"},
            "dnsNames": dns_names,
            "usages": usages,
            "issuerRef": {"name": args.cert_manager_issuer, "kind": args.cert_manager_issuer_kind,
                          "group": "cert-manager.io"},
        }
        if uris:
            spec["uris"] = uris
        return {"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
                "metadata": {"name": name, "namespace": args.namespace, "labels": labels("tls")}, "spec": spec}
    isnd_names = [isnd_tls_name(args)] + [f"*.{partition_name(args, p)}.{args.namespace}.svc.{args.cluster_domain}"
                                         for p in range(args.partitions)]
    agg_names = [f"{args.name}-agg.{args.namespace}.svc", f"{args.name}-agg.{args.namespace}.svc.{args.cluster_domain}"]
    return [certificate(f"{args.name}-isnd", isnd_secret(args), isnd_names, ["digital signature", "server auth"]),
            certificate(f"{args.name}-agg", agg_secret(args), agg_names,
                        ["digital signature", "server auth", "client auth"], [agg_spiffe_id(args)])]


def prometheus_peer(args):
    key, _, value = args.prometheus_labels.partition("=")
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": args.prometheus_namespace}},
            "podSelector": {"matchLabels": {key: value}}}


def network_policies(args):
    """isnd: gRPC only from isn-agg, stats only from Prometheus. isn-agg: gRPC from any client, stats
    only from Prometheus. (The kubelet's probes come from the node, which NetworkPolicy does not
    govern on the common CNIs.)"""
    def policy(name, component, rules):
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                "metadata": {"name": name, "namespace": args.namespace, "labels": labels(component)},
                "spec": {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "isn",
                                                         "app.kubernetes.io/component": component}},
                         "policyTypes": ["Ingress"], "ingress": rules}}
    from_agg = {"podSelector": {"matchLabels": labels("isn-agg")}}
    return [
        policy(f"{args.name}-isnd", "isnd", [
            {"from": [from_agg], "ports": [{"protocol": "TCP", "port": GRPC_PORT}]},
            {"from": [prometheus_peer(args)], "ports": [{"protocol": "TCP", "port": STATS_PORT}]},
        ]),
        policy(f"{args.name}-agg", "isn-agg", [
            {"ports": [{"protocol": "TCP", "port": AGG_GRPC_PORT}]},
            {"from": [prometheus_peer(args)], "ports": [{"protocol": "TCP", "port": AGG_STATS_PORT}]},
        ]),
    ]


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
    if tls_on(args):
        isnd_args += ["--set", f"server.tls_cert={TLS_DIR}/tls.crt", "--set", f"server.tls_key={TLS_DIR}/tls.key",
                      "--set", f"server.tls_client_ca={TLS_DIR}/ca.crt",
                      "--set", f"server.tls_allowed_peers={agg_spiffe_id(args)}"]
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
            **(https_probes(STATS_PORT, args.startup_seconds, "/readyz") if tls_on(args)
               else grpc_probes(GRPC_PORT, args.startup_seconds)),
            "lifecycle": {"preStop": {"sleep": {"seconds": args.prestop_seconds}}},
            "resources": resources,
            "securityContext": container_security(),
            "volumeMounts": [{"name": "index", "mountPath": "/var/lib/isn", "readOnly": True}]
                            + ([tls_mount()] if tls_on(args) else []),
        }],
        **({"volumes": [tls_volume(isnd_secret(args))]} if tls_on(args) else {}),
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
                "metadata": {"labels": selector, "annotations": scrape_annotations(STATS_PORT, tls_on(args))},
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
    if tls_on(args):
        lines += [f"tls_cert = {TLS_DIR}/tls.crt", f"tls_key = {TLS_DIR}/tls.key", f"tls_ca = {TLS_DIR}/ca.crt",
                  f"tls_server_name = {isnd_tls_name(args)}"]
        if args.agg_client_certs:
            lines.append(f"tls_client_ca = {TLS_DIR}/ca.crt")
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
                "metadata": {"labels": selector, "annotations": scrape_annotations(AGG_STATS_PORT, tls_on(args))},
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
                        **(https_probes(AGG_STATS_PORT, 60, "/healthz") if tls_on(args)
                           else grpc_probes(AGG_GRPC_PORT, 60, liveness_service="liveness")),
                        "lifecycle": {"preStop": {"sleep": {"seconds": args.prestop_seconds}}},
                        "resources": {"requests": {"cpu": args.agg_cpu, "memory": args.agg_memory},
                                      "limits": {"memory": args.agg_memory}},
                        "securityContext": container_security(),
                        "volumeMounts": [{"name": "config", "mountPath": "/etc/isn", "readOnly": True}]
                                        + ([tls_mount()] if tls_on(args) else []),
                    }],
                    "volumes": [{"name": "config", "configMap": {"name": name}}]
                               + ([tls_volume(agg_secret(args))] if tls_on(args) else []),
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
    ap.add_argument("--cert-manager-issuer", default="", help="TLS on every port, certificates from this cert-manager issuer")
    ap.add_argument("--cert-manager-issuer-kind", default="Issuer", choices=["Issuer", "ClusterIssuer"])
    ap.add_argument("--cert-duration", default="24h", help="cert-manager: each certificate's lifetime")
    ap.add_argument("--cert-renew-before", default="8h", help="cert-manager: renewed this long before it expires")
    ap.add_argument("--tls-secret-isnd", default="", help="TLS on every port, isnd's certificate from this Secret")
    ap.add_argument("--tls-secret-agg", default="", help="with --tls-secret-isnd: isn-agg's (server and client) Secret")
    ap.add_argument("--agg-client-certs", action="store_true", help="with TLS: isn-agg's clients need certificates from the CA")
    ap.add_argument("--no-network-policy", dest="network_policy", action="store_false",
                    help="leave the NetworkPolicies out")
    ap.add_argument("--prometheus-namespace", default="monitoring", help="NetworkPolicy: where Prometheus runs")
    ap.add_argument("--prometheus-labels", default="app.kubernetes.io/name=prometheus",
                    help="NetworkPolicy: KEY=VALUE of the Prometheus pods")
    args = ap.parse_args(argv)
    if args.cert_manager_issuer and args.tls_secret_isnd:
        ap.error("--cert-manager-issuer makes the Secrets; do not name them with --tls-secret-isnd too")
    if bool(args.tls_secret_isnd) != bool(args.tls_secret_agg):
        ap.error("--tls-secret-isnd and --tls-secret-agg go together")
    if args.agg_client_certs and not tls_on(args):
        ap.error("--agg-client-certs needs TLS (--cert-manager-issuer or --tls-secret-isnd)")
    if "=" not in args.prometheus_labels:
        ap.error("--prometheus-labels is KEY=VALUE")
    if args.replicas > 8:
        ap.error("--replicas: isn-agg keeps at most 8 replicas per partition")
    if args.prestop_seconds * 1000 <= args.dns_interval_ms:
        ap.error("--prestop-seconds must outlast --dns-interval-ms, or isn-agg may still send to a pod that is gone")
    objects = []
    for p in range(args.partitions):
        objects += partition_objects(args, p)
    objects += agg_objects(args)
    if args.cert_manager_issuer:
        objects = certificates(args) + objects
    if args.network_policy:
        objects += network_policies(args)
    header = (f"# ISN tier: {args.partitions} partitions x {args.replicas} replicas, isn-agg x {args.agg_replicas}"
              f"{', GPU' if args.gpu else ''}{', TLS' if tls_on(args) else ''}.\n# Generated by deploy/kubernetes/generate.py "
              f"{' '.join(argv)}\n".replace(" \n", "\n"))
    text = agg_config(args) if args.agg_config else header + "".join(f"---\n{yaml(o)}\n" for o in objects)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1:])
