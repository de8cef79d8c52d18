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
