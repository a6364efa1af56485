# `flashcl tune`'s options and output, quickly (cmake -P, TOOL=<flashcl>, DIR=<scratch dir>):
#  1. FLASHCL_TUNING=off and =0 (every spelling the library takes as off) are named as such, not as
#     "no cache directory";
#  2. a value given twice in a list option (--head-dims, --dtypes) is tuned once, with a note;
#  3. with stderr not a terminal (captured here), progress comes as plain lines, no '\r' redraws;
#  4. an empty or unwritable --output is refused before anything is measured.
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(SHAPE --head-dims 32 --seqlen 128 --heads 2)

foreach(off off 0)
  set(ENV{FLASHCL_TUNING} ${off})
  execute_process(COMMAND ${TOOL} tune --list ${SHAPE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  unset(ENV{FLASHCL_TUNING})
  if(NOT rc EQUAL 1 OR NOT err MATCHES "FLASHCL_TUNING=${off} turns tuning files off" OR err MATCHES "cache directory")
    message(FATAL_ERROR "FLASHCL_TUNING=${off}: not reported as off (exit ${rc}):\n${err}")
  endif()
endforeach()
# --output 0 would read as off to the library: refused, naming the option.
execute_process(COMMAND ${TOOL} tune --list ${SHAPE} --output 0 RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--output 0")
  message(FATAL_ERROR "--output 0 was not refused (exit ${rc}):\n${err}")
endif()

# --output '' would read as FLASHCL_TUNING unset (the device's own file); a directory or a missing
# directory cannot be written: each refused before any measurement (exit 2, nothing timed).
foreach(bad "" "${DIR}" "${DIR}/missing/t.txt")
  execute_process(COMMAND ${TOOL} tune ${SHAPE} --budget 1 --output "${bad}"
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "--output: " OR err MATCHES "flashcl: tune: [0-9]+/")
    message(FATAL_ERROR "--output '${bad}' was not refused up front (exit ${rc}):\n${err}")
  endif()
endforeach()

execute_process(COMMAND ${TOOL} tune --list ${SHAPE} --output ${DIR}/once.txt RESULT_VARIABLE rc OUTPUT_VARIABLE once)
execute_process(COMMAND ${TOOL} tune --list --head-dims 32,32 --dtypes f32,f32 --seqlen 128 --heads 2
  --output ${DIR}/twice.txt RESULT_VARIABLE rc2 OUTPUT_VARIABLE twice ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT rc2 EQUAL 0 OR NOT once STREQUAL twice OR NOT err MATCHES "--head-dims: 32 given more than once"
   OR NOT err MATCHES "--dtypes: f32 given more than once")
  message(FATAL_ERROR "duplicates in the lists are not tuned once (exit ${rc}, ${rc2}):\n${err}\n${once}\n--\n${twice}")
endif()

execute_process(COMMAND ${TOOL} tune ${SHAPE} --budget 1 --output ${DIR}/progress.txt
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${err}" "\r" cr)
if(NOT rc EQUAL 0 OR NOT cr EQUAL -1 OR NOT err MATCHES "flashcl: tune: [0-9]+/[0-9]+ ")
  message(FATAL_ERROR "progress into a file (exit ${rc}) is not plain lines:\n${err}")
endif()
file(REMOVE_RECURSE ${DIR})
