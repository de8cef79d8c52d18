"""Writes the installed-distribution metadata of the vLLM plugin for the deb/rpm (python/CMakeLists.txt).

    dist_info.py PYPROJECT OUT_DIR     # replaces OUT_DIR/*.dist-info; prints the directory it wrote

The packages install python/fastrestart_vllm as plain modules; vLLM finds plugins only through the
`vllm.general_plugins` entry point, which importlib.metadata reads from a `<name>-<version>.dist-info`
directory beside the package. This writes the minimal one (METADATA and entry_points.txt, from
pyproject.toml's [project] table, so `pip install python/` and the packages register the same entry point).
No RECORD: the files belong to dpkg/rpm, and without one pip refuses to uninstall them.
"""
import re
import shutil
import sys
import tomllib
from pathlib import Path


def fail(msg):
    sys.exit("%s: %s" % (sys.argv[0], msg))


def main():
    if len(sys.argv) != 3:
        fail("usage: dist_info.py PYPROJECT OUT_DIR")
    pyproject, out_dir = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
        name, version = project["name"], project["version"]
        groups = project.get("entry-points", {})
    except (OSError, tomllib.TOMLDecodeError, KeyError) as e:
        fail("%s: %s" % (pyproject, e))
    if not groups:
        fail("%s: project.entry-points: none (vLLM would not find the plugin)" % pyproject)
    # The module's own __version__ must agree, or `pip show` and fastrestart_vllm.__version__ would differ.
    packages = tomllib.loads(pyproject.read_text()).get("tool", {}).get("setuptools", {}).get("packages", [])
    for pkg in packages:
        init = pyproject.parent / pkg / "__init__.py"
        m = re.search(r'^__version__ = "([^"]+)"', init.read_text(), re.M)
        if m and m.group(1) != version:
            fail("%s: __version__ %s differs from %s's project.version %s" % (init, m.group(1), pyproject, version))

    # The directory name: the name normalized with underscores (the binary distribution format's rule).
    dist = out_dir / ("%s-%s.dist-info" % (re.sub(r"[-_.]+", "_", name).lower(), version))
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.dist-info"):  # another version's, from an earlier build: installed otherwise
        shutil.rmtree(old)
    dist.mkdir()
    meta = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + version]
    if "description" in project:
        meta.append("Summary: " + project["description"])
    if "requires-python" in project:
        meta.append("Requires-Python: " + project["requires-python"])
    (dist / "METADATA").write_text("\n".join(meta) + "\n")
    lines = []
    for group in sorted(groups):
        lines.append("[%s]" % group)
        lines += ["%s = %s" % (k, v) for k, v in sorted(groups[group].items())]
        lines.append("")
    (dist / "entry_points.txt").write_text("\n".join(lines))
    print(dist)


if __name__ == "__main__":
    main()
