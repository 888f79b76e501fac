#!/usr/bin/env python3
"""The stock Python gRPC stack (python3-grpcio) against two servers on the same index, one plaintext
and one over TLS (mutual TLS when --cert is given): grpc.secure_channel with the test CA must get the
same hits, scores included, for every query as grpc.insecure_channel; Health says SERVING over TLS;
and a secure channel that trusts another CA fails. Started by tests/integration/tls_test.sh. Exits
non-zero with a message on any mismatch."""
import argparse
import os
import sys

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")

try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:
    sys.exit(f"grpcio_tls_check: {e}: install the Debian packages python3-grpcio and python3-grpc-tools")


def fail(message):
    sys.exit(f"grpcio_tls_check: FAIL: {message}")


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--plaintext", required=True, help="HOST:PORT of the plaintext server")
    parser.add_argument("--tls", required=True, help="HOST:PORT of the TLS server")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--other-ca", required=True, help="a CA that did not sign the server's certificate")
    parser.add_argument("--cert")
    parser.add_argument("--key")
    parser.add_argument("--proto-dir", default="proto")
    parser.add_argument("--work-dir", default="/tmp")
    parser.add_argument("queries", nargs="+")
    args = parser.parse_args()

    out_dir = os.path.join(args.work_dir, "py_stubs")
    os.makedirs(out_dir, exist_ok=True)
    for name in ("isn.proto", "health.proto"):
        if protoc.main(["protoc", f"-I{args.proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                        os.path.join(args.proto_dir, name)]) != 0:
            sys.exit(f"grpcio_tls_check: protoc failed on {name}")
    sys.path.insert(0, out_dir)
    import isn_pb2
    import isn_pb2_grpc
    import health_pb2
    import health_pb2_grpc

    def credentials(ca_path):
        return grpc.ssl_channel_credentials(
            root_certificates=read(ca_path),
            private_key=read(args.key) if args.key else None,
            certificate_chain=read(args.cert) if args.cert else None)

    plain = grpc.insecure_channel(args.plaintext)
    secure = grpc.secure_channel(args.tls, credentials(args.ca))
    for channel in (plain, secure):
        grpc.channel_ready_future(channel).result(timeout=10)
    status = health_pb2_grpc.HealthStub(secure).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
    if status.status != health_pb2.HealthCheckResponse.SERVING:
        fail(f"Health over TLS says {status.status}, not SERVING")
    compared = 0
    for query in args.queries:
        request = isn_pb2.SearchRequest(query=query, k=10)
        want = isn_pb2_grpc.SearchStub(plain).Search(request, timeout=10)
        got = isn_pb2_grpc.SearchStub(secure).Search(request, timeout=10)
        want_hits = [(h.external_id, h.score) for h in want.hits]
        got_hits = [(h.external_id, h.score) for h in got.hits]
        if want_hits != got_hits:
            fail(f"query {query!r}: TLS hits {got_hits} differ from plaintext hits {want_hits}")
        compared += len(want_hits)
    if compared == 0:
        fail("no query had hits: nothing was compared")

    wrong = grpc.secure_channel(args.tls, credentials(args.other_ca))
    try:
        grpc.channel_ready_future(wrong).result(timeout=5)
        isn_pb2_grpc.SearchStub(wrong).Search(isn_pb2.SearchRequest(query=args.queries[0]), timeout=5)
        fail("a channel trusting another CA was served")
    except (grpc.FutureTimeoutError, grpc.RpcError):
        pass
    print(f"grpcio_tls_check: {len(args.queries)} queries, {compared} hits the same over TLS as plaintext")


if __name__ == "__main__":
    main()
