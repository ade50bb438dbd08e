# mixprec_add_compile_fail_test(<name> <source> <expected_regex>)
#
# Registers a "must not compile" case, after Eigen's failtest: <source> is built twice, as two
# OBJECT libraries that are EXCLUDE_FROM_ALL (so a normal build never tries them):
#   mixprec_compile_fail_<name>_ok   normally: the file must compile (proves the snippet is fine
#                                    apart from the line under test);
#   mixprec_compile_fail_<name>_ko   with -DMIXPREC_EXPECT_COMPILE_ERROR: the file must NOT compile,
#                                    and the compiler's output must match <expected_regex>.
# Each is a ctest test, `compile_fail/<name>/ok` and `compile_fail/<name>/ko`, that runs the compiler
# on <source> with -fsyntax-only and the target's flags: its include directories (ours with -I, the
# third-party ones with -isystem, as the build passes them), definitions and options, taken from the
# target by generator expressions. The compiler is called directly, not through the build tree, so
# the tests run in parallel and need no lock. The _ko test passes only when the compiler's output
# matches <expected_regex> (PASS_REGULAR_EXPRESSION; the exit code is then ignored), so a build that
# fails for an unrelated reason (a typo, a missing header) does not count as a pass. The targets can
# also be built by hand (`cmake --build <dir> --target mixprec_compile_fail_<name>_ko`).
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
# All these tests carry the label `compile_fail`.
function(mixprec_add_compile_fail_test name source expected_regex)
  if(NOT IS_ABSOLUTE "${source}")
    set(source "${CMAKE_CURRENT_SOURCE_DIR}/${source}")
  endif()
  string(TOUPPER "${CMAKE_BUILD_TYPE}" config)
  separate_arguments(flags UNIX_COMMAND "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_${config}}")
  if(CMAKE_CXX_EXTENSIONS OR NOT DEFINED CMAKE_CXX_EXTENSIONS)
    set(standard ${CMAKE_CXX20_EXTENSION_COMPILE_OPTION})
  else()
    set(standard ${CMAKE_CXX20_STANDARD_COMPILE_OPTION})
  endif()
  # Our include directory is passed with -I; the compiler's own (implicit) directories not at all, as
  # CMake passes them; the others (Eigen, xtensor) with -isystem.
  set(own "${PROJECT_SOURCE_DIR}/include")
  set(excluded "")
  foreach(dir ${own} ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES})
    string(REGEX REPLACE "([][+.*()^$?|\\])" "\\\\\\1" escaped "${dir}")
    list(APPEND excluded "${escaped}")
  endforeach()
  list(JOIN excluded "|" excluded)
  foreach(kind ok ko)
    set(target mixprec_compile_fail_${name}_${kind})
    add_library(${target} OBJECT EXCLUDE_FROM_ALL ${source})
    target_link_libraries(${target} PRIVATE ${MIXPREC_OWN_TARGET} mixprec_warnings)
    set(others "$<FILTER:$<TARGET_PROPERTY:${target},INCLUDE_DIRECTORIES>,EXCLUDE,^(${excluded})$>")
    set(definitions "$<TARGET_PROPERTY:${target},COMPILE_DEFINITIONS>")
    add_test(NAME compile_fail/${name}/${kind}
             COMMAND ${CMAKE_CXX_COMPILER} ${flags} ${standard} -I${own}
                     "$<$<BOOL:${others}>:-isystem$<JOIN:${others},;-isystem>>"
                     "$<$<BOOL:${definitions}>:-D$<JOIN:${definitions},;-D>>"
                     "$<TARGET_PROPERTY:${target},COMPILE_OPTIONS>" -fsyntax-only ${source}
             COMMAND_EXPAND_LISTS)
    set_tests_properties(compile_fail/${name}/${kind} PROPERTIES LABELS compile_fail ENVIRONMENT "LC_ALL=C")
  endforeach()
  target_compile_definitions(mixprec_compile_fail_${name}_ko PRIVATE MIXPREC_EXPECT_COMPILE_ERROR)
  target_compile_options(mixprec_compile_fail_${name}_ko PRIVATE -fno-diagnostics-color)
  set_tests_properties(compile_fail/${name}/ko PROPERTIES PASS_REGULAR_EXPRESSION "${expected_regex}")
endfunction()
