"""Prints where `import` finds packages installed under the prefix given as argv[1] (python/CMakeLists.txt).

On Debian (and its derivatives) the layout is Debian's, whichever python3 runs this (a venv, a python3 built
from source): /usr/lib/python3/dist-packages for /usr (the deb_system scheme, what the packages install to)
and <prefix>/lib/python3.X/dist-packages otherwise (/usr/local: Debian's python3 searches there). Elsewhere
the interpreter's own posix_prefix scheme.
"""
import os
import sys
import sysconfig

prefix = sys.argv[1].rstrip("/") or "/"
debian = "deb_system" in sysconfig.get_scheme_names() or os.path.exists("/etc/debian_version")
if debian:
    if prefix == "/usr":
        print("/usr/lib/python3/dist-packages")
    else:
        print("%s/lib/python%d.%d/dist-packages" % (prefix, sys.version_info[0], sys.version_info[1]))
else:
    print(sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
