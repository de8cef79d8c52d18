"""vllm.plugins as in vLLM (vllm/plugins/__init__.py load_general_plugins, load_plugins_by_group; checked
at 01425553bdbed63400efa72ff14a8f4ffe20bada): entry points of group vllm.general_plugins, filtered by
VLLM_PLUGINS, loaded once per process (plugins_loaded); each loaded function is called, and an exception
from it propagates (only a failed `plugin.load()` is logged and skipped). Callers, in vLLM's order:
AsyncEngineArgs.add_cli_args (the parser of `vllm serve`), EngineCore.__init__,
WorkerWrapperBase.init_worker."""

import logging
from importlib.metadata import entry_points

from vllm import envs

logger = logging.getLogger(__name__)
DEFAULT_PLUGINS_GROUP = "vllm.general_plugins"
plugins_loaded = False


def load_plugins_by_group(group):
    allowed = envs.VLLM_PLUGINS
    plugins = {}
    for plugin in entry_points(group=group):
        if allowed is None or plugin.name in allowed:
            try:
                plugins[plugin.name] = plugin.load()
            except Exception:
                logger.exception("Failed to load plugin %s", plugin.name)
    return plugins


def load_general_plugins():
    global plugins_loaded
    if plugins_loaded:
        return
    plugins_loaded = True
    for func in load_plugins_by_group(DEFAULT_PLUGINS_GROUP).values():
        func()
