# cmake -P script: checks that the headers of include/mixprec/ explain and leave measuring to the docs.
#
# Headers say why a design is as it is; the figures that chose it live in docs/performance.md,
# docs/kernels.md or docs/conversions.md, with their date, run and machine (issue 42). Two kinds of
# header line fail, each printed as `<file>:<line>: <what is wrong, and how to fix it>`:
#
#  - a measured throughput: a number of operations, bytes or items per second, written with a unit
#    such as GFLOP/s, GB/s, MiB/s, G/s, tokens/s, elements/s or weights/s, `... per second`, or a
#    time per item (`1.5 ns per element`). Error bounds, cache sizes and latencies are not matched;
#  - a reference to a Markdown file that is not in the repository: `name.md` or `dir/name.md` must
#    name a file relative to the repository root or to docs/, with the same letter case, inside the
#    repository (`../shared/docs/KERNELS.md` fails even where that file exists). A path qualified
#    by another repository (`owner/name, path/file.md`) or inside a URL names someone else's file
#    and is not checked.
#
# Input (-D): INCLUDE_DIR, the directory that holds mixprec/ (the repository's include/);
# REPO_DIR, the repository root against which .md references resolve (default: INCLUDE_DIR/..).
# Used by the ctest cases house/header_text and house/header_text_catches (tests/house/).
cmake_minimum_required(VERSION 3.21)

if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "mixprec_check_header_text.cmake: -DINCLUDE_DIR=<directory holding mixprec/> is required.")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)
if(NOT IS_DIRECTORY "${INCLUDE_DIR}/mixprec")
  message(FATAL_ERROR "mixprec_check_header_text.cmake: ${INCLUDE_DIR}/mixprec is not a directory.")
endif()
if(NOT DEFINED REPO_DIR)
  set(REPO_DIR "${INCLUDE_DIR}/..")
endif()
get_filename_component(REPO_DIR "${REPO_DIR}" ABSOLUTE)

# A measured throughput. A count unit (with an optional SI or binary prefix) per second, not part of a
# longer word: `GB/s`, `172 GFLOP/s`, `9.05 tokens/s`, `~14 G weights/s`; a prefix alone after a
# number (`17.7 G/s`); `bytes per second`; a time per item after a number (`~10 ns per element`).
# `1/s` (a reciprocal), `x / s` and `0.1 ms of PAUSE` do not match.
set(count_units "FLOPS|FLOP|flops|flop|B|bytes|byte|tokens|token|elements|element|weights|weight|values|floats|rows|words|it|ops")
# The optional number in front only makes the printed figure whole.
set(number "([0-9][0-9.,-]*)?")
set(throughput_patterns
  "${number}(^|[^A-Za-z0-9_])([kKMGTP]i?)?(${count_units})/s([^A-Za-z0-9_]|$)"
  "[0-9][0-9.,-]* ?[kKMGT]/s([^A-Za-z0-9_]|$)"
  "(FLOPs|bytes|tokens|elements|weights|values|rows) (per|a|each) second"
  "[0-9][0-9.,-]* ?(ns|us|µs|ms) (per|each|an|a) (element|value|weight|token|row|byte|float)")
# A Markdown file named in the text, once a space has been put after every `.md` that ends a name.
set(md_pattern "[A-Za-z0-9_./-]*[A-Za-z0-9_-]\\.md ")
# `owner/name, path.md`: a file of another repository (owner/name not itself a file of ours).
set(foreign_pattern "(^|[^A-Za-z0-9_./-])([A-Za-z0-9_-][A-Za-z0-9_.-]*/[A-Za-z0-9_.-]+), ([A-Za-z0-9_./-]+\\.md)")

# True (in ${out}) when ${path} exists under ${base} with exactly this letter case, inside REPO_DIR.
function(mixprec_md_exists base path out)
  get_filename_component(full "${base}/${path}" ABSOLUTE)
  string(FIND "${full}/" "${REPO_DIR}/" at)
  if(NOT at EQUAL 0 OR NOT EXISTS "${full}" OR IS_DIRECTORY "${full}")
    set(${out} FALSE PARENT_SCOPE)
    return()
  endif()
  # EXISTS ignores case on case-insensitive file systems: compare with the directory's listing.
  get_filename_component(dir "${full}" DIRECTORY)
  get_filename_component(name "${full}" NAME)
  file(GLOB names RELATIVE "${dir}" "${dir}/*")
  if(name IN_LIST names)
    set(${out} TRUE PARENT_SCOPE)
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

# Lines are read whole: `;`, `[` and `]` would otherwise split or join CMake list elements.
include("${CMAKE_CURRENT_LIST_DIR}/mixprec_read_lines.cmake")

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/mixprec/*")
list(SORT headers)
set(problems "")
set(checked 0)
set(references 0)
foreach(header IN LISTS headers)
  math(EXPR checked "${checked} + 1")
  mixprec_read_lines("${INCLUDE_DIR}/${header}" lines)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    mixprec_line_text("${line}" line)
    set(where "${header}:${line_number}")

    foreach(pattern IN LISTS throughput_patterns)
      if(line MATCHES "${pattern}")
        string(REGEX REPLACE "^[^A-Za-z0-9~]+|[^A-Za-z0-9/]+$" "" figure "${CMAKE_MATCH_0}")
        list(APPEND problems "${where}: a measured throughput ('${figure}') in a header: move the figure, with its date, run and machine, to docs/performance.md or docs/kernels.md (unless it is there already) and leave the reason and a link, e.g. (measured: docs/kernels.md, \"Engine measurements\")")
        break()
      endif()
    endforeach()

    if(NOT line MATCHES "\\.md")
      continue()
    endif()
    # `;`, `[` and `]` are no path characters, and would break the lists of matches below.
    string(REPLACE ";" " " text_of_line " ${line} ")
    string(REPLACE "[" " " text_of_line "${text_of_line}")
    string(REPLACE "]" " " text_of_line "${text_of_line}")
    # Drop the files of other repositories (`owner/name, path.md`, URLs) before looking for ours.
    string(REGEX MATCHALL "${foreign_pattern}" foreign "${text_of_line}")
    foreach(match IN LISTS foreign)
      string(REGEX MATCH "${foreign_pattern}" parts "${match}")
      set(repository "${CMAKE_MATCH_2}")
      set(path "${CMAKE_MATCH_3}")
      if(NOT repository MATCHES "\\.(md|hpp|h|cpp|cmake|txt|py|json)$")
        string(REPLACE "${repository}, ${path}" "" text_of_line "${text_of_line}")
      endif()
    endforeach()
    string(REGEX REPLACE "[a-z]+://[^ )>`\"']*" "" text_of_line "${text_of_line}")
    string(REGEX REPLACE "\\.md([^A-Za-z0-9_])" ".md \\1" text_of_line "${text_of_line}")
    string(REGEX MATCHALL "${md_pattern}" found "${text_of_line}")
    foreach(reference IN LISTS found)
      string(STRIP "${reference}" reference)
      math(EXPR references "${references} + 1")
      mixprec_md_exists("${REPO_DIR}" "${reference}" at_root)
      mixprec_md_exists("${REPO_DIR}/docs" "${reference}" in_docs)
      if(at_root OR in_docs)
        continue()
      endif()
      if(reference MATCHES "(^|/)\\.\\./")
        list(APPEND problems "${where}: refers to ${reference}, outside the repository: link the repository's own doc (docs/<topic>.md, \"<section>\") instead, adding the paragraph the text relies on to it if it lacks one")
      else()
        list(APPEND problems "${where}: refers to ${reference}, which is not a file of the repository (neither at its root nor in docs/, letter case included): link the repository's own doc (docs/<topic>.md, \"<section>\") instead, adding the paragraph the text relies on to it if it lacks one")
      endif()
    endforeach()
  endforeach()
endforeach()

if(checked EQUAL 0)
  message(FATAL_ERROR "No headers found under ${INCLUDE_DIR}/mixprec: nothing was checked.")
endif()
list(LENGTH problems count)
if(count GREATER 0)
  # Plain messages print each problem on one line (FATAL_ERROR would wrap them).
  foreach(problem IN LISTS problems)
    message("${problem}")
  endforeach()
  message(FATAL_ERROR "${count} problem(s) with the text of include/mixprec/ (listed above).")
endif()
message(STATUS "Header text: ${checked} headers, no measured throughput, ${references} references to .md files, all in the repository.")
