"""fastrestart_vllm.launch (`python3 -m fastrestart_vllm.launch serve ...`) over the vLLM reproduction with the
model loader's engine (FAKE_VLLM_ENGINE=loader), with serve.py's one extra step (without torch, the numpy
TensorOps before the loader runs).

    python3 launch.py serve MODEL --port P ...     # LISTEN_FDS and descriptor 3 from fastrestartd
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ["FAKE_VLLM_ENGINE"] = "loader"

import backend  # noqa: E402

if backend.NAME == "numpy":
    from fastrestart_vllm import tensors  # noqa: E402
    from numpy_ops import NumpyOps  # noqa: E402
    tensors.install(NumpyOps())

from fastrestart_vllm.launch import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
