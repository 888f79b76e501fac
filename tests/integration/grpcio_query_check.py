#!/usr/bin/env python3
"""The query syntax and query trees through the stock Python gRPC stack (python3-grpcio, stubs from
proto/isn.proto at test time): a structured_query gives the hits of the same query written as text, a
malformed query text and an unknown field are INVALID_ARGUMENT naming the byte offset (and the fields).
Started by tests/integration/test_isnd_query_syntax against isnd and isn-agg. Exits non-zero with a
message on any mismatch."""
import argparse
import os
import sys

os.environ.setdefault("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "python")
try:
    import grpc
    from grpc_tools import protoc
except ImportError as e:
    sys.exit(f"grpcio_query_check: {e}: install the Debian packages python3-grpcio and python3-grpc-tools")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--proto-dir", required=True)
    ap.add_argument("--work-dir", required=True)
    ap.add_argument("--structured-forwarded", choices=["yes", "no"], default="yes",
                    help="no: the server in front drops structured_query (isn-agg until it forwards requests whole)")
    args = ap.parse_args()
    out = os.path.join(args.work_dir, "pyquery")
    os.makedirs(out, exist_ok=True)
    if protoc.main(["protoc", f"-I{args.proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}",
                    os.path.join(args.proto_dir, "isn.proto")]) != 0:
        sys.exit("grpcio_query_check: protoc failed")
    sys.path.insert(0, out)
    import isn_pb2
    import isn_pb2_grpc

    stub = isn_pb2_grpc.SearchStub(grpc.insecure_channel(args.server))

    def search(**fields):
        return stub.Search(isn_pb2.SearchRequest(k=50, **fields), timeout=10)

    def expect_invalid(text, *needles):
        try:
            search(query=text)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT:
                sys.exit(f"'{text}': status {e.code()}, expected INVALID_ARGUMENT")
            for needle in needles:
                if needle not in e.details():
                    sys.exit(f"'{text}': message '{e.details()}' lacks '{needle}'")
            return
        sys.exit(f"'{text}': answered, expected INVALID_ARGUMENT")

    expect_invalid('wind "tunnel flow', "quote at byte 5")
    expect_invalid('wind file:"line no"', "unknown field 'file' at byte 5", "title, body")
    expect_invalid('x title:(a b)', "byte 8")

    text = search(query='+wind -"boundary layer" title:tunnel "heat transfer"')
    if not text.hits:
        sys.exit("the text query found nothing; the test index should hold such documents")
    if args.structured_forwarded == "yes":
        Clause = isn_pb2.Clause
        tree = isn_pb2.Query(clauses=[
            Clause(occur=isn_pb2.OCCUR_MUST, text="wind"),
            Clause(occur=isn_pb2.OCCUR_MUST_NOT, text="boundary layer", phrase=True),
            Clause(field="title", text="tunnel"),
            Clause(text="heat transfer", phrase=True),
        ])
        structured = search(structured_query=tree)
        got = [(h.external_id, h.score) for h in structured.hits]
        want = [(h.external_id, h.score) for h in text.hits]
        if got != want:
            sys.exit(f"structured_query hits {got[:5]}... differ from the text query's {want[:5]}...")
        try:
            search(structured_query=isn_pb2.Query(clauses=[Clause(field="nofield", text="x")]))
            sys.exit("a structured clause on an unknown field was answered")
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "title, body" not in e.details():
                sys.exit(f"unknown structured field: {e.code()} {e.details()}")
    print(f"grpcio_query_check: ok ({len(text.hits)} hits)")


if __name__ == "__main__":
    main()
