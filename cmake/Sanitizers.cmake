# Sanitizer and fuzzing builds. Included from the top-level CMakeLists.txt after the options and
# before cmake/Cuda.cmake. Both are CPU-only (the flags are for the host compiler; nvcc is not
# given them). tools/run_sanitizer_tests.sh configures both; see docs/TESTING.md.
#
# LAYERTAP_SANITIZE=ON: every C/C++ target (libraries, layertap, the tests) with AddressSanitizer
#   and UndefinedBehaviorSanitizer, halting on the first UBSan report (-fno-sanitize-recover=all).
#   GCC or clang. Configure with -DLAYERTAP_WITH_CUDA=OFF and a RelWithDebInfo build type; with
#   -DLAYERTAP_CUDA_SIM=ON the CUDA code runs on the simulated GPU, so ASan checks the kernels too.
#
# LAYERTAP_FUZZ=ON: the libFuzzer targets in fuzz/. Needs clang (Debian 12: clang and
#   libclang-rt-14-dev, which holds libclang_rt.fuzzer). Implies a core-only build without
#   tests: the libraries the targets need (layertap_core, layertap_io) are compiled with
#   -fsanitize=fuzzer-no-link,address,undefined and the targets linked with
#   -fsanitize=fuzzer,address,undefined.

if(LAYERTAP_SANITIZE AND LAYERTAP_FUZZ)
  message(FATAL_ERROR "layertap: LAYERTAP_SANITIZE and LAYERTAP_FUZZ are separate builds; pick one")
endif()

if(LAYERTAP_SANITIZE)
  if(LAYERTAP_WITH_CUDA)
    message(FATAL_ERROR "layertap: LAYERTAP_SANITIZE=ON is a CPU-only build; "
                        "configure with -DLAYERTAP_WITH_CUDA=OFF")
  endif()
  message(STATUS "layertap: AddressSanitizer + UndefinedBehaviorSanitizer build")
  add_compile_options(
    $<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=address,undefined>
    $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
    $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>)
  add_link_options(-fsanitize=address,undefined)
endif()

if(LAYERTAP_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "layertap: LAYERTAP_FUZZ=ON needs clang (libFuzzer); configure with "
                        "CC=clang CXX=clang++ in a fresh build directory "
                        "(found ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER})")
  endif()
  message(STATUS "layertap: libFuzzer build (fuzz/): core and io libraries only, no tests, no CUDA")
  # Normal variables shadow the cache options for this configure only.
  set(LAYERTAP_CORE_ONLY ON)
  set(LAYERTAP_BUILD_TESTS OFF)
  set(LAYERTAP_WITH_CUDA OFF)
  add_compile_options(
    $<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined>
    $<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=all>
    $<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer>
    $<$<COMPILE_LANGUAGE:C,CXX>:-g>)
  # The fuzz targets add -fsanitize=fuzzer themselves (fuzz/CMakeLists.txt).
  add_link_options(-fsanitize=address,undefined)
endif()
