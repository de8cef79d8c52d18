# Packaging: install rules for the systemd unit and the example configuration, and CPack (DEB + RPM).
# Included from the top-level CMakeLists.txt, after every add_subdirectory():
#     include(packaging/Packaging.cmake)
# Build the packages with scripts/package.sh (configures with CMAKE_INSTALL_PREFIX=/usr; docs/packaging.md).
include_guard(GLOBAL)
include(GNUInstallDirs)

set(FR_PACKAGING_DIR ${CMAKE_CURRENT_LIST_DIR})

# --- systemd unit -------------------------------------------------------------------------------------
# The unit names /usr/bin/...; a build with another prefix gets its own bindir substituted.
# Relative to the prefix: /usr/lib/systemd/system in the packages (also right on merged-/usr Debian 12);
# /usr/local/lib/systemd/system for a plain `cmake --install` (systemd searches both). An absolute path here
# would make CPack's RPM mark the unit %config.
set(FR_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING "Where fastrestart@.service is installed")
file(READ ${FR_PACKAGING_DIR}/systemd/fastrestart@.service _fr_unit)
string(REPLACE "/usr/bin/" "${CMAKE_INSTALL_FULL_BINDIR}/" _fr_unit "${_fr_unit}")
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/packaging/fastrestart@.service CONTENT "${_fr_unit}" @ONLY)
set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${FR_PACKAGING_DIR}/systemd/fastrestart@.service)
install(FILES ${PROJECT_BINARY_DIR}/packaging/fastrestart@.service DESTINATION ${FR_SYSTEMD_UNIT_DIR})

# --- configuration --------------------------------------------------------------------------------------
# /etc/fastrestart/example.toml (CMAKE_INSTALL_FULL_SYSCONFDIR is /etc when the prefix is /usr).
set(FR_EXAMPLE_CONFIG ${PROJECT_SOURCE_DIR}/config/example.toml)
set(FR_CONFIG_DIR ${CMAKE_INSTALL_FULL_SYSCONFDIR}/fastrestart)
if(EXISTS ${FR_EXAMPLE_CONFIG})
  install(FILES ${FR_EXAMPLE_CONFIG} DESTINATION ${FR_CONFIG_DIR} PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ)
else()
  message(WARNING "packaging: ${FR_EXAMPLE_CONFIG} is missing; the packages will ship no example configuration")
endif()

# --- documentation ----------------------------------------------------------------------------------------
foreach(_fr_doc README.md docs/systemd.md docs/packaging.md docs/config.md docs/supervisor.md docs/weightd.md)
  if(EXISTS ${PROJECT_SOURCE_DIR}/${_fr_doc})
    install(FILES ${PROJECT_SOURCE_DIR}/${_fr_doc} DESTINATION ${CMAKE_INSTALL_DOCDIR})
  endif()
endforeach()

# --- CPack ------------------------------------------------------------------------------------------------
set(CPACK_GENERATOR "DEB;RPM" CACHE STRING "CPack generators")
set(CPACK_PACKAGE_NAME fastrestart)
set(CPACK_PACKAGE_VENDOR "fastrestart")
set(CPACK_PACKAGE_CONTACT "fastrestart maintainers <fastrestart@localhost>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Restart supervisor for LLM serving that keeps weights resident in GPU memory")
set(CPACK_PACKAGE_DESCRIPTION
"fastrestart keeps an inference engine's weights resident in GPU memory across engine restarts and hands
them to the next engine zero-copy, so a crash, an OOM kill or a flag change costs seconds instead of minutes.
Ships fastrestartd and fastrestartctl (the supervisor, one systemd instance fastrestart@NAME per model),
fastrestart-weightd and fastrestart-weightctl (the per-GPU weight daemon), and the engine_loader headers.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages CACHE PATH "Where CPack writes the packages")
set(CPACK_STRIP_FILES OFF)
set(CPACK_SOURCE_IGNORE_FILES "/build.*/" "/\\\\.git/")

# The maintainer scripts are generated into the build tree with the unit's real name.
set(FR_UNIT_GLOB "fastrestart@*.service")
foreach(_fr_s postinst prerm postrm)
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
# dpkg-shlibdeps finds in the binaries (libfmt9, libtomlplusplus3, libcpp-httplib0.11, ...), appended by CPack.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libspdlog1.10 (>= 1:1.10.0), libuv1 (>= 1.44), libsystemd0 (>= 252)")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "criu (>= 4.1)")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/packaging/deb/postinst
    ${PROJECT_BINARY_DIR}/packaging/deb/prerm
    ${PROJECT_BINARY_DIR}/packaging/deb/postrm
    ${PROJECT_BINARY_DIR}/packaging/deb/conffiles)
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
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
    /etc /usr/lib/systemd /usr/lib/systemd/system /usr/share/doc /usr/include)
set(CPACK_RPM_SPEC_MORE_DEFINE "%define _build_id_links none")

include(CPack)
