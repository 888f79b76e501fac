#!/usr/bin/env python3
"""Checks a running isn.v1 server (isnd, or isn-agg with --device agg --partitions N --tier-info) with
the stock Python gRPC stack (python3-grpcio), stubs generated from proto/*.proto at test time
(python3-grpc-tools). Started by tests/integration/test_isnd_serving against both servers, which
passes the expected hits of the offline engine in --cases. Exits non-zero with a message on any
mismatch."""
import argparse
import json
import os
import sys
import urllib.request

# Stubs from an older protoc (Debian's grpc_tools) need the pure-Python protobuf runtime.
os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:
    sys.exit(f"grpcio_check: {e}: install the Debian packages python3-grpcio and python3-grpc-tools")


def generate_stubs(proto_dir, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    for name in ("isn.proto", "health.proto"):
        rc = protoc.main(["protoc", f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                          os.path.join(proto_dir, name)])
        if rc != 0:
            sys.exit(f"grpcio_check: protoc failed on {name}")
    sys.path.insert(0, out_dir)


def fail(message):
    sys.exit(f"grpcio_check: FAIL: {message}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--stats", required=True)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--proto-dir", default="proto")
    parser.add_argument("--work-dir", default="/tmp")
    parser.add_argument("--device", default="cpu", help="the device replies must name (isn-agg: agg)")
    parser.add_argument("--partitions", type=int, default=0,
                        help="partitions_answered and partitions_total in replies (an ISN: 0; isn-agg: its partitions)")
    parser.add_argument("--num-docs", type=int, required=True, help="Info.num_docs")
    parser.add_argument("--tier-info", action="store_true",
                        help="Info answers a tier's totals, without term statistics (isn-agg)")
    args = parser.parse_args()

    generate_stubs(args.proto_dir, os.path.join(args.work_dir, "py_stubs"))
    import isn_pb2
    import isn_pb2_grpc
    import health_pb2
    import health_pb2_grpc

    channel = grpc.insecure_channel(args.server)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = isn_pb2_grpc.SearchStub(channel)

    with open(args.cases) as f:
        cases = json.load(f)
    if not cases:
        fail("no cases")
    modes = {"or": isn_pb2.MODE_OR, "and": isn_pb2.MODE_AND}
    for case in cases:
        request = isn_pb2.SearchRequest(query=case["query"], k=case["k"], mode=modes[case["mode"]],
                                        algorithm=case["algorithm"], request_id="py")
        reply = stub.Search(request, timeout=10)
        got = [(h.external_id, h.doc, h.score) for h in reply.hits]
        want = [tuple(h) for h in case["hits"]]
        label = f'"{case["query"]}" {case["mode"]} {case["algorithm"]} k={case["k"]}'
        if len(got) != len(want):
            fail(f"{label}: {len(got)} hits, offline engine {len(want)}")
        for i, (g, w) in enumerate(zip(got, want)):
            # Both sides are float32; the JSON carries 9 significant digits, which round-trips them.
            if g[0] != w[0] or g[1] != w[1] or abs(g[2] - w[2]) > 1e-6 * max(1.0, abs(w[2])):
                fail(f"{label}: hit {i}: grpcio {g}, offline {w}")
        if not reply.complete or reply.device != args.device or reply.request_id != "py":
            fail(f"{label}: complete={reply.complete} device={reply.device!r} request_id={reply.request_id!r}")
        if reply.partitions_answered != args.partitions or reply.partitions_total != args.partitions:
            fail(f"{label}: partitions {reply.partitions_answered}/{reply.partitions_total}, want {args.partitions}")

    # Futures: many calls in flight on one channel.
    futures = [stub.Search.future(isn_pb2.SearchRequest(query=cases[i % len(cases)]["query"], k=10), timeout=10)
               for i in range(200)]
    for fut in futures:
        fut.result()

    # Errors come back as gRPC status codes with messages.
    def expect(call, code, part):
        try:
            call()
        except grpc.RpcError as e:
            if e.code() != code or part not in (e.details() or ""):
                fail(f"expected {code} with {part!r}, got {e.code()} {e.details()!r}")
            return
        fail(f"expected {code}, the call succeeded")

    expect(lambda: stub.Search(isn_pb2.SearchRequest(query=""), timeout=5), grpc.StatusCode.INVALID_ARGUMENT,
           "empty query")
    expect(lambda: stub.Search(isn_pb2.SearchRequest(query="wind", k=10**6), timeout=5),
           grpc.StatusCode.INVALID_ARGUMENT, "max_k")
    unknown = channel.unary_unary("/isn.v1.Search/NoSuchMethod", request_serializer=lambda b: b,
                                  response_deserializer=lambda b: b)
    expect(lambda: unknown(b"", timeout=5), grpc.StatusCode.UNIMPLEMENTED, "unknown method")
    raw = channel.unary_unary("/isn.v1.Search/Search", request_serializer=lambda b: b,
                              response_deserializer=lambda b: b)
    expect(lambda: raw(b"\xff\xff\xff\xff\x0f", timeout=5), grpc.StatusCode.INVALID_ARGUMENT, "not a valid")

    info = stub.Info(isn_pb2.InfoRequest(terms=["Running"], analyze=True), timeout=5)
    if info.num_docs != args.num_docs:
        fail(f"Info: num_docs {info.num_docs}, want {args.num_docs}")
    if args.tier_info:
        if info.terms:
            fail(f"Info of a tier has term statistics: {info}")
    elif len(info.terms) != 1 or info.terms[0].index_term != "run" or not info.terms[0].found:
        fail(f"Info: {info}")

    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    if health.status != health_pb2.HealthCheckResponse.SERVING:
        fail(f"Health/Check: {health}")

    with urllib.request.urlopen(f"http://{args.stats}/readyz", timeout=5) as r:
        if r.status != 200:
            fail(f"/readyz: {r.status}")
    print(f"grpcio_check: {len(cases)} cases equal to the offline engine; 200 concurrent futures; "
          f"error codes, Info and Health as expected")


if __name__ == "__main__":
    main()
