# Bulk conversion (formats/convert.hpp) is built a second time with the x86 SIMD instruction sets, so
# that its intrinsics paths are tested too: the same tests/formats/convert_test.cpp, compiled with
# -mf16c -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16, as mixprec_formats_convert_simd_test.
# Both builds compare every result with the scalar conversions, so they are bit-identical.
# A third build with F16C/AVX2 only (mixprec_formats_convert_f16c_test) covers the 256-bit float16 path
# that AVX2-class CPUs take. On a CPU without the instruction sets the tests WARN and check the
# portable path only; the targets are created only when the compiler accepts every flag.
include(CheckCXXCompilerFlag)

set(mixprec_convert_source ${CMAKE_CURRENT_SOURCE_DIR}/formats/convert_test.cpp)

# mixprec_add_convert_simd_test(<suffix> <flag>...): mixprec_formats_convert_<suffix>_test with <flag>s.
function(mixprec_add_convert_simd_test suffix)
  if(NOT EXISTS ${mixprec_convert_source})
    return()
  endif()
  foreach(flag ${ARGN})
    string(MAKE_C_IDENTIFIER "MIXPREC_CXX_ACCEPTS${flag}" var)
    check_cxx_compiler_flag(${flag} ${var})
    if(NOT ${var})
      message(STATUS "mixprec: ${CMAKE_CXX_COMPILER_ID} rejects ${flag}; mixprec_formats_convert_${suffix}_test is not built")
      return()
    endif()
  endforeach()
  set(target mixprec_formats_convert_${suffix}_test)
  add_executable(${target} ${mixprec_convert_source} $<TARGET_OBJECTS:mixprec_test_main>)
  target_link_libraries(${target} PRIVATE mixprec::mixprec mixprec_warnings Catch2::Catch2)
  target_compile_options(${target} PRIVATE ${ARGN})
  catch_discover_tests(${target} TEST_PREFIX "formats/convert_${suffix}_test: " ${mixprec_catch_discover_args})
endfunction()

mixprec_add_convert_simd_test(simd -mf16c -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16)
mixprec_add_convert_simd_test(f16c -mf16c -mavx2 -mfma)
