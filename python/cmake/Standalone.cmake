# python/ configured on its own (cmake -S python): builds the engine library the binding links from the
# repository's sources, with only what the binding needs: a C++20 compiler, the header-only nlohmann/json
# and xxhash, pybind11 and the Python headers (and the CUDA toolkit for the CUDA backend). For machines
# without the Debian packages the whole tree needs, such as the GPU test machine (docs/python.md):
#
#   cmake -S python -B build-py -DPython3_EXECUTABLE=$(command -v python3) \
#         -Dpybind11_DIR=$(python3 -m pybind11 --cmakedir) -DFR_EXTRA_INCLUDE=<dir with nlohmann/, xxhash.h>
#   cmake --build build-py -j
#   PYTHONPATH=build-py python3 -c 'import fastrestart, fastrestart_vllm'
set(FR_ROOT ${CMAKE_CURRENT_SOURCE_DIR}/..)
file(READ ${FR_ROOT}/CMakeLists.txt fr_root_lists)
string(REGEX MATCH "project\\(fastrestart VERSION ([0-9.]+)" fr_unused "${fr_root_lists}")
set(PROJECT_VERSION ${CMAKE_MATCH_1})
# The library CMakeLists name their paths from the repository root, as in the full build.
set(PROJECT_SOURCE_DIR ${FR_ROOT})

set(CMAKE_CXX_STANDARD 20)
set(CMAKE_CXX_STANDARD_REQUIRED ON)
set(CMAKE_CXX_EXTENSIONS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
if(NOT CMAKE_BUILD_TYPE)
  set(CMAKE_BUILD_TYPE RelWithDebInfo)
endif()
set(FASTRESTART_TESTS OFF)
option(FASTRESTART_CUDA "Build the CUDA backend when the toolkit is found" ON)
list(APPEND CMAKE_MODULE_PATH ${FR_ROOT}/cmake)
include(Warnings)
include(Cuda)
include(GNUInstallDirs)

set(FR_EXTRA_INCLUDE "" CACHE PATH "A directory holding nlohmann/json.hpp and xxhash.h when the system has none")
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 QUIET)
if(NOT nlohmann_json_FOUND)
  find_path(FR_NLOHMANN_INCLUDE nlohmann/json.hpp HINTS ${FR_EXTRA_INCLUDE} REQUIRED)
  add_library(nlohmann_json INTERFACE)
  target_include_directories(nlohmann_json SYSTEM INTERFACE ${FR_NLOHMANN_INCLUDE})
  add_library(nlohmann_json::nlohmann_json ALIAS nlohmann_json)
endif()
find_path(XXHASH_INCLUDE_DIR xxhash.h HINTS ${FR_EXTRA_INCLUDE} REQUIRED)
add_library(fr_xxhash INTERFACE)
target_include_directories(fr_xxhash SYSTEM INTERFACE ${XXHASH_INCLUDE_DIR})
target_compile_definitions(fr_xxhash INTERFACE XXH_INLINE_ALL)

foreach(dir common protocol cuda engine_loader)
  add_subdirectory(${FR_ROOT}/src/${dir} ${CMAKE_BINARY_DIR}/src/${dir})
endforeach()
