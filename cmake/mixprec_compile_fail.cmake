# mixprec_add_compile_fail_test(<name> <source> <expected_regex>)
#
# Registers a "must not compile" case, after Eigen's failtest: <source> is built twice, as two
# OBJECT libraries that are EXCLUDE_FROM_ALL (so a normal build never tries them):
#   mixprec_compile_fail_<name>_ok   normally: the file must compile (proves the snippet is fine
#                                    apart from the line under test);
#   mixprec_compile_fail_<name>_ko   with -DMIXPREC_EXPECT_COMPILE_ERROR: the file must NOT compile,
#                                    and the compiler's output must match <expected_regex>.
# Each is a ctest test, `compile_fail/<name>/ok` and `compile_fail/<name>/ko`, that runs
# `cmake --build <build dir> --target <target>`. The _ko test passes only when the build output
# matches <expected_regex> (PASS_REGULAR_EXPRESSION; the exit code is then ignored), so a build that
# fails for an unrelated reason (a typo, a missing header) does not count as a pass.
#
# Write <expected_regex> against OUR diagnostic text (a static_assert sentence, a concept name),
# not the compiler's wording, wherever there is one; where only the compiler's text exists, give one
# alternative per compiler (GCC 12 and Clang 14). The builds run with LC_ALL=C (ASCII quotes) and
# without colour, but still match quotes with `.` to be safe.
#
# The source uses the macro to switch the offending line on:
#
#     #ifdef MIXPREC_EXPECT_COMPILE_ERROR
#     mixprec::bfloat16 b = 1.0f;    // implicit narrowing: must not compile
#     #else
#     mixprec::bfloat16 b(1.0f);     // the explicit spelling compiles
#     #endif
#
# All these tests share one RESOURCE_LOCK (they drive the same build tree, which must not run two
# builds at once) and the label `compile_fail`.
function(mixprec_add_compile_fail_test name source expected_regex)
  if(NOT IS_ABSOLUTE "${source}")
    set(source "${CMAKE_CURRENT_SOURCE_DIR}/${source}")
  endif()
  foreach(kind ok ko)
    set(target mixprec_compile_fail_${name}_${kind})
    add_library(${target} OBJECT EXCLUDE_FROM_ALL ${source})
    target_link_libraries(${target} PRIVATE mixprec::mixprec mixprec_warnings)
    add_test(NAME compile_fail/${name}/${kind}
             COMMAND ${CMAKE_COMMAND} --build ${PROJECT_BINARY_DIR} --target ${target} --config $<CONFIG>)
    set_tests_properties(compile_fail/${name}/${kind} PROPERTIES
      RESOURCE_LOCK mixprec_build_tree
      LABELS compile_fail
      ENVIRONMENT "LC_ALL=C")
  endforeach()
  target_compile_definitions(mixprec_compile_fail_${name}_ko PRIVATE MIXPREC_EXPECT_COMPILE_ERROR)
  target_compile_options(mixprec_compile_fail_${name}_ko PRIVATE -fno-diagnostics-color)
  set_tests_properties(compile_fail/${name}/ko PROPERTIES PASS_REGULAR_EXPRESSION "${expected_regex}")
endfunction()
