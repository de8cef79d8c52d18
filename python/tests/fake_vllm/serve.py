"""An engine start through the vLLM reproduction: `vllm serve` (vllm/entrypoints/cli/main.py) in this process,
with the model loader's engine (FAKE_VLLM_ENGINE=loader).

The one step real vLLM does not need: without torch, fastrestart_vllm's TensorOps seam gets the numpy
implementation before the loader runs. With torch nothing is installed and TorchOps runs, as under vLLM.

    python3 serve.py MODEL --load-format fastrestart --model-loader-extra-config '{"socket_dir": "/run/x"}'
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

from vllm.entrypoints.cli.main import main  # noqa: E402

if __name__ == "__main__":
    sys.argv = ["vllm", "serve"] + sys.argv[1:]
    sys.exit(main())
