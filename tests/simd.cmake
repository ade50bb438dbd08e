# Bulk conversion (formats/convert.hpp) is built a second time with the x86 SIMD instruction sets, so
# that its intrinsics paths are tested too: the same tests/formats/convert_test.cpp, compiled with
# -mf16c -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16, as mixprec_formats_convert_simd_test.
# Both builds compare every result with the scalar conversions, so they are bit-identical.
# A third build with F16C/AVX2 only (mixprec_formats_convert_f16c_test) covers the 256-bit float16 path
# that AVX2-class CPUs take. The tests run on the machine that builds them, and a binary compiled with
# -mavx512f may use AVX-512 anywhere (Catch2's own code included): each target is created only when the
# compiler accepts every flag *and* this machine's CPU runs the level (mixprec::detected_isa(), checked
# once at configure time by running a small program); otherwise a STATUS message says why it is missing.
# (A CPU whose hypervisor hides AVX-512, as some cloud machines do, takes only the f16c build.)
include(CheckCXXCompilerFlag)

set(mixprec_convert_source ${CMAKE_CURRENT_SOURCE_DIR}/formats/convert_test.cpp)

# Whether this machine's CPU runs the instruction-set level <level> (a mixprec::isa name) or above.
function(mixprec_cpu_runs_isa level out_var)
  set(cache_var MIXPREC_CPU_RUNS_${level})
  if(NOT DEFINED ${cache_var})
    # The probe asks the CPU, not this build: it is compiled without the build's flags. A sanitizer's
    # runtime can fail to start (ThreadSanitizer's does under high ASLR entropy), and the level would
    # then read as missing: the tsan job once dropped mixprec_formats_convert_f16c_test so.
    set(CMAKE_CXX_FLAGS "")
    set(probe ${CMAKE_CURRENT_BINARY_DIR}/cpu_probe/isa_${level}.cpp)
    file(WRITE ${probe} "#include <mixprec/arch/isa.hpp>\nint main() { return mixprec::detected_isa() >= mixprec::parse_isa(\"${level}\") ? 0 : 1; }\n")
    try_run(run_result compile_result ${CMAKE_CURRENT_BINARY_DIR}/cpu_probe/build_${level} ${probe}
            CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${PROJECT_SOURCE_DIR}/include" CXX_STANDARD 20)
    if(compile_result AND run_result EQUAL 0)
      set(${cache_var} ON CACHE INTERNAL "this machine's CPU runs mixprec's ${level} level")
    else()
      set(${cache_var} OFF CACHE INTERNAL "this machine's CPU runs mixprec's ${level} level")
    endif()
  endif()
  set(${out_var} ${${cache_var}} PARENT_SCOPE)
endfunction()

# mixprec_add_convert_simd_test(<suffix> <level> <flag>...): mixprec_formats_convert_<suffix>_test
# with <flag>s, when the CPU runs <level>.
function(mixprec_add_convert_simd_test suffix level)
  if(NOT EXISTS ${mixprec_convert_source})
    return()
  endif()
  mixprec_cpu_runs_isa(${level} cpu_runs)
  if(NOT cpu_runs)
    message(STATUS "mixprec: this machine's CPU does not run the ${level} level; mixprec_formats_convert_${suffix}_test is not built")
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

mixprec_add_convert_simd_test(simd avx512bf16 -mf16c -mavx2 -mfma -mavx512f -mavx512bw -mavx512vl -mavx512bf16)
mixprec_add_convert_simd_test(f16c avx2 -mf16c -mavx2 -mfma)
