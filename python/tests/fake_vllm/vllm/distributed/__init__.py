"""The parallel state a worker has after vLLM initialised it; set_parallel_state() plays that part."""

import types

_state = {"tp_size": 1, "tp_rank": 0, "pp_size": 1, "pp_rank": 0}


def set_parallel_state(tp_size=1, tp_rank=0, pp_size=1, pp_rank=0):
    _state.update(tp_size=tp_size, tp_rank=tp_rank, pp_size=pp_size, pp_rank=pp_rank)


def get_tensor_model_parallel_world_size():
    return _state["tp_size"]


def get_tensor_model_parallel_rank():
    return _state["tp_rank"]


def get_pp_group():
    return types.SimpleNamespace(world_size=_state["pp_size"], rank_in_group=_state["pp_rank"])
