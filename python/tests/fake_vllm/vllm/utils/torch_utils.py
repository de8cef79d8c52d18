import contextlib

import backend


@contextlib.contextmanager
def set_default_torch_dtype(dtype):
    old = backend.get_default_dtype()
    backend.set_default_dtype(dtype)
    try:
        yield
    finally:
        backend.set_default_dtype(old)
