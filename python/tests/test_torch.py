"""The Python binding with torch: bf16 on the host backend, and zero-copy CUDA tensors from a CUDA daemon.

Needs torch (the GPU machine has it; Debian 12 does not: every test skips with the reason). The CUDA
class also needs a GPU and FR_WEIGHTD_BIN built with the CUDA backend.

Run: PYTHONPATH=<build>/python FR_WEIGHTD_BIN=<...>/fastrestart-weightd python3 -m unittest -v test_torch
"""

import gc
import os
import shutil
import unittest

from test_binding import WEIGHTD
from weightd_support import Weightd, checkpoint_dirs

try:
    import torch
    from safetensors.torch import save_file
except ImportError as e:  # CI: Debian 12 has no torch
    torch, IMPORT_ERROR = None, f"torch is not installed ({e})"
else:
    IMPORT_ERROR = ""

import fastrestart

HAVE_CUDA = torch is not None and torch.cuda.is_available()


def torch_tensors(seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    t = {
        "model.embed_tokens.weight": torch.randn(256, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(64, generator=g).to(torch.float32),
        "model.positions": torch.arange(33, dtype=torch.int64),
    }
    return {k: v.to(device) for k, v in t.items()}


class TorchBase(unittest.TestCase):
    backend = "host"

    def setUp(self):
        self.tmp, self.run_dir, self.ckpt = checkpoint_dirs("fr-torch-")
        self.want = torch_tensors(11)
        save_file(self.want, self.ckpt)
        self.config = {"arch": "LlamaForCausalLM", "dtype": "BF16", "tp_rank": 0}
        self.daemon = None

    def tearDown(self):
        if self.daemon is not None:
            self.daemon.stop()
        gc.collect()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self):
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log"), self.backend).start(self)


@unittest.skipIf(torch is None, IMPORT_ERROR)
@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class TorchHostTest(TorchBase):
    def test_bf16_publish_then_zero_copy_attach(self):
        self.start()
        first = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir)
        self.assertFalse(first.hit)
        fastrestart.publish(first.key, self.want, socket_dir=self.run_dir)
        r = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir)
        self.assertTrue(r.hit, r.reason)
        got = {k: torch.from_dlpack(v) for k, v in r.tensors.items()}
        self.assertEqual(sorted(got), sorted(self.want))
        for k, v in self.want.items():
            self.assertEqual(got[k].dtype, v.dtype, k)
            self.assertTrue(torch.equal(got[k], v), k)
        # zero-copy: the torch tensor is the binding's memory, not a copy
        self.assertEqual(got["model.norm.weight"].data_ptr(), r.tensors["model.norm.weight"].data_ptr)


@unittest.skipIf(torch is None, IMPORT_ERROR)
@unittest.skipUnless(HAVE_CUDA, "no CUDA device visible to torch")
@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class TorchCudaTest(TorchBase):
    backend = "cuda"

    def test_cuda_publish_then_attach_is_zero_copy_and_equal(self):
        self.start()
        dev = "cuda:0"
        src = {k: v.to(dev) for k, v in self.want.items()}
        miss = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir, device=dev)
        self.assertFalse(miss.hit)
        info = fastrestart.publish(miss.key, src, socket_dir=self.run_dir, device=dev)
        self.assertGreater(info["bytes"], 0)
        del src
        r = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir, device=dev, verify=True)
        self.assertTrue(r.hit, r.reason)
        self.assertEqual(r.device, dev)
        got = {k: torch.from_dlpack(v) for k, v in r.tensors.items()}
        for k, v in self.want.items():
            self.assertEqual(got[k].device, torch.device(dev), k)
            self.assertEqual(got[k].data_ptr(), r.tensors[k].data_ptr, k)  # the pool itself
            self.assertTrue(torch.equal(got[k].cpu(), v), k)
        # A real kernel reads the attached weights.
        y = got["model.layers.0.mlp.up_proj.weight"].float() @ got["model.norm.weight"]
        want = self.want["model.layers.0.mlp.up_proj.weight"].float() @ self.want["model.norm.weight"]
        torch.testing.assert_close(y.cpu(), want, rtol=1e-3, atol=1e-3)

    def test_copy_mode_gives_writable_private_tensors(self):
        self.start()
        dev = "cuda:0"
        fastrestart.publish(fastrestart.identify(self.ckpt, self.config), {k: v.to(dev) for k, v in self.want.items()},
                            socket_dir=self.run_dir, device=dev)
        r = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir, device=dev, mode="copy")
        self.assertTrue(r.hit, r.reason)
        t = torch.from_dlpack(r.tensors["model.norm.weight"])
        t.zero_()  # a private copy: writing it must not change what the next engine attaches
        torch.cuda.synchronize()
        again = fastrestart.attach(self.ckpt, self.config, socket_dir=self.run_dir, device=dev)
        self.assertTrue(torch.equal(torch.from_dlpack(again.tensors["model.norm.weight"]).cpu(),
                                    self.want["model.norm.weight"]))


if __name__ == "__main__":
    unittest.main()
