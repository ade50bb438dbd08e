# cmake -P script behind the ctest cases package/find_package and package/add_subdirectory.
#
# Input (-D):
#   MODE                find_package | subdirectory
#   MIXPREC_SOURCE_DIR  mixprec's source tree
#   MIXPREC_BINARY_DIR  mixprec's configured build tree (installed from, in find_package mode)
#   WORK_DIR            scratch folder under the build dir; wiped first
#   GENERATOR, CXX, CXX_FLAGS, BUILD_TYPE   forwarded to the consumer's configure step
#   TARGET              the target the consumer links: mixprec::mixprec (header-only) or mixprec::compiled
#   CMAKEDIR            where the package config files are installed, relative to the prefix
#
# find_package mode: `cmake --install` into WORK_DIR/prefix, then configure the consumer with
# CMAKE_PREFIX_PATH=WORK_DIR/prefix (the consumer checks that the package it found is that one).
# Then, in both modes: build the consumer and run it; it prints "mixprec consumer OK".
cmake_minimum_required(VERSION 3.21)

foreach(var MODE MIXPREC_SOURCE_DIR MIXPREC_BINARY_DIR WORK_DIR GENERATOR CXX TARGET CMAKEDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required.")
  endif()
endforeach()

function(run)
  string(REPLACE ";" " " shown "${ARGN}")
  message(STATUS "Running: ${shown}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "Failed (exit ${rc}): ${shown}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_args
  -S "${MIXPREC_SOURCE_DIR}/tests/package" -B "${WORK_DIR}/build" -G "${GENERATOR}"
  "-DCMAKE_CXX_COMPILER=${CXX}" "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}" "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}"
  "-DMIXPREC_CONSUMER_MODE=${MODE}" "-DMIXPREC_CONSUMER_TARGET=${TARGET}"
  -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)

if(MODE STREQUAL "find_package")
  set(prefix "${WORK_DIR}/prefix")
  if(BUILD_TYPE)
    run("${CMAKE_COMMAND}" --install "${MIXPREC_BINARY_DIR}" --prefix "${prefix}" --config "${BUILD_TYPE}")
  else()
    run("${CMAKE_COMMAND}" --install "${MIXPREC_BINARY_DIR}" --prefix "${prefix}")
  endif()
  foreach(file include/mixprec/core.hpp include/mixprec/mixprec.hpp ${CMAKEDIR}/mixprecConfig.cmake
               ${CMAKEDIR}/mixprecConfigVersion.cmake ${CMAKEDIR}/mixprecTargets.cmake)
    if(NOT EXISTS "${prefix}/${file}")
      message(FATAL_ERROR "cmake --install did not install ${file} under ${prefix}.")
    endif()
  endforeach()
  list(APPEND consumer_args "-DCMAKE_PREFIX_PATH=${prefix}" "-DMIXPREC_EXPECTED_PREFIX=${prefix}")
elseif(MODE STREQUAL "subdirectory")
  list(APPEND consumer_args "-DMIXPREC_SOURCE_DIR=${MIXPREC_SOURCE_DIR}")
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be find_package or subdirectory, not '${MODE}'.")
endif()

run("${CMAKE_COMMAND}" ${consumer_args})
run("${CMAKE_COMMAND}" --build "${WORK_DIR}/build")
run("${WORK_DIR}/build/mixprec_consumer")
if(NOT last_output MATCHES "mixprec consumer OK")
  message(FATAL_ERROR "The consumer did not report success.")
endif()
