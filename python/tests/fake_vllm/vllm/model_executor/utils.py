"""weights_already_processed(): as in vLLM, a context flag process_weights_after_loading honours."""

import contextlib
from contextvars import ContextVar

_pre_processed = ContextVar("weights_pre_processed", default=False)


@contextlib.contextmanager
def weights_already_processed():
    token = _pre_processed.set(True)
    try:
        yield
    finally:
        _pre_processed.reset(token)


def is_weights_pre_processed():
    return _pre_processed.get()
