# cmake -P script behind the ctest case package/compiled_tu_generates_no_kernels.
#
# Proves that the compiled mode (include/mixprec/kernels/compiled.hpp) keeps the kernels out of a
# user's translation unit: each SOURCE is compiled as a user's optimised build of it against
# mixprec::compiled would be (-O2, -DMIXPREC_COMPILED), and the object's defined symbols (nm) must
# hold none of the kernels the library instantiates: the GEMM drivers and engine, the per-target
# micro-kernels and SIMD rows, the tiled attention. A kernel instantiation missing from the lists
# (a new layer calling a kernel with new element types, a changed signature) fails here, naming the
# symbols.
#
# Input (-D): CXX, CXX_FLAGS (string, may be empty), NM, INCLUDE_DIR (mixprec's include/),
# EIGEN_DIR (Eigen's include directory), SOURCES (;-separated), WORK_DIR (scratch folder).
cmake_minimum_required(VERSION 3.21)

foreach(var CXX NM INCLUDE_DIR EIGEN_DIR SOURCES WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_compiled_tu.cmake: -D${var}=... is required.")
  endif()
endforeach()
separate_arguments(extra_flags UNIX_COMMAND "${CXX_FLAGS}")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# Names of the kernels' code (demangled): the engine, its blocks and micro-kernels, Eigen's products,
# the SIMD bodies compiled per target, the attention tiles. Not the typed drivers above them
# (matmul_impl and its packing and rounding functions for the operands' types), which stay in the
# translation unit by design.
set(kernel_code "kernels::detail::(blocked_gemm|blocked_gemm_panels|gemm_block|eigen_block_product|eigen_accumulate_product)<|gemm_avx2::|gemm_avx512(bf16)?::|simd_avx2::|simd_avx512::|kernels::attention<|kernels::attention_backward<|kernels::adamw_update<|kernels::batch_norm_(sums|apply)<")

set(failures "")
foreach(source ${SOURCES})
  get_filename_component(name "${source}" NAME_WE)
  set(object "${WORK_DIR}/${name}.o")
  execute_process(COMMAND "${CXX}" -std=c++20 -O2 ${extra_flags} -DMIXPREC_COMPILED "-I${INCLUDE_DIR}" -isystem
                          "${EIGEN_DIR}" -c "${source}" -o "${object}"
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${source} does not compile with -DMIXPREC_COMPILED:\n${err}")
  endif()
  execute_process(COMMAND "${NM}" -C --defined-only "${object}" RESULT_VARIABLE rc OUTPUT_VARIABLE symbols)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${object}")
  endif()
  string(REPLACE ";" "\\;" symbols "${symbols}")
  string(REPLACE "\n" ";" symbols "${symbols}")
  set(found 0)
  foreach(symbol IN LISTS symbols)
    if(symbol MATCHES "${kernel_code}")
      math(EXPR found "${found} + 1")
      if(found LESS_EQUAL 5)
        string(SUBSTRING "${symbol}" 0 400 shown)
        string(APPEND failures "  ${name}: ${shown}\n")
      endif()
    endif()
  endforeach()
  if(found GREATER 0)
    string(APPEND failures "  ${name}: ${found} kernel symbols in all\n")
  else()
    message(STATUS "${name}: no kernel code in the translation unit")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "In the compiled mode these translation units still generate kernel code, which "
                      "the compiled library should hold: add the instantiations to the lists of "
                      "include/mixprec/kernels/compiled.hpp's headers.\n${failures}")
endif()
