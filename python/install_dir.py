"""Prints where `import` finds packages installed under the prefix given as argv[1] (python/CMakeLists.txt).

Debian's python3 searches /usr/lib/python3/dist-packages (its deb_system scheme) and
<prefix>/lib/python3.X/dist-packages for /usr/local; elsewhere the interpreter's own posix_prefix scheme.
"""
import sys
import sysconfig

prefix = sys.argv[1]
if "deb_system" in sysconfig.get_scheme_names():
    if prefix == "/usr":
        print(sysconfig.get_path("platlib", "deb_system"))
    else:
        print("%s/lib/python%d.%d/dist-packages" % (prefix, sys.version_info[0], sys.version_info[1]))
else:
    print(sysconfig.get_path("platlib", "posix_prefix", vars={"base": prefix, "platbase": prefix}))
