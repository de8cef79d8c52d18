"""`vllm` as a module (vLLM's console script is vllm.entrypoints.cli.main:main): runs the stand-in script."""

import importlib.machinery
import importlib.util
import os
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 4, "vllm")


def main():
    loader = importlib.machinery.SourceFileLoader("vllm_standin_script", os.path.normpath(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    script = importlib.util.module_from_spec(spec)
    loader.exec_module(script)
    return script.main()


if __name__ == "__main__":
    sys.exit(main())
