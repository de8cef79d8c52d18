# The CUDA backend is optional: it needs cuda.h (types only; libcuda is dlopen'ed at run time, brief
# decision 3) and nvcc for the digest kernel, which is embedded as a fatbin and loaded with
# cuModuleLoadData. Without the toolkit everything else still builds and tests.
set(FASTRESTART_HAVE_CUDA OFF)
if(FASTRESTART_CUDA)
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS "$ENV{CUDA_HOME}/bin/nvcc")
    set(CMAKE_CUDA_COMPILER "$ENV{CUDA_HOME}/bin/nvcc")
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
    if(CUDAToolkit_FOUND)
      set(FASTRESTART_HAVE_CUDA ON)
    endif()
  endif()
endif()
message(STATUS "fastrestart: CUDA backend ${FASTRESTART_HAVE_CUDA}")

# fr_cuda_or_stub(<target> <cuda.cc> <stub.cc>): adds <cuda.cc>, linked to fr_cuda, to <target> when the CUDA
# backend is on and the file is there, else <stub.cc> (its stand-in for builds without the CUDA toolkit).
# Paths are relative to the calling CMakeLists.txt's folder.
function(fr_cuda_or_stub target cuda_src stub_src)
  if(FASTRESTART_HAVE_CUDA AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${cuda_src})
    target_sources(${target} PRIVATE ${cuda_src})
    target_link_libraries(${target} PRIVATE fr_cuda)
  else()
    target_sources(${target} PRIVATE ${stub_src})
  endif()
endfunction()

# fr_embed_kernels(<out_var> <file.cu> <symbol> <header>): compiles file.cu with nvcc into a fatbin (SASS for
# each of FR_CUDA_ARCHS, plus PTX of the last, which newer GPUs JIT) and embeds it as the byte array
# <symbol> declared by <header> (src/cuda/embed_fatbin.cmake). Sets <out_var> to the generated .cc to add
# to a target. No CUDA runtime and no separate file at run time: the module is loaded with cuModuleLoadData.
if(FASTRESTART_HAVE_CUDA)
  set(FR_CUDA_ARCHS "90" CACHE STRING "SM architectures for the embedded kernels (SASS each; PTX of the last)")
endif()
function(fr_embed_kernels out_var cu symbol header)
  set(gencode "")
  foreach(arch IN LISTS FR_CUDA_ARCHS)
    list(APPEND gencode "-gencode=arch=compute_${arch},code=sm_${arch}")
  endforeach()
  list(GET FR_CUDA_ARCHS -1 last_arch)
  list(APPEND gencode "-gencode=arch=compute_${last_arch},code=compute_${last_arch}")
  get_filename_component(stem ${cu} NAME_WE)
  set(fatbin ${CMAKE_CURRENT_BINARY_DIR}/${stem}.fatbin)
  set(fatbin_c ${CMAKE_CURRENT_BINARY_DIR}/${stem}_fatbin.cc)
  set(embed ${PROJECT_SOURCE_DIR}/src/cuda/embed_fatbin.cmake)
  add_custom_command(
    OUTPUT ${fatbin}
    COMMAND ${CMAKE_CUDA_COMPILER} --fatbin -O3 -std=c++17 ${gencode} -o ${fatbin} ${CMAKE_CURRENT_SOURCE_DIR}/${cu}
    DEPENDS ${cu}
    COMMENT "nvcc --fatbin ${cu}"
    VERBATIM)
  add_custom_command(
    OUTPUT ${fatbin_c}
    COMMAND ${CMAKE_COMMAND} -DIN=${fatbin} -DOUT=${fatbin_c} -DNAME=${symbol} -DHEADER=${header} -P ${embed}
    DEPENDS ${fatbin} ${embed}
    COMMENT "embedding ${stem}.fatbin"
    VERBATIM)
  set(${out_var} ${fatbin_c} PARENT_SCOPE)
endfunction()
