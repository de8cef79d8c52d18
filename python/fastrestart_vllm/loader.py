"""FastrestartModelLoader: vLLM's ``--load-format fastrestart`` (docs/vllm-plugin.md).

Warm path: ask the fastrestart-weightd of this rank's GPU for the key (cache_key.py); on a hit, build the
model on the meta device, register the attached tensors on it (no copy; read-only in zero_copy mode), and
run vLLM's post-processing in its "already processed" mode so quantization methods rebuild only their
Python-side state. Cold path: vLLM's default loader (load, post-process), then publish the final tensors so
the next start attaches. Every load ends with one result line on stderr (result_line.py).
"""

import dataclasses
import gc
import logging
import time

from vllm.model_executor.model_loader.base_loader import BaseModelLoader

from . import cache_key, result_line, state, tensors
from .options import parse_options

__all__ = ["FastrestartModelLoader", "LOAD_FORMAT"]

LOAD_FORMAT = "fastrestart"
ZERO_COPY_MARK = "_fastrestart_zero_copy"  # set on a model whose weights are the daemon's read-only pool
# Under vLLM's logger tree, so vLLM's handler and format apply.
logger = logging.getLogger("vllm.fastrestart_vllm")


class _NoWarmPath(Exception):
    """The warm path cannot be tried at all (no local checkpoint, a vLLM without the needed API)."""


def _ms(t0):
    return (time.monotonic() - t0) * 1e3


def _vllm_version():
    try:
        import vllm
        return str(getattr(vllm, "__version__", "") or "")
    except ImportError:
        return ""


class _VllmApi:
    """The vLLM functions the warm path calls, resolved once; missing ones make the warm path unavailable."""

    def __init__(self):
        from vllm.model_executor.model_loader.utils import initialize_model, process_weights_after_loading
        self.initialize_model = initialize_model
        self.process_weights_after_loading = process_weights_after_loading
        try:
            from vllm.utils.torch_utils import set_default_torch_dtype
        except ImportError:  # older vLLM kept it beside the loaders
            from vllm.model_executor.model_loader.utils import set_default_torch_dtype
        self.set_default_torch_dtype = set_default_torch_dtype
        try:
            from vllm.model_executor.utils import weights_already_processed
        except ImportError:
            raise _NoWarmPath("this vLLM has no weights_already_processed() (vLLM 0.30 and later have it): "
                              "post-processing would run twice on published tensors") from None
        self.weights_already_processed = weights_already_processed


def _ranks(vllm_config):
    from vllm.distributed import (get_pp_group, get_tensor_model_parallel_rank,
                                  get_tensor_model_parallel_world_size)
    pp = get_pp_group()
    parallel = vllm_config.parallel_config
    return {"tp_size": get_tensor_model_parallel_world_size(), "tp_rank": get_tensor_model_parallel_rank(),
            "pp_size": pp.world_size, "pp_rank": pp.rank_in_group,
            "dp_size": getattr(parallel, "data_parallel_size", 1) or 1,
            "dp_rank": getattr(parallel, "data_parallel_rank", 0) or 0}


class FastrestartModelLoader(BaseModelLoader):
    """Registered as ``--load-format fastrestart`` by fastrestart_vllm.register() (the vLLM plugin)."""

    def __init__(self, load_config):
        super().__init__(load_config)
        # Checked here, before anything loads: a typo in the extra config fails the start naming the key.
        self.options = parse_options(load_config.model_loader_extra_config)
        try:
            import fastrestart
        except ImportError as e:
            raise ImportError("--load-format fastrestart needs the fastrestart Python module (docs/python.md): %s"
                              % e) from None
        self._fr = fastrestart

    # ---- BaseModelLoader ----

    def _default_loader(self):
        from vllm.model_executor.model_loader.default_loader import DefaultModelLoader
        # The default loader must see neither our load format nor our extra config keys.
        return DefaultModelLoader(dataclasses.replace(self.load_config, load_format="auto",
                                                      model_loader_extra_config={}))

    def download_model(self, model_config):
        self._default_loader().download_model(model_config)

    def load_weights(self, model, model_config):
        """In-place reload of an existing model from the checkpoint (vLLM's weight-update path): what the
        default loader does; the cache is for whole engine starts. Refused after a zero_copy hit: the
        weights are the daemon's read-only mapping, and a write would fault (use mode "copy")."""
        if getattr(model, ZERO_COPY_MARK, False):
            raise RuntimeError("--load-format fastrestart: the weights are the daemon's read-only memory "
                               "(mode zero_copy); in-place weight updates need mode \"copy\"")
        self._default_loader().load_weights(model, model_config)

    def load_model(self, vllm_config, model_config, prefix=""):
        t0 = time.monotonic()
        opts = self.options
        ops = tensors.current()
        load_device = vllm_config.device_config.device if self.load_config.device is None else self.load_config.device
        target, device = ops.target(load_device)
        ranks = _ranks(vllm_config)
        report = result_line.LoadReport(
            result="fail", device=device, mode=opts.mode,
            tp="%d/%d" % (ranks["tp_rank"], ranks["tp_size"]), pp="%d/%d" % (ranks["pp_rank"], ranks["pp_size"]),
            dp="%d/%d" % (ranks["dp_rank"], ranks["dp_size"]))

        files = config = key = None
        daemon_answered = False
        try:
            api = _VllmApi()
            files = cache_key.checkpoint_files(model_config, self.load_config)
            config = cache_key.key_config(vllm_config, model_config, ranks, prefix, _vllm_version())
        except (_NoWarmPath, cache_key.CacheKeyError) as e:
            reason = "no warm path: %s" % e
        else:
            ta = time.monotonic()
            try:
                r = self._fr.attach(files, config, mode=opts.mode, fallback=True,
                                    connect_timeout_s=opts.connect_timeout_s, state_timeout_s=opts.state_timeout_s,
                                    verify=opts.verify, socket_dir=opts.socket_dir, device=device)
            except (ValueError, RuntimeError) as e:  # a file vanished since it was listed, a refused request
                r, reason = None, "attach: %s" % e
            report.attach_ms = _ms(ta)
            # The identities the attach took before vLLM reads the files: a publish after the cold load goes
            # under them, and the daemon refuses it if a file changed during the load.
            key = r.key if r is not None else None
            if r is not None and r.hit:
                try:
                    model, count, nbytes = self._warm(vllm_config, model_config, prefix, target, r, ops, api)
                except Exception as e:  # noqa: BLE001 -- any failure of the warm path is reported, then handled
                    reason = "warm path failed: %s: %s" % (type(e).__name__, e)
                    logger.warning("fastrestart: %s", reason, exc_info=True)
                    model = None
                    del r
                    gc.collect()  # drop the half-built model's references to the mapping
                    ops.release_memory()
                else:
                    report.result, report.key, report.tensors, report.bytes = "hit", r.fingerprint, count, nbytes
                    # On the model, not the loader: vLLM's weight update makes a new loader for it.
                    setattr(model, ZERO_COPY_MARK, opts.mode == "zero_copy")
                    report.total_ms = _ms(t0)
                    result_line.emit(report)
                    return model
            elif r is not None:
                # The daemon answered (it reports its GPU) without the key; without an answer, reason is why.
                daemon_answered = bool(r.daemon_gpu_uuid)
                reason = r.reason + (" (differs: %s)" % ", ".join(r.differs) if r.differs else "")

        if not opts.fallback:
            report.reason = "fallback is off: " + reason
            report.total_ms = _ms(t0)
            result_line.emit(report)
            raise RuntimeError("--load-format fastrestart: no warm start and fallback is off: %s" % reason)

        tl = time.monotonic()
        try:
            model = self._default_loader().load_model(vllm_config=vllm_config, model_config=model_config,
                                                      prefix=prefix)
        except BaseException as e:
            report.reason = "%s; the cold load failed too: %s: %s" % (reason, type(e).__name__, e)
            report.load_ms, report.total_ms = _ms(tl), _ms(t0)
            result_line.emit(report)
            raise
        report.load_ms = _ms(tl)
        report.result = "miss" if daemon_answered else "fallback"
        report.publish = "skipped"
        if daemon_answered:
            retargeted = _retargeted(self._fr, files, config, key)
            reason += ("; not published: " + retargeted) if retargeted else self._publish(model, key, device, ops, report)
            if report.publish == "ok" and opts.mode == "zero_copy":
                reason += self._adopt(model, key, device, ops, report)
        report.reason = reason
        report.total_ms = _ms(t0)
        result_line.emit(report)
        return model

    # ---- the two halves ----


    def _warm(self, vllm_config, model_config, prefix, target, r, ops, api):
        with api.set_default_torch_dtype(model_config.dtype):
            with ops.meta_device():
                model = api.initialize_model(vllm_config=vllm_config, model_config=model_config, prefix=prefix)
            count, nbytes, rebound = state.bind_state(model, r.tensors, ops)
            # The tensors are final: quantization methods rebuild only what tensors cannot carry (kernels,
            # Python floats); vLLM raises for a method that cannot.
            with api.weights_already_processed():
                api.process_weights_after_loading(model, model_config, target)
            left = state.drop_meta(model, ops)
        if rebound:
            logger.info("fastrestart: rebound %d references held by value to the attached tensors: %s",
                        len(rebound), ", ".join(rebound[:8]))
        if left:
            logger.info("fastrestart: %d placeholders the cold post-processing consumed are None: %s",
                        len(left), ", ".join(left[:8]))
        return model.eval(), count, nbytes

    def _publish(self, model, key, device, ops, report):
        """Publish the cold-loaded model's final tensors; returns text to append to the reason."""
        why_not = state.check_rebuildable(model)
        if why_not:
            return "; not published: " + why_not
        tp = time.monotonic()
        try:
            arrays, count, nbytes, relaid = state.export_state(model, ops, device)
        except tensors.Unpublishable as e:
            return "; not published: %s" % e
        if relaid:
            logger.warning("fastrestart: %d strided views are published dense; after an attach their strides "
                           "differ from a cold load's: %s", len(relaid), ", ".join(relaid[:8]))
        try:
            info = self._fr.publish(key, arrays, socket_dir=self.options.socket_dir, device=device,
                                    connect_timeout_s=self.options.connect_timeout_s)
        except (RuntimeError, ValueError) as e:
            report.publish = "busy" if str(e).startswith("busy") else "failed"
            report.publish_ms = _ms(tp)
            return "; publish: %s" % e
        finally:
            del arrays
        report.publish, report.publish_ms = "ok", _ms(tp)
        report.key, report.tensors, report.bytes = info["fingerprint"], count, nbytes
        return ""


    def _adopt(self, model, key, device, ops, report):
        """zero_copy after a publish: attach the entry just published and bind its tensors in place of the
        cold-loaded ones, which are freed, so the first life holds one copy of the weights, as every later
        life does (docs/vllm-plugin.md, "One copy from the first life"). The tensors are the post-processed
        ones the publish exported, so nothing is processed again; references held by value are rebound as
        on a hit. Any failure keeps serving the own copy (the values are the same either way) and says why;
        returns text to append to the reason."""
        ta = time.monotonic()
        why = None
        try:
            r = self._fr.attach(key, mode="zero_copy", fallback=True, connect_timeout_s=self.options.connect_timeout_s,
                                state_timeout_s=self.options.state_timeout_s, socket_dir=self.options.socket_dir,
                                device=device)
        except (ValueError, RuntimeError) as e:
            r, why = None, "the attach after the publish failed: %s" % e
        else:
            if not r.hit:
                why = "the attach after the publish missed: %s" % r.reason
            elif r.fingerprint != report.key:
                why = "the daemon's entry %s is not the one published (%s)" % (r.fingerprint, report.key)
        if why is None:
            try:
                state.bind_state(model, r.tensors, ops)
            except state.BindError as e:  # nothing was registered past the failing tensor: a mix of equal values
                why = "the entry just published does not bind: %s" % e
        report.adopt_ms = _ms(ta)
        if why is not None:
            report.adopt = "failed"
            logger.warning("fastrestart: serving this engine's own copy of the weights, not the daemon's: %s", why)
            return "; not adopted: " + why
        del r
        gc.collect()  # the cold-loaded tensors' last references
        ops.release_memory()  # their memory back to the driver: one copy on the GPU, as nvidia-smi shows
        setattr(model, ZERO_COPY_MARK, True)
        report.adopt = "ok"
        logger.info("fastrestart: adopted the daemon's copy (%s); this engine's own copy is freed", report.key)
        return ""


def _retargeted(fr, files, config, key):
    """Why the files vLLM read may be others than the ones `key` identified, or "". vLLM opens the checkpoint by
    its paths itself, so the plugin cannot read through the identified descriptors as the other engines
    do: a path whose symlink (`current -> v2`, or a file's link into a content store) now leads to another
    file than at identify time may have been read from either, and is never published under `key`'s
    identities (docs/reliability.md, "How files are identified")."""
    try:
        now = fr.identify(files, config)
    except (ValueError, RuntimeError):
        return ""  # a file went: the daemon refuses the publish and names it
    was = {f["path"] for f in key.files}
    moved = [f["path"] for f in now.files if f["path"] not in was]
    if moved:
        return ("the checkpoint's paths lead to other files than when they were identified (a symlink was "
                "retargeted during the load: now %s)" % ", ".join(moved[:3]))
    return ""  # the same files: the daemon re-checks their identities and names any change
