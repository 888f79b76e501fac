#!/usr/bin/env python3
"""Stored fields through the stock Python gRPC stack (python3-grpcio): asks a running isnd or isn-agg
for SearchRequest.stored_fields and checks every hit's fields against --expect (a JSON object: external
id -> {field: text}), their order, that a field the index does not keep is INVALID_ARGUMENT naming
it, and (--info-stored) what Info says the index stores. Started by
tests/integration/test_stored_fields. Exits non-zero with a message on any mismatch."""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grpcio_check import fail, generate_stubs  # noqa: E402  (sets the pure-Python protobuf runtime)

import grpc  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--expect", required=True)
    parser.add_argument("--query", required=True)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--proto-dir", default="proto")
    parser.add_argument("--work-dir", default="/tmp")
    parser.add_argument("--info-stored", help="Info.stored_fields expected, comma-separated (an ISN)")
    args = parser.parse_args()

    generate_stubs(args.proto_dir, os.path.join(args.work_dir, "py_stubs_stored"))
    import isn_pb2
    import isn_pb2_grpc

    with open(args.expect, encoding="utf-8") as f:
        expect = json.load(f)
    channel = grpc.insecure_channel(args.server)
    grpc.channel_ready_future(channel).result(timeout=10)
    stub = isn_pb2_grpc.SearchStub(channel)
    checked = 0
    for asked in (["title", "body"], ["body"], ["body", "title"]):
        reply = stub.Search(isn_pb2.SearchRequest(query=args.query, k=args.k, stored_fields=asked), timeout=10)
        if not reply.hits:
            fail(f"{asked}: no hits for {args.query!r}")
        for hit in reply.hits:
            got = [(f.name, f.value) for f in hit.fields]
            want = [(name, expect[hit.external_id][name]) for name in asked]
            if got != want:
                fail(f"{asked}: hit {hit.external_id}: fields {got}, want {want}")
            checked += 1
    plain = stub.Search(isn_pb2.SearchRequest(query=args.query, k=args.k), timeout=10)
    if any(hit.fields for hit in plain.hits):
        fail("fields in hits of a request that asked for none")
    try:
        stub.Search(isn_pb2.SearchRequest(query=args.query, k=5, stored_fields=["title", "nosuchfield"]), timeout=10)
        fail("a field the index does not keep was answered")
    except grpc.RpcError as e:
        if e.code() != grpc.StatusCode.INVALID_ARGUMENT or "nosuchfield" not in (e.details() or ""):
            fail(f"unknown field: {e.code()} {e.details()!r}, want INVALID_ARGUMENT naming it")
    if args.info_stored is not None:
        info = stub.Info(isn_pb2.InfoRequest(), timeout=10)
        if list(info.stored_fields) != args.info_stored.split(","):
            fail(f"Info.stored_fields {list(info.stored_fields)}, want {args.info_stored}")
    print(f"grpcio_stored_check: {checked} hits carry the stored text asked for, in order; unknown field refused")


if __name__ == "__main__":
    main()
