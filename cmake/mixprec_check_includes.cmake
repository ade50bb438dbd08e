# cmake -P script: checks that the folders of include/mixprec/ include each other one way only.
#
# The folders are the layers of docs/DESIGN.md, bottom to top, in MIXPREC_LAYERS below. A header may
# include headers of its own folder and of folders lower in the list; folders that share one entry
# ("scaled|train") stand side by side and may include neither each other nor anything above them.
# Headers at the root of include/mixprec/ are umbrellas: they may include anything, and no folder
# may include them. Since every allowed include goes strictly down the list (or stays in its
# folder), no cycle between folders can form.
#
# A second rule keeps dispatch in one place: a header of a folder above kernels/ (nn/, scaled/,
# train/, diagnostics/, distributed/) must not name the kernels' internals (`kernels::detail`), read the
# instruction-set level (`active_isa`, `isa::<level>`) or name a micro-kernel (`gemm_avx...`), in
# code or comments: those folders call the kernels' operations, which choose the implementation once
# (docs/kernels.md, "Dispatch").
#
# Every violation is printed as `<file>:<line>: <what is wrong>` and the script fails. It also fails
# on a folder that is missing from MIXPREC_LAYERS (a new folder must take its place in the order),
# on a header at the root that is not an umbrella, and on an include of a mixprec header that does
# not exist.
#
# Input (-D): INCLUDE_DIR, the directory that holds mixprec/ (the repository's include/).
# Used by the ctest case house/include_direction (tests/house/).
cmake_minimum_required(VERSION 3.21)

# Bottom to top. Keep in step with docs/DESIGN.md and docs/project_structure.md.
set(MIXPREC_LAYERS arch formats dtypes arrays policies kernels nn "scaled|train" diagnostics distributed)
# The only headers allowed at the root of include/mixprec/.
set(MIXPREC_UMBRELLAS core.hpp mixprec.hpp version.hpp)

if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "mixprec_check_includes.cmake: -DINCLUDE_DIR=<directory holding mixprec/> is required.")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)
if(NOT IS_DIRECTORY "${INCLUDE_DIR}/mixprec")
  message(FATAL_ERROR "mixprec_check_includes.cmake: ${INCLUDE_DIR}/mixprec is not a directory.")
endif()

# rank_<folder> = position in MIXPREC_LAYERS (siblings share a rank).
set(rank 0)
foreach(entry IN LISTS MIXPREC_LAYERS)
  string(REPLACE "|" ";" siblings "${entry}")
  foreach(folder IN LISTS siblings)
    set(rank_${folder} ${rank})
  endforeach()
  math(EXPR rank "${rank} + 1")
endforeach()
string(REPLACE ";" " < " order "${MIXPREC_LAYERS}")
string(REPLACE ";" ", " umbrellas "${MIXPREC_UMBRELLAS}")

# What a header above kernels/ must not name: the kernels' internals (their namespace and folder),
# the instruction-set level, or a vectorised kernel (`gemm_avx2`, `norm_avx512`, ...).
set(dispatch_pattern "(kernels::detail|kernels/detail/|active_isa|detected_isa|isa::(portable|avx)|MIXPREC_X86_DISPATCH|[a-z0-9]+_avx(2|512)[a-z0-9]*)")
include("${CMAKE_CURRENT_LIST_DIR}/mixprec_read_lines.cmake")

file(GLOB_RECURSE headers RELATIVE "${INCLUDE_DIR}" "${INCLUDE_DIR}/mixprec/*")
list(SORT headers)
set(problems "")
set(checked 0)
set(edges 0)
foreach(header IN LISTS headers)
  math(EXPR checked "${checked} + 1")
  if(NOT header MATCHES "^mixprec/([^/]+)/")
    # At the root: an umbrella, or a header that belongs in a folder.
    get_filename_component(name "${header}" NAME)
    if(NOT name IN_LIST MIXPREC_UMBRELLAS)
      list(APPEND problems "${header}:1: only umbrella headers (${umbrellas}) may stand at the root of mixprec/, so move it into the folder of its layer")
    endif()
    continue()
  endif()
  set(from "${CMAKE_MATCH_1}")
  if(NOT DEFINED rank_${from})
    list(APPEND problems "${header}:1: folder '${from}' is not one of the layers (${order}): add it to MIXPREC_LAYERS in cmake/mixprec_check_includes.cmake and to docs/DESIGN.md")
    continue()
  endif()
  # Lines are read whole, so that every line number is the file's (mixprec_read_lines.cmake).
  mixprec_read_lines("${INCLUDE_DIR}/${header}" lines)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    mixprec_line_text("${line}" line)
    if(rank_${from} GREATER rank_kernels AND line MATCHES "${dispatch_pattern}")
      list(APPEND problems "${header}:${line_number}: names '${CMAKE_MATCH_1}', but the folders above kernels/ call the kernels' operations, which choose the implementation once: call one (kernels/norms.hpp, activations.hpp, gemm.hpp, ...) or add it to kernels/ (docs/kernels.md, \"Dispatch\")")
    endif()
    if(NOT line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"](mixprec/[^>\"]+)[>\"]")
      continue()
    endif()
    set(target "${CMAKE_MATCH_1}")
    math(EXPR edges "${edges} + 1")
    set(where "${header}:${line_number}")
    if(NOT EXISTS "${INCLUDE_DIR}/${target}")
      list(APPEND problems "${where}: includes ${target}, which does not exist")
      continue()
    endif()
    if(NOT target MATCHES "^mixprec/([^/]+)/")
      list(APPEND problems "${where}: includes the umbrella ${target}, but a folder includes the headers it uses, never an umbrella")
      continue()
    endif()
    set(to "${CMAKE_MATCH_1}")
    if(to STREQUAL from OR NOT DEFINED rank_${to})
      continue()  # own folder; an unknown folder is reported once, for its own headers
    endif()
    if(rank_${to} GREATER rank_${from})
      list(APPEND problems "${where}: includes ${target}, but ${to}/ stands above ${from}/ (layers, bottom to top: ${order})")
    elseif(rank_${to} EQUAL rank_${from})
      list(APPEND problems "${where}: includes ${target}, but ${to}/ and ${from}/ stand side by side and must not depend on each other (layers: ${order})")
    endif()
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
  message(FATAL_ERROR "${count} problem(s) with the layering of include/mixprec/ (listed above).")
endif()
message(STATUS "Include direction: ${checked} headers, ${edges} includes of mixprec headers, all downward (${order}); no header above kernels/ chooses an instruction set.")
