"""Follows a server-streaming gRPC method with the C-core client (Debian's python3-grpcio), for
tests/audit_test.ts (tests/grpcio_client.py makes unary and bidirectional calls only).

Messages cross as bytes (no generated code; the test encodes and decodes them with protobuf-es).
Reads one JSON document on stdin:

    {"address": "127.0.0.1:50051", "path": "/pkg.Service/Method", "request": "<base64>",
     "metadata": {"key": ["value", ...]}, "timeoutMs": 30000, "count": 10}

makes the call on a new channel and reads its responses until `count` arrived (then it cancels
the call), the stream ends, or the deadline passes, and writes one JSON object:
{"responses": ["<base64>", ...], "code": 0, "details": "..."}, where code is the status C-core
reports (1, CANCELLED, after the cancel; 4, DEADLINE_EXCEEDED, when the deadline passed first).
Run it with /usr/bin/python3, the interpreter Debian's grpcio is built for.
"""

import base64
import json
import sys

import grpc


def main():
    request = json.load(sys.stdin)
    metadata = [
        (key, value) for key, values in request.get("metadata", {}).items() for value in values
    ]
    count = request.get("count")
    responses = []
    # Straight to the server even if the environment names an HTTP proxy.
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(request["address"], options=options) as channel:
        # No serializers: the request and the responses are bytes.
        call = channel.unary_stream(request["path"])(
            base64.b64decode(request["request"]),
            metadata=metadata,
            timeout=request.get("timeoutMs", 30000) / 1000,
        )
        try:
            for response in call:
                responses.append(response)
                if count is not None and len(responses) >= count:
                    call.cancel()
                    break
        except grpc.RpcError:
            pass  # the status says what happened
        outcome = {
            "responses": [base64.b64encode(r).decode("ascii") for r in responses],
            "code": call.code().value[0],
            "details": call.details() or "",
        }
    json.dump(outcome, sys.stdout)


if __name__ == "__main__":
    main()
