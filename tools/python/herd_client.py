#!/usr/bin/python3
"""A small Python client for herd's public gRPC API (herd.v1.Gateway).

Needs Debian's python3-grpcio and python3-protobuf, and the generated stubs:
    bazel build //proto/herd/v1:gateway_py
    PYTHONPATH=$(bazel info bazel-genfiles) /usr/bin/python3 tools/python/herd_client.py \
        --gateway 127.0.0.1:PORT --model stories260K --prompt "Once upon a time" -n 64 --temp 0

As a library:
    client = HerdClient("127.0.0.1:PORT")
    for chunk in client.generate("stories260K", "Once upon a time", n_predict=32, temperature=0):
        print(chunk.text, end="")
"""
import argparse
import sys

import grpc

from proto.herd.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc


class HerdClient:
    """Thin wrapper over the Gateway stub; every call carries a deadline."""

    def __init__(self, address, timeout_s=120.0):
        self._channel = grpc.insecure_channel(address)
        self._stub = gateway_pb2_grpc.GatewayStub(self._channel)
        self._timeout = timeout_s

    def list_models(self):
        return list(self._stub.ListModels(gateway_pb2.ListModelsRequest(), timeout=self._timeout).models)

    def tokenize(self, model, text, add_special=True):
        req = gateway_pb2.TokenizeRequest(model=model, text=text, add_special=add_special)
        return list(self._stub.Tokenize(req, timeout=self._timeout).ids)

    def generate(self, model, prompt, n_predict=128, temperature=None, top_k=None, top_p=None,
                 min_p=None, seed=None, stop=()):
        """Yields GenerateResponse messages; the last has finish_reason and usage."""
        req = gateway_pb2.GenerateRequest(model=model, text=prompt, n_predict=n_predict, stop=list(stop))
        s = req.sampling
        if temperature is not None:
            s.temperature = temperature
        if top_k is not None:
            s.top_k = top_k
        if top_p is not None:
            s.top_p = top_p
        if min_p is not None:
            s.min_p = min_p
        if seed is not None:
            s.seed = seed
        yield from self._stub.Generate(req, timeout=self._timeout)

    def close(self):
        self._channel.close()


def main():
    ap = argparse.ArgumentParser(description="Generate text through a herd gateway.")
    ap.add_argument("--gateway", required=True, help="host:port of the gateway's gRPC API")
    ap.add_argument("--model", "-m", required=True)
    ap.add_argument("--prompt", "-p", required=True)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--temp", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--stop", action="append", default=[])
    args = ap.parse_args()
    client = HerdClient(args.gateway)
    try:
        last = None
        for chunk in client.generate(args.model, args.prompt, n_predict=args.n, temperature=args.temp,
                                     seed=args.seed, stop=args.stop):
            sys.stdout.write(chunk.text)
            sys.stdout.flush()
            last = chunk
        if last is not None:
            reason = common_pb2.FinishReason.Name(last.finish_reason)
            print(f"\nfinish: {reason}, completion tokens: {last.usage.completion_tokens}", file=sys.stderr)
    except grpc.RpcError as e:
        print(f"herd_client: error: {e.code().name}: {e.details()}", file=sys.stderr)
        return 1
    finally:
        client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
