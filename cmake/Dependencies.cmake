# Third-party dependencies, all from Debian 12 packages (scripts/deps.sh installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(PkgConfig REQUIRED)

# xxhash is used header-only (XXH_INLINE_ALL) so the engine library needs no extra shared object.
find_path(XXHASH_INCLUDE_DIR xxhash.h REQUIRED)
add_library(fr_xxhash INTERFACE)
target_include_directories(fr_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_compile_definitions(fr_xxhash INTERFACE XXH_INLINE_ALL)

if(FASTRESTART_TESTS)
  find_package(GTest REQUIRED)
endif()

# The supervisor's and the engine's: libuv (event loop), libsystemd (sd_notify), toml++ (config),
# cpp-httplib (Debian ships it as a shared library, found through pkg-config).
pkg_check_modules(LIBUV REQUIRED IMPORTED_TARGET GLOBAL libuv)
pkg_check_modules(LIBSYSTEMD REQUIRED IMPORTED_TARGET GLOBAL libsystemd)
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET GLOBAL cpp-httplib)
find_package(tomlplusplus REQUIRED)
