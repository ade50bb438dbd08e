# cmake -P script behind the ctest case house/header_text_catches: runs the header-text check
# (cmake/mixprec_check_header_text.cmake) on header_text_tree/, a fixture with one planted fault on
# each of the lines 3 to 12 of include/mixprec/kernels/fast.hpp (measured throughputs in seven
# spellings, a missing .md file, one outside the repository, one in the wrong letter case), and
# passes only if the check fails and names every one of them by file and line, and none of the
# legitimate text of lines 13 and 14. It proves that house/header_text can fail.
#
# Input (-D): CHECKER (the script), FIXTURE (the fixture's root, holding include/ and docs/).
cmake_minimum_required(VERSION 3.21)
execute_process(COMMAND "${CMAKE_COMMAND}" -DINCLUDE_DIR=${FIXTURE}/include -DREPO_DIR=${FIXTURE} -P "${CHECKER}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0)
  message(FATAL_ERROR "The header-text check passed a tree with planted faults:\n${out}")
endif()
set(header "mixprec/kernels/fast.hpp")
set(expected
  "${header}:3: a measured throughput ('21-25 GB/s')"
  "${header}:4: a measured throughput ('172 GFLOP/s')"
  "${header}:5: a measured throughput ('9.05 tokens/s')"
  "${header}:6: a measured throughput ('weights/s')"
  "${header}:7: a measured throughput ('17.7 G/s')"
  "${header}:8: a measured throughput ('bytes per second')"
  "${header}:9: a measured throughput ('10 ns per element')"
  "${header}:10: refers to TRAINING.md, which is not a file of the repository"
  "${header}:11: refers to ../shared/docs/KERNELS.md, outside the repository"
  "${header}:12: refers to docs/Present.md, which is not a file of the repository")
set(missing "")
foreach(line IN LISTS expected)
  string(FIND "${out}" "${line}" at)
  if(at EQUAL -1)
    string(APPEND missing "  ${line}\n")
  endif()
endforeach()
# Lines 1, 2, 13 and 14 hold nothing wrong (a reciprocal 1/s, x / s, 0.1 ms, an error bound, an
# existing doc, another repository's file, a URL), and each faulty line is reported once.
foreach(allowed 1 2 13 14)
  string(FIND "${out}" "${header}:${allowed}:" at)
  if(NOT at EQUAL -1)
    string(APPEND missing "  (reported although allowed) ${header}:${allowed}\n")
  endif()
endforeach()
string(REGEX MATCHALL "${header}:[0-9]+:" reported "${out}")
list(LENGTH reported count)
if(NOT count EQUAL 10)
  string(APPEND missing "  (10 problems expected, ${count} reported)\n")
endif()
if(missing)
  message(FATAL_ERROR "The header-text check did not report as expected:\n${missing}Its output:\n${out}")
endif()
message(STATUS "The header-text check reported all 10 planted faults and nothing else.")
