# cmake -P script behind the ctest case core_only/no_eigen_no_xtensor.
#
# Proves that the core headers (everything under include/mixprec/ except the array adapters
# arrays/eigen.hpp and arrays/xtensor.hpp, arrays/row_major.hpp which reads arrays through both, the full
# umbrella mixprec.hpp and the folders kernels/, nn/, scaled/, train/ and distributed/, which needs MPI) compile
# and work without Eigen or xtensor.
#
# Why not just compile against the `mixprec::mixprec` target? It brings Eigen and xtensor on the
# include path. So we call the compiler ourselves with ONLY include/ added (-I). That alone is not
# enough: Eigen is in /usr/include/eigen3 (off the default path, so an #include <Eigen/...> fails
# to compile), but xtensor and xtl are in /usr/include/xtensor, /usr/include/xtl, which ARE on the
# default path and would be found silently. Hence a second, robust check: the compiler's -H option
# prints every header it opens (one per line, GCC and Clang alike, including system headers and
# headers reached transitively); we fail if any of them is Eigen, xtensor or xtl, or is one of our
# own non-core headers. Poisoning macros (-D guards) would only catch headers we know the names of.
#
# Input (-D): CXX, CXX_FLAGS (string, may be empty), INCLUDE_DIR (mixprec's include/), SOURCE
# (tests/core_only/core_only.cpp), WORK_DIR (scratch folder).
cmake_minimum_required(VERSION 3.21)

foreach(var CXX INCLUDE_DIR SOURCE WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_core_only.cmake: -D${var}=... is required.")
  endif()
endforeach()
separate_arguments(extra_flags UNIX_COMMAND "${CXX_FLAGS}")
set(flags -std=c++20 -Wall -Wextra -Wpedantic -Werror ${extra_flags} "-I${INCLUDE_DIR}")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# True (in `out`) for a header path that core code must not reach.
function(is_forbidden path out)
  set(result FALSE)
  file(RELATIVE_PATH rel "${INCLUDE_DIR}" "${path}")
  if(NOT rel MATCHES "^\\.\\./" AND NOT IS_ABSOLUTE "${rel}")
    # One of our own headers: forbidden if it is outside the core.
    # nn/probe.hpp is the one core header under nn/: the probe interface the layers call, which the
    # core's diagnostics headers use (it includes only formats/).
    if((rel MATCHES "^mixprec/arrays/(eigen|xtensor|row_major)\\.hpp$" OR rel MATCHES "^mixprec/(kernels|nn|scaled|train|distributed)/"
        OR rel STREQUAL "mixprec/mixprec.hpp") AND NOT rel STREQUAL "mixprec/nn/probe.hpp")
      set(result TRUE)
    endif()
  else()
    string(TOLOWER "${path}" lower)
    if(lower MATCHES "eigen|xtensor|/xtl/")
      set(result TRUE)
    endif()
  endif()
  set(${out} ${result} PARENT_SCOPE)
endfunction()

# Compiles with -H and checks every header opened. `what` names the TU in messages.
function(compile_and_check what)
  execute_process(COMMAND "${CXX}" ${flags} -H ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  # -H lines look like ". /path" (one dot per nesting level); everything else is a diagnostic.
  string(REPLACE ";" "\\;" err_escaped "${err}")
  string(REPLACE "\n" ";" lines "${err_escaped}")
  if(NOT rc EQUAL 0)
    set(diagnostics "")
    foreach(line IN LISTS lines)
      if(NOT line MATCHES "^\\.+ ")
        string(APPEND diagnostics "${line}\n")
      endif()
    endforeach()
    message(FATAL_ERROR "${what} does not compile with only ${INCLUDE_DIR} on the include path "
                        "(no Eigen, no xtensor):\n${out}${diagnostics}")
  endif()
  set(headers 0)
  set(bad "")
  foreach(line IN LISTS lines)
    if(line MATCHES "^\\.+ (.+)$")
      math(EXPR headers "${headers} + 1")
      set(path "${CMAKE_MATCH_1}")
      get_filename_component(path "${path}" ABSOLUTE BASE_DIR "${WORK_DIR}")
      is_forbidden("${path}" forbidden)
      if(forbidden)
        list(APPEND bad "${path}")
      endif()
    endif()
  endforeach()
  if(headers EQUAL 0)
    message(FATAL_ERROR "The compiler printed no -H header list for ${what}; cannot check it:\n${err}")
  endif()
  if(bad)
    list(JOIN bad "\n  " bad)
    message(FATAL_ERROR "${what} reaches headers the core must not include:\n  ${bad}")
  endif()
  message(STATUS "${what}: ${headers} headers opened, none of them Eigen, xtensor or a non-core mixprec header.")
endfunction()

# 1. The core_only program: includes only <mixprec/core.hpp>; compiled, linked and run.
compile_and_check("<mixprec/core.hpp> (tests/core_only/core_only.cpp)" -c "${SOURCE}" -o "${WORK_DIR}/core_only.o")
execute_process(COMMAND "${CXX}" ${flags} "${WORK_DIR}/core_only.o" -o "${WORK_DIR}/core_only" RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "Linking core_only failed:\n${out}")
endif()
execute_process(COMMAND "${WORK_DIR}/core_only" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "core_only OK")
  message(FATAL_ERROR "core_only failed (exit ${rc}):\n${out}")
endif()

# 2. Every core header, found now (so headers added later are covered without reconfiguring), in one TU.
file(GLOB_RECURSE all_headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/mixprec/*.hpp")
list(SORT all_headers)
set(tu "// Generated by check_core_only.cmake: every core header.\n")
set(count 0)
foreach(header IN LISTS all_headers)
  is_forbidden("${INCLUDE_DIR}/${header}" forbidden)
  if(NOT forbidden)
    string(APPEND tu "#include <${header}>\n")
    math(EXPR count "${count} + 1")
  endif()
endforeach()
file(WRITE "${WORK_DIR}/all_core_headers.cpp" "${tu}")
compile_and_check("All ${count} core headers (${WORK_DIR}/all_core_headers.cpp)" -fsyntax-only "${WORK_DIR}/all_core_headers.cpp")
