# CUDA detection. Included from the top-level CMakeLists.txt after option(LAYERTAP_WITH_CUDA).
#
# Sets LAYERTAP_CUDA_ENABLED (ON/OFF). When ON: the CUDA language is enabled, the CUDAToolkit
# targets (CUDA::cudart, CUDA::cublas, ...) exist, and NCCL::nccl is an imported target.
# A CPU-only configure (-DLAYERTAP_WITH_CUDA=OFF, or no nvcc on the machine) leaves it OFF.
#
# GPU architectures: by default real SASS for sm_90 (H100/H200), sm_100 (B200/GB200) and sm_120
# (RTX 50xx / RTX PRO Blackwell), plus compute_120 PTX so that newer GPUs can JIT the kernels.
# Override at configure time, e.g.
#   cmake -DCMAKE_CUDA_ARCHITECTURES=90-real ...    (only H100/H200: faster builds)
#   cmake -DCMAKE_CUDA_ARCHITECTURES=native ...     (the GPUs of the build machine)
# or with the CUDAARCHS environment variable, which CMake reads on the first configure.

include(CheckLanguage)

set(LAYERTAP_CUDA_ENABLED OFF)

# LAYERTAP_CUDA_SIM=ON: the same CUDA sources, compiled by g++ against the simulated GPU in sim/
# instead of nvcc, libcudart, libcublasLt and libnccl (docs/TESTING.md). Needs the toolkit's
# headers only. The CUDA::cudart, CUDA::cublas, CUDA::cublasLt and NCCL::nccl targets the rest of
# the build links then stand for the simulator.
if(LAYERTAP_CUDA_SIM)
  find_path(LAYERTAP_CUDA_INCLUDE_DIR NAMES cuda_runtime_api.h cuda_bf16.h cublasLt.h
    HINTS ${CUDAToolkit_ROOT} $ENV{CUDA_HOME} $ENV{CUDA_PATH} /usr/local/cuda PATH_SUFFIXES include)
  find_path(LAYERTAP_NCCL_INCLUDE_DIR NAMES nccl.h HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${LAYERTAP_CUDA_INCLUDE_DIR}
    PATH_SUFFIXES include)
  if(NOT LAYERTAP_CUDA_INCLUDE_DIR OR NOT LAYERTAP_NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "layertap: LAYERTAP_CUDA_SIM needs the CUDA toolkit's headers (cuda_runtime_api.h, "
      "cuda_bf16.h, cublasLt.h) and nccl.h; set CUDAToolkit_ROOT (found: '${LAYERTAP_CUDA_INCLUDE_DIR}', "
      "'${LAYERTAP_NCCL_INCLUDE_DIR}')")
  endif()
  add_subdirectory(${PROJECT_SOURCE_DIR}/sim ${PROJECT_BINARY_DIR}/sim)
  target_include_directories(layertap_sim PUBLIC ${LAYERTAP_NCCL_INCLUDE_DIR})
  foreach(lib CUDA::cudart CUDA::cublas CUDA::cublasLt NCCL::nccl)
    add_library(${lib} INTERFACE IMPORTED)
    set_target_properties(${lib} PROPERTIES INTERFACE_LINK_LIBRARIES layertap_sim)
  endforeach()
  set(LAYERTAP_CUDA_ENABLED ON)
  message(STATUS "layertap: CUDA on the simulated GPU (sim/; headers ${LAYERTAP_CUDA_INCLUDE_DIR})")
  return()
endif()

if(NOT LAYERTAP_WITH_CUDA)
  message(STATUS "layertap: CUDA off (LAYERTAP_WITH_CUDA=OFF); building the CPU backend only")
  return()
endif()

check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "layertap: CUDA off (no nvcc found; set CMAKE_CUDA_COMPILER or put nvcc on "
                 "PATH to enable it); building the CPU backend only")
  return()
endif()

# Must be set before enable_language(CUDA), which otherwise picks nvcc's default (sm_75 SASS).
# "-real" = SASS only; the plain "120" = SASS and PTX for compute capability 12.0.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
  set(CMAKE_CUDA_ARCHITECTURES "90-real;100-real;120" CACHE STRING
      "CUDA architectures to build the kernels for (see cmake/Cuda.cmake)")
endif()

enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

# nvcc has accepted -std=c++20 since CUDA 12.0, but CMake only learned that in 3.26 ("requires the
# language dialect CUDA20 ... CMake does not know the flags"); teach older CMake the flag.
if(CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0 AND
   NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
# One CUDA runtime in every binary: the shared libcudart that CUDA::cudart (and cuBLAS, NCCL)
# use. CMake's default for CUDA-linked targets is the static cudart, which would give a second
# copy with its own device state.
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)

# NCCL ships inside this toolkit (/usr/local/cuda/lib); NCCL_ROOT points elsewhere if needed.
find_library(LAYERTAP_NCCL_LIBRARY NAMES nccl
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib
        ${CUDAToolkit_LIBRARY_ROOT}/lib64
  PATH_SUFFIXES lib lib64)
find_path(LAYERTAP_NCCL_INCLUDE_DIR NAMES nccl.h
  HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
  PATH_SUFFIXES include)
if(NOT LAYERTAP_NCCL_LIBRARY OR NOT LAYERTAP_NCCL_INCLUDE_DIR)
  message(FATAL_ERROR "layertap: CUDA is on but NCCL was not found (library: "
    "${LAYERTAP_NCCL_LIBRARY}, header: ${LAYERTAP_NCCL_INCLUDE_DIR}). Set NCCL_ROOT, or "
    "configure with -DLAYERTAP_WITH_CUDA=OFF for a CPU-only build.")
endif()
if(NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES
    IMPORTED_LOCATION "${LAYERTAP_NCCL_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${LAYERTAP_NCCL_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES CUDA::cudart)
endif()

set(LAYERTAP_CUDA_ENABLED ON)
message(STATUS "layertap: CUDA on (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
               "${CMAKE_CUDA_ARCHITECTURES}, NCCL ${LAYERTAP_NCCL_LIBRARY})")
