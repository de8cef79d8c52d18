# Packaging: install rules for the systemd unit, tmpfiles.d/sysusers.d, configuration and examples, docs and man
# pages, and CPack (DEB + RPM). The library's .pc file and the Python packages are installed by their own folders.
# Included from the top-level CMakeLists.txt, after every add_subdirectory():
#     include(packaging/Packaging.cmake)
# Build the packages with scripts/package.sh (configures with CMAKE_INSTALL_PREFIX=/usr; docs/packaging.md).
include_guard(GLOBAL)
include(GNUInstallDirs)

set(FR_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

# --- systemd unit -------------------------------------------------------------------------------------
# The unit names /usr/bin/... and /etc/fastrestart/...; a build with another prefix gets its own bindir and
# sysconfdir substituted (/usr/local/bin, /usr/local/etc/fastrestart), so a source install is consistent.
# Relative to the prefix: /usr/lib/systemd/system in the packages (also right on merged-/usr Debian 12);
# /usr/local/lib/systemd/system for a plain `cmake --install` (systemd searches both). An absolute path here
# would make CPack's RPM mark the unit %config.
set(FR_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING "Where fastrestart@.service is installed")
file(READ ${FR_PACKAGING_DIR}/systemd/fastrestart@.service _fr_unit)
string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_FULL_BINDIR}/" _fr_unit "${_fr_unit}")
string(REPLACE "/etc/fastrestart/" "${CMAKE_INSTALL_FULL_SYSCONFDIR}/fastrestart/" _fr_unit "${_fr_unit}")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/packaging/fastrestart@.service CONTENT "${_fr_unit}" @ONLY)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${FR_PACKAGING_DIR}/systemd/fastrestart@.service)
install(FILES ${PROJECT_BINARY_DIR}/packaging/fastrestart@.service DESTINATION ${FR_SYSTEMD_UNIT_DIR})

# --- tmpfiles.d, sysusers.d -------------------------------------------------------------------------------
# /run/fastrestart (0700 root:root; the socket directory every instance shares) and the fastrestart group
# for control sockets opened to a group (docs/systemd.md "Control socket access"). Relative destinations:
# /usr/lib/{tmpfiles,sysusers}.d in the packages.
install(FILES ${FR_PACKAGING_DIR}/tmpfiles.d/fastrestart.conf DESTINATION lib/tmpfiles.d)
install(FILES ${FR_PACKAGING_DIR}/sysusers.d/fastrestart.conf DESTINATION lib/sysusers.d)

# --- configuration --------------------------------------------------------------------------------------
# The default /etc/fastrestart layout: example.toml (a conffile, 0644 like any example; secrets such as
# HF_TOKEN belong in /etc/fastrestart/<instance>.env, 0600), the template to copy to
# /etc/fastrestart/<instance>.toml. CMAKE_INSTALL_FULL_SYSCONFDIR is /etc when the prefix is /usr.
set(FR_EXAMPLE_CONFIG ${PROJECT_SOURCE_DIR}/config/example.toml)
set(FR_CONFIG_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/fastrestart)
if(EXISTS ${FR_EXAMPLE_CONFIG})
  install(FILES ${FR_EXAMPLE_CONFIG} DESTINATION ${FR_CONFIG_DIR})
else()
  message(WARNING "packaging: ${FR_EXAMPLE_CONFIG} is missing; the packages will ship no example configuration")
endif()
# Every shipped example (config/*.toml, by glob: a new example is packaged without touching this file) under
# /usr/share/doc/fastrestart/examples. ctest config_examples_check validates the same glob.
file(GLOB FR_EXAMPLE_CONFIGS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/config/*.toml)
install(FILES ${FR_EXAMPLE_CONFIGS} DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)

# --- documentation ----------------------------------------------------------------------------------------
foreach(_fr_doc README.md docs/systemd.md docs/packaging.md docs/config.md docs/supervisor.md docs/weightd.md
                docs/engine_loader.md docs/python.md docs/protocol.md docs/health.md docs/operations.md
                docs/vllm.md docs/vllm-plugin.md docs/snapshot.md docs/kubernetes.md docs/listen-socket.md)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${_fr_doc})
    install(FILES ${PROJECT_SOURCE_DIR}/${_fr_doc} DESTINATION ${CMAKE_INSTALL_DOCDIR})
  endif()
endforeach()
# Debian wants copyright and a compressed changelog in /usr/share/doc/<package> (lintian checks both); the
# RPM carries them too (copyright is the same statement; the changelog is harmless there).
install(FILES ${FR_PACKAGING_DIR}/deb/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
# lintian overrides, each with its reason (docs/packaging.md "lintian").
install(FILES ${FR_PACKAGING_DIR}/deb/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME fastrestart)
find_program(FR_GZIP gzip REQUIRED)
# A native package (no Debian revision in the version): the changelog is changelog.gz.
set(FR_DEB_CHANGELOG_GZ ${PROJECT_BINARY_DIR}/packaging/deb/changelog.gz)
add_custom_command(OUTPUT ${FR_DEB_CHANGELOG_GZ}
  COMMAND ${FR_GZIP} -9 -n -c ${FR_PACKAGING_DIR}/deb/changelog > ${FR_DEB_CHANGELOG_GZ}
  DEPENDS ${FR_PACKAGING_DIR}/deb/changelog VERBATIM)
add_custom_target(fr_deb_changelog ALL DEPENDS ${FR_DEB_CHANGELOG_GZ})
install(FILES ${FR_DEB_CHANGELOG_GZ} DESTINATION ${CMAKE_INSTALL_DOCDIR})

# --- man pages ---------------------------------------------------------------------------------------------
# fastrestartd(8), fastrestartctl(1), fastrestart.toml(5) and one for every other program, rendered with
# pandoc at build time from docs/man/ (a page there, followed by the project doc it introduces where the
# doc is the reference: config.md, weightd.md, tinyengine.md), gzip -9n (packaging/ManPage.cmake).
option(FASTRESTART_MAN "Build the man pages with pandoc (Debian: pandoc)" ON)
find_program(FR_PANDOC pandoc)
if(FASTRESTART_MAN AND FR_PANDOC)
  set(_fr_man_pages
      "fastrestartd.8|docs/man/fastrestartd.8.md"
      "fastrestartctl.1|docs/man/fastrestartctl.1.md"
      "fastrestart.toml.5|docs/man/fastrestart.toml.5.md,docs/config.md"
      "fastrestart-weightd.8|docs/man/fastrestart-weightd.8.md,docs/weightd.md"
      "fastrestart-weightctl.1|docs/man/fastrestart-weightctl.1.md,docs/weightd.md"
      "fastrestart-tinyengine.1|docs/man/fastrestart-tinyengine.1.md,docs/tinyengine.md"
      "fastrestart-front.1|docs/man/fastrestart-front.1.md,docs/front.md"
      "fastrestart-snapshot.8|docs/man/fastrestart-snapshot.8.md")
  set(_fr_man_outputs "")
  foreach(_fr_m IN LISTS _fr_man_pages)
    string(REPLACE "|" ";" _fr_m "${_fr_m}")
    list(GET _fr_m 0 _fr_page)
    list(GET _fr_m 1 _fr_srcs)
    string(REPLACE "," ";" _fr_srcs "${_fr_srcs}")
    list(TRANSFORM _fr_srcs PREPEND ${PROJECT_SOURCE_DIR}/)
    string(REGEX MATCH "[0-9]$" _fr_sec "${_fr_page}")
    set(_fr_out ${PROJECT_BINARY_DIR}/man/${_fr_page}.gz)
    list(JOIN _fr_srcs "," _fr_srcs_arg)   # one argument: a ";" would split it
    add_custom_command(OUTPUT ${_fr_out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/man
      COMMAND ${CMAKE_COMMAND} -DPANDOC=${FR_PANDOC} -DGZIP=${FR_GZIP} -DOUT=${_fr_out}
              -DVERSION=${PROJECT_VERSION} -DSOURCES=${_fr_srcs_arg} -P ${FR_PACKAGING_DIR}/ManPage.cmake
      DEPENDS ${_fr_srcs} ${FR_PACKAGING_DIR}/ManPage.cmake ${FR_PACKAGING_DIR}/man-tables.lua ${FR_PACKAGING_DIR}/man-before.roff
      COMMENT "man page ${_fr_page}" VERBATIM)
    install(FILES ${_fr_out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${_fr_sec})
    list(APPEND _fr_man_outputs ${_fr_out})
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${_fr_man_outputs})
elseif(FASTRESTART_MAN)
  message(WARNING "packaging: pandoc not found (scripts/deps.sh installs it); no man pages will be built or packaged")
endif()

# --- CPack ------------------------------------------------------------------------------------------------
set(CPACK_GENERATOR "DEB;RPM" CACHE STRING "CPack generators")
set(CPACK_PACKAGE_NAME fastrestart)
set(CPACK_PACKAGE_VENDOR "fastrestart")
set(CPACK_PACKAGE_CONTACT "fastrestart maintainers <maintainers@fastrestart.dev>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Restart supervisor for LLM serving that keeps weights resident in GPU memory")
# The Debian extended description: lines under 80 characters (lintian).
set(CPACK_PACKAGE_DESCRIPTION
"fastrestart keeps an inference engine's weights resident in GPU memory across
engine restarts and hands them to the next engine zero-copy, so a crash, an OOM
kill or a flag change costs seconds instead of minutes. Ships fastrestartd and
fastrestartctl (the supervisor, one systemd instance fastrestart@NAME per
model), fastrestart-weightd and fastrestart-weightctl (the per-GPU weight
daemon), fastrestart-tinyengine (a small engine for demos and tests), the
engine_loader library (libfastrestart_engine_loader, headers, pkg-config) and
its Python module.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages CACHE PATH "Where CPack writes the packages")
# Stripped like any distribution package (lintian: unstripped-binary-or-object); debugging builds use the tree.
set(CPACK_STRIP_FILES ON)
set(CPACK_SOURCE_IGNORE_FILES "/build.*/" "/\\\\.git/")

# The maintainer scripts are generated into the build tree with the unit's real name.
set(FR_UNIT_GLOB "fastrestart@*.service")
foreach(_fr_s postinst prerm postrm triggers)
  configure_file(${FR_PACKAGING_DIR}/deb/${_fr_s}.in ${PROJECT_BINARY_DIR}/packaging/deb/${_fr_s} @ONLY)
  file(CHMOD ${PROJECT_BINARY_DIR}/packaging/deb/${_fr_s}
       PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
endforeach()
foreach(_fr_s post preun postun)
  configure_file(${FR_PACKAGING_DIR}/rpm/${_fr_s}.sh.in ${PROJECT_BINARY_DIR}/packaging/rpm/${_fr_s}.sh @ONLY)
endforeach()
set(_fr_conffiles "")
if(EXISTS ${FR_EXAMPLE_CONFIG})
  set(_fr_conffiles "${FR_CONFIG_DIR}/example.toml\n")
endif()
file(WRITE ${PROJECT_BINARY_DIR}/packaging/deb/conffiles "${_fr_conffiles}")

# DEB (Debian 12)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/fastrestart/fastrestart")
# The runtime libraries named explicitly (libuv1 and libsystemd0 for fastrestartd), plus whatever
# dpkg-shlibdeps finds in the binaries (libmicrohttpd12, libfmt9, libtomlplusplus3, libcpp-httplib0.11,
# libhttp-parser2.9 for fastrestart-front, ...),
# appended by CPack. The rpm gets the same from rpmbuild's soname scan (libmicrohttpd.so.12).
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libspdlog1.10 (>= 1:1.10.0), libuv1 (>= 1.44), libsystemd0 (>= 252)")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The Python module is built for the build machine's python3 (3.11 on Debian 12); the binaries need no Python.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3 (>= 3.11), python3 (<< 3.12), python3-numpy")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "criu (>= 4.1)")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/packaging/deb/postinst
    ${PROJECT_BINARY_DIR}/packaging/deb/prerm
    ${PROJECT_BINARY_DIR}/packaging/deb/postrm
    ${PROJECT_BINARY_DIR}/packaging/deb/triggers
    ${PROJECT_BINARY_DIR}/packaging/deb/conffiles)
# libfastrestart_engine_loader.so.0: a shlibs file, so packages built against it depend on this one.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

# RPM (built with rpmbuild; requirements come from rpmbuild's automatic soname scan)
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_LICENSE "Proprietary")
set(CPACK_RPM_PACKAGE_GROUP "System Environment/Daemons")
set(CPACK_RPM_PACKAGE_URL ${CPACK_DEBIAN_PACKAGE_HOMEPAGE})
set(CPACK_PACKAGE_RELOCATABLE OFF)
set(CPACK_RPM_PACKAGE_RELOCATABLE OFF)
set(CPACK_RPM_CHANGELOG_FILE ${FR_PACKAGING_DIR}/rpm/changelog)
set(CPACK_RPM_PACKAGE_AUTOREQ ON)
set(CPACK_RPM_PACKAGE_REQUIRES_POST "systemd")
set(CPACK_RPM_PACKAGE_REQUIRES_PREUN "systemd")
set(CPACK_RPM_PACKAGE_REQUIRES_POSTUN "systemd")
set(CPACK_RPM_POST_INSTALL_SCRIPT_FILE ${PROJECT_BINARY_DIR}/packaging/rpm/post.sh)
set(CPACK_RPM_PRE_UNINSTALL_SCRIPT_FILE ${PROJECT_BINARY_DIR}/packaging/rpm/preun.sh)
set(CPACK_RPM_POST_UNINSTALL_SCRIPT_FILE ${PROJECT_BINARY_DIR}/packaging/rpm/postun.sh)
if(EXISTS ${FR_EXAMPLE_CONFIG})
  set(CPACK_RPM_USER_FILELIST "%config(noreplace) ${FR_CONFIG_DIR}/example.toml")
endif()
# Directories the package must not claim (they belong to the filesystem, systemd, python3, pkg-config, ...);
# everything below them that is ours (/etc/fastrestart, /usr/include/fastrestart, the docs) it does own.
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
    /etc /usr/lib/systemd /usr/lib/systemd/system /usr/share/doc /usr/include /usr/lib/tmpfiles.d
    /usr/lib/sysusers.d /usr/share/man /usr/share/man/man1 /usr/share/man/man5 /usr/share/man/man8
    /usr/lib/python3 /usr/lib/python3/dist-packages ${CMAKE_INSTALL_FULL_LIBDIR} ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig
    /usr/share/lintian /usr/share/lintian/overrides)
set(CPACK_RPM_SPEC_MORE_DEFINE "%define _build_id_links none")

include(CPack)
