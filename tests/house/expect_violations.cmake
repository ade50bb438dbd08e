# cmake -P script behind the ctest case house/include_direction_catches: runs the include-direction
# check (cmake/mixprec_check_includes.cmake) on broken_tree/, a fixture with one violation of each
# kind (and a header above kernels/ that chooses an instruction set, after a line with non-ASCII
# characters and an unbalanced bracket, so that its line numbers must be the file's), and passes only
# if the check fails and names every one of them by file and line. It proves that
# house/include_direction can fail.
#
# Input (-D): CHECKER (the script), FIXTURE (the directory holding the fixture's mixprec/).
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND "${CMAKE_COMMAND}" -DINCLUDE_DIR=${FIXTURE} -P "${CHECKER}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "The include-direction check passed a tree with broken layering:\n${out}")
endif()
set(expected
  "mixprec/formats/format.hpp:3: includes mixprec/nn/layer.hpp, but nn/ stands above formats/"
  "mixprec/nn/layer.hpp:3: includes the umbrella mixprec/core.hpp"
  "mixprec/scaled/tensor.hpp:3: includes mixprec/train/step.hpp, but train/ and scaled/ stand side by side"
  "mixprec/train/step.hpp:4: includes mixprec/formats/missing.hpp, which does not exist"
  "mixprec/extras/extra.hpp:1: folder 'extras' is not one of the layers"
  "mixprec/stray.hpp:1: only umbrella headers"
  "mixprec/nn/dispatch.hpp:3: names 'active_isa', but the folders above kernels/"
  "mixprec/nn/dispatch.hpp:4: names 'kernels::detail', but the folders above kernels/"
  "mixprec/nn/dispatch.hpp:5: names 'norm_avx2', but the folders above kernels/")
set(missing "")
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    string(APPEND missing "  ${line}\n")
  endif()
endforeach()
# The fixture's allowed includes (the umbrella core.hpp, train -> formats) and a kernels/ header that
# reads the level must not be reported.
foreach(allowed "mixprec/core.hpp:3" "mixprec/train/step.hpp:2" "mixprec/kernels/dispatch.hpp")
  string(FIND "${out}" "${allowed}" at)
  if(NOT at EQUAL -1)
    string(APPEND missing "  (reported although allowed) ${allowed}\n")
  endif()
endforeach()
if(missing)
  message(FATAL_ERROR "The include-direction check did not report as expected:\n${missing}Its output:\n${out}")
endif()
message(STATUS "The include-direction check reported all 9 planted violations and nothing else.")
