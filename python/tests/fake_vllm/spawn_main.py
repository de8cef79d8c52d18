"""A process of the vLLM reproduction's structure (multiprocessing's spawn of vLLM's engine core or worker):
    python3 spawn_main.py engine_core|worker ARGS_JSON
With numpy tensors (no torch), fastrestart_vllm's TensorOps get the numpy implementation first, as
serve.py does for the API server."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import backend  # noqa: E402

if backend.NAME == "numpy":
    from fastrestart_vllm import tensors  # noqa: E402
    from numpy_ops import NumpyOps  # noqa: E402
    tensors.install(NumpyOps())


def main():
    role, args = sys.argv[1], argparse.Namespace(**json.loads(sys.argv[2]))
    if role == "engine_core":
        from vllm.v1.engine.core import run_engine_core
        return run_engine_core(args)
    from vllm.v1.worker.worker_base import run_worker
    return run_worker(args)


if __name__ == "__main__":
    sys.exit(main())
