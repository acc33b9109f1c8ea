"""Calls a gRPC server with the C-core client (Debian's python3-grpcio), for tests/interop_test.ts.

Messages cross as bytes (no generated code; the test encodes and decodes them with protobuf-es).
Reads one JSON document on stdin:

    {"address": "127.0.0.1:50051",
     "calls": [{"kind": "unary" | "bidi_streaming", "path": "/pkg.Service/Method",
                "requests": ["<base64>", ...], "metadata": {"key": ["value", ...]},
                "timeoutMs": 10000}]}

makes the calls one after another on one channel, and writes a JSON array with one outcome per
call: {"responses": ["<base64>", ...], "code": 0, "details": "...",
"metadata": {"key": ["value", ...]}}, where metadata are the trailers as C-core hands them to the
application (values of keys ending in -bin in base64) and details is the status message after
C-core's percent-decoding. Run it with /usr/bin/python3, the interpreter Debian's grpcio is built
for.
"""

import base64
import json
import sys

import grpc


def metadata_out(pairs):
    out = {}
    for key, value in pairs or ():
        if key.endswith("-bin"):
            value = base64.b64encode(value).decode("ascii")
        out.setdefault(key, []).append(value)
    return out


def metadata_in(metadata):
    return [(key, value) for key, values in metadata.items() for value in values]


def call_once(channel, call):
    path = call["path"]
    requests = [base64.b64decode(r) for r in call["requests"]]
    metadata = metadata_in(call.get("metadata", {}))
    timeout = call.get("timeoutMs", 10000) / 1000
    kind = call.get("kind", "unary")
    responses = []
    # No serializers: requests and responses are bytes.
    if kind == "unary":
        method = channel.unary_unary(path)
        try:
            response, state = method.with_call(requests[0], metadata=metadata, timeout=timeout)
            responses.append(response)
        except grpc.RpcError as error:
            state = error
    elif kind == "bidi_streaming":
        state = channel.stream_stream(path)(iter(requests), metadata=metadata, timeout=timeout)
        try:
            for response in state:
                responses.append(response)
        except grpc.RpcError:
            pass
    else:
        raise ValueError(f"unsupported kind {kind}")
    return {
        "responses": [base64.b64encode(r).decode("ascii") for r in responses],
        "code": state.code().value[0],
        "details": state.details() or "",
        "metadata": metadata_out(state.trailing_metadata()),
    }


def main():
    request = json.load(sys.stdin)
    # Straight to the server even if the environment names an HTTP proxy.
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(request["address"], options=options) as channel:
        outcomes = [call_once(channel, call) for call in request["calls"]]
    json.dump(outcomes, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
