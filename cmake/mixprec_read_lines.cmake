# Reading a file's lines whole, for the house checks (mixprec_check_includes.cmake,
# mixprec_check_header_text.cmake), which report problems by file and line.
#
# file(STRINGS) would split lines at non-ASCII bytes, and a CMake list splits or joins its elements at
# `;`, `[` and `]`. So mixprec_read_lines() stands ASCII 31, 29 and 30 in for those three characters
# before it splits the text at newlines: element i of the list is then line i + 1 of the file, and
# mixprec_line_text() gives that line's own text back.
include_guard(GLOBAL)

string(ASCII 29 mixprec_open_mark)
string(ASCII 30 mixprec_close_mark)
string(ASCII 31 mixprec_semi_mark)

# mixprec_read_lines(<path> <out>): sets <out> to the lines of the file <path>, one list element each, with the
# marks in place of `;`, `[` and `]`.
function(mixprec_read_lines path out)
  file(READ "${path}" text)
  string(REPLACE ";" "${mixprec_semi_mark}" text "${text}")
  string(REPLACE "[" "${mixprec_open_mark}" text "${text}")
  string(REPLACE "]" "${mixprec_close_mark}" text "${text}")
  string(REPLACE "\n" ";" lines "${text}")
  set(${out} "${lines}" PARENT_SCOPE)
endfunction()

# mixprec_line_text(<element> <out>): sets <out> to the text of one element of mixprec_read_lines(),
# its `;`, `[` and `]` restored.
function(mixprec_line_text element out)
  string(REPLACE "${mixprec_semi_mark}" ";" line "${element}")
  string(REPLACE "${mixprec_open_mark}" "[" line "${line}")
  string(REPLACE "${mixprec_close_mark}" "]" line "${line}")
  set(${out} "${line}" PARENT_SCOPE)
endfunction()
