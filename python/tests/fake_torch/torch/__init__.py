"""NOT torch: just enough of its surface for the reference engine to reach its pre_gpu gate on a machine
without torch (CI), for test_refengine_standby. Everything the engine does before that gate works (grad
mode, devices, dtypes, the meta device); anything on CUDA raises, naming the call, so a test sees exactly
when the engine first touched the GPU: after its release, never while parked."""

import sys


class dtype:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "torch." + self.name


bfloat16, float16, float32 = dtype("bfloat16"), dtype("float16"), dtype("float32")


class device:
    def __init__(self, spec):
        self.type, _, index = str(spec).partition(":")
        self.index = int(index) if index else None
        self.spec = str(spec)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __str__(self):
        return self.spec


def set_grad_enabled(mode):
    return None


class _Cuda:
    """Every attribute is a call that fails loudly: the first CUDA use is visible in the engine's log."""

    def __getattr__(self, name):
        def touched(*args, **kwargs):
            print(f"fake torch: torch.cuda.{name} called", file=sys.stderr, flush=True)
            raise RuntimeError(f"fake torch: torch.cuda.{name} (no CUDA here)")
        return touched


cuda = _Cuda()


def empty(*args, **kwargs):
    raise RuntimeError("fake torch: torch.empty (no tensors here)")
