# Runs a program under Oclgrind and fails on any Oclgrind report.
#   cmake -DOCLGRIND=/path/to/oclgrind -P run_oclgrind.cmake -- <oclgrind flags> <program> <args>
# Oclgrind reports problems on stderr but does not change the exit status,
# so the output is searched. The programs it runs never print these words
# when they pass.
if(NOT OCLGRIND)
  message("oclgrind is not installed: skipping")
  return()
endif()

# Everything after "--" is the command line for oclgrind.
set(command_line "")
set(after_separator FALSE)
math(EXPR last "${CMAKE_ARGC} - 1")
foreach(i RANGE ${last})
  if(after_separator)
    list(APPEND command_line "${CMAKE_ARGV${i}}")
  elseif(CMAKE_ARGV${i} STREQUAL "--")
    set(after_separator TRUE)
  endif()
endforeach()

execute_process(COMMAND ${OCLGRIND} ${command_line}
  RESULT_VARIABLE status
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err)
message("${out}")
message("${err}")

string(TOLOWER "${out}\n${err}" all)
set(reports "")
foreach(pattern "invalid read" "invalid write" "data race" "uninitiali" "error" "divergence"
                "fatal")
  string(FIND "${all}" "${pattern}" at)
  if(NOT at EQUAL -1)
    list(APPEND reports "${pattern}")
  endif()
endforeach()
if(NOT status EQUAL 0)
  message(FATAL_ERROR "oclgrind run failed with exit status ${status}")
endif()
if(reports)
  message(FATAL_ERROR "Oclgrind reported: ${reports}")
endif()
