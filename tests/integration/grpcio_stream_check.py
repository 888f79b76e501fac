#!/usr/bin/env python3
"""The streaming services of isnd and isn-agg with the stock Python gRPC stack (python3-grpcio, stubs
generated from proto/*.proto at test time by python3-grpc-tools), started by tests/integration/
test_tier_ops.c:

  --reflection   server reflection, v1 and v1alpha: list_services names isn.v1.Search and Health;
                 file_containing_symbol isn.v1.Search gives a FileDescriptorProto with its methods;
                 an unknown symbol gives NOT_FOUND in an error_response; several requests on one stream.
  --watch        grpc.health.v1.Health/Watch(""): prints each status it receives on its own line
                 (SERVING, NOT_SERVING...) and flushes, until --expect statuses (comma-separated) came
                 in that order or --timeout seconds passed (exit 1).
"""
import argparse
import os
import sys

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

try:
    import grpc
    from grpc_tools import protoc
    from google.protobuf import descriptor_pb2
except ImportError as e:
    sys.exit(f"grpcio_stream_check: {e}: install the Debian packages python3-grpcio and python3-grpc-tools")


def generate_stubs(proto_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name in ("health.proto", "reflection.proto", "reflection_v1alpha.proto"):
        rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                          os.path.join(proto_dir, name)])
        if rc != 0:
            sys.exit(f"grpcio_stream_check: protoc failed on {name}")
    sys.path.insert(0, out_dir)


def fail(message):
    sys.exit(f"grpcio_stream_check: FAIL: {message}")


def check_reflection(channel, pb2, pb2_grpc, label):
    stub = pb2_grpc.ServerReflectionStub(channel)
    requests = [
        pb2.ServerReflectionRequest(list_services=""),
        pb2.ServerReflectionRequest(file_containing_symbol="isn.v1.Search"),
        pb2.ServerReflectionRequest(file_containing_symbol="no.such.Thing"),
        pb2.ServerReflectionRequest(file_by_filename="health.proto"),
    ]
    replies = list(stub.ServerReflectionInfo(iter(requests), timeout=10))
    if len(replies) != len(requests):
        fail(f"{label}: {len(replies)} replies to {len(requests)} requests")
    names = {s.name for s in replies[0].list_services_response.service}
    for want in ("isn.v1.Search", "grpc.health.v1.Health"):
        if want not in names:
            fail(f"{label}: list_services lacks {want}: {sorted(names)}")
    files = replies[1].file_descriptor_response.file_descriptor_proto
    if len(files) != 1:
        fail(f"{label}: file_containing_symbol gave {len(files)} files")
    fd = descriptor_pb2.FileDescriptorProto.FromString(files[0])
    methods = {m.name for s in fd.service if s.name == "Search" for m in s.method}
    if fd.package != "isn.v1" or methods != {"Search", "Info"}:
        fail(f"{label}: descriptor of package {fd.package} with methods {sorted(methods)}")
    if replies[2].error_response.error_code != grpc.StatusCode.NOT_FOUND.value[0]:
        fail(f"{label}: unknown symbol: {replies[2]}")
    health = descriptor_pb2.FileDescriptorProto.FromString(replies[3].file_descriptor_response.file_descriptor_proto[0])
    if health.package != "grpc.health.v1":
        fail(f"{label}: file_by_filename health.proto gave package {health.package}")
    print(f"reflection {label}: {len(names)} services, isn.v1.Search with {sorted(methods)}", flush=True)


def watch(channel, expect, timeout):
    import health_pb2
    import health_pb2_grpc
    stub = health_pb2_grpc.HealthStub(channel)
    names = {v: k for k, v in health_pb2.HealthCheckResponse.ServingStatus.items()}
    seen = []
    try:
        for reply in stub.Watch(health_pb2.HealthCheckRequest(service=""), timeout=timeout):
            name = names.get(reply.status, str(reply.status))
            seen.append(name)
            print(name, flush=True)
            if seen[-len(expect):] == expect and len(seen) >= len(expect):
                return
    except grpc.RpcError as e:
        fail(f"Watch ended with {e.code()}: {e.details()}; saw {seen}, expected {expect}")
    fail(f"Watch ended; saw {seen}, expected {expect}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--proto-dir", default="proto")
    parser.add_argument("--work-dir", default="/tmp")
    parser.add_argument("--reflection", action="store_true")
    parser.add_argument("--watch", action="store_true")
    parser.add_argument("--expect", default="SERVING")
    parser.add_argument("--timeout", type=float, default=30)
    args = parser.parse_args()
    generate_stubs(args.proto_dir, os.path.join(args.work_dir, "py_stream_stubs"))
    channel = grpc.insecure_channel(args.server)
    grpc.channel_ready_future(channel).result(timeout=10)
    if args.reflection:
        import reflection_pb2
        import reflection_pb2_grpc
        import reflection_v1alpha_pb2
        import reflection_v1alpha_pb2_grpc
        check_reflection(channel, reflection_pb2, reflection_pb2_grpc, "v1")
        check_reflection(channel, reflection_v1alpha_pb2, reflection_v1alpha_pb2_grpc, "v1alpha")
    if args.watch:
        watch(channel, args.expect.split(","), args.timeout)
    channel.close()


if __name__ == "__main__":
    main()
