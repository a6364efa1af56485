# `flashcl tune` end to end on the default device (cmake -P, TOOL=<flashcl>, DIR=<scratch dir>):
#  1. the untuned plan is the first of each shape's candidates (so tuned is never slower);
#  2. a tiny budget is kept (wall clock of the whole process), and the file it writes is
#     what the plan chain then reads (`flashcl info` says origin tuned);
#  3. a rerun resumes; SIGINT keeps what was measured; a damaged file is ignored with a note;
#  4. the same budget and file read for --decode (a decode call's plan says origin tuned).
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
set(FILE ${DIR}/tuning.txt)
set(SHAPE --head-dims 64 --seqlen 128 --heads 2)
# Measurements of this size take about a second each on POCL: the budget, not the list, ends the run.
set(TIMED --head-dims 64 --seqlen 1024 --heads 8)
set(BUDGET 3)

execute_process(COMMAND ${TOOL} tune --list ${SHAPE} --output ${FILE} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "tune --list failed (${rc})")
endif()
string(REGEX MATCH "untuned ([^\n]+)" _ "${out}")
set(untuned ${CMAKE_MATCH_1})
string(REGEX MATCH "candidate ([^\n]+)" _ "${out}")
if(NOT untuned OR NOT CMAKE_MATCH_1 STREQUAL untuned)
  message(FATAL_ERROR "the untuned plan '${untuned}' is not the first candidate:\n${out}")
endif()

# The budget bounds measurements, which it predicts from the slowest so far; a first, cold build
# of a candidate's kernels (seconds on POCL on a fresh machine) is not predictable. A warm-up run
# into another file builds the candidates the timed run reaches (the same order, further), so the
# timed run tests the budget, not the compiler.
execute_process(COMMAND ${TOOL} tune ${TIMED} --budget 15 --output ${DIR}/warm.txt RESULT_VARIABLE rc
  OUTPUT_QUIET ERROR_QUIET)
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${TOOL} tune ${TIMED} --budget ${BUDGET} --output ${FILE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message(STATUS "tune --budget ${BUDGET}: ${took} s\n${out}")
# The budget stops measurements from starting, predicted from the slowest so far; one already
# started runs to its end (its build and first call cannot be cut), so the run may end up to one
# measurement late: the slack is the slowest measurement the tool reports, plus one second
# (TIMESTAMP has whole seconds).
string(REGEX MATCH "slowest measurement ([0-9]+)\\.([0-9])" _ "${out}")
if(NOT CMAKE_MATCH_1 AND NOT CMAKE_MATCH_1 STREQUAL "0")
  message(FATAL_ERROR "tune printed no slowest measurement:\n${out}")
endif()
math(EXPR limit "${BUDGET} + 1 + ${CMAKE_MATCH_1} + 1")
if(NOT rc EQUAL 0 OR took GREATER limit)
  message(FATAL_ERROR "tune took ${took} s for a ${BUDGET} s budget (exit ${rc}):\n${err}")
endif()
if(NOT EXISTS ${FILE})
  message(FATAL_ERROR "tune wrote no ${FILE}")
endif()
set(ENV{FLASHCL_TUNING} ${FILE})
execute_process(COMMAND ${TOOL} info RESULT_VARIABLE rc OUTPUT_VARIABLE info)
unset(ENV{FLASHCL_TUNING})
if(NOT info MATCHES "origin tuned")
  message(FATAL_ERROR "flashcl info does not plan from the tuning file:\n${info}")
endif()

execute_process(COMMAND ${TOOL} tune ${TIMED} --budget 3 --output ${FILE} RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT err MATCHES "resuming: [1-9]")
  message(FATAL_ERROR "a rerun does not resume:\n${err}")
endif()

find_program(TIMEOUT timeout)
if(TIMEOUT)
  file(REMOVE ${FILE})
  # SIGINT a few seconds in: the measurements finished so far stay, in a file the library accepts.
  # A problem large enough that the run cannot end before the signal. --foreground: without it
  # timeout signals the tuner and then its whole process group, so the tuner can get SIGINT twice,
  # and a second SIGINT ends it at once by design (exit 130; a terminal's Ctrl-C sends one).
  execute_process(COMMAND ${TIMEOUT} --foreground --preserve-status -s INT 6 ${TOOL} tune --head-dims 64,128 --seqlen 2048 --heads 4 --output ${FILE}
    RESULT_VARIABLE rc
    OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT out MATCHES "stopped: interrupted")
    message(FATAL_ERROR "SIGINT did not stop the tuner cleanly (exit ${rc}):\n${out}\n${err}")
  endif()
  set(ENV{FLASHCL_TUNING} ${FILE})
  execute_process(COMMAND ${TOOL} info OUTPUT_VARIABLE info)
  unset(ENV{FLASHCL_TUNING})
  if(NOT info MATCHES "origin tuned" OR NOT rc EQUAL 1)
    message(FATAL_ERROR "after SIGINT (exit ${rc}) the file is not read:\n${info}")
  endif()
endif()

# --decode: the decode family's candidates, the budget kept as above, and the plan of a decode call of the
# tuned key read from the file (bench --json reports the plan's origin).
set(DFILE ${DIR}/decode.txt)
set(DECODE --decode --head-dims 64 --heads 8 --kv-heads 2 --seqlen-k 4096)
execute_process(COMMAND ${TOOL} tune ${DECODE} --list --output ${DFILE} RESULT_VARIABLE rc OUTPUT_VARIABLE out)
if(NOT rc EQUAL 0 OR NOT out MATCHES "decode d=64 dtype=f32 cache=same rows=4 untuned kernel=decode")
  message(FATAL_ERROR "tune --decode --list (exit ${rc}):\n${out}")
endif()
execute_process(COMMAND ${TOOL} tune ${DECODE} --budget 15 --output ${DIR}/decode-warm.txt OUTPUT_QUIET ERROR_QUIET)
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${TOOL} tune ${DECODE} --budget ${BUDGET} --output ${DFILE}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(TIMESTAMP t1 "%s")
math(EXPR took "${t1} - ${t0}")
message(STATUS "tune --decode --budget ${BUDGET}: ${took} s\n${out}")
string(REGEX MATCH "slowest measurement ([0-9]+)\\.([0-9])" _ "${out}")
math(EXPR limit "${BUDGET} + 1 + ${CMAKE_MATCH_1} + 1")
if(NOT rc EQUAL 0 OR took GREATER limit OR NOT out MATCHES "decode d=64 dtype=f32 cache=same rows=4")
  message(FATAL_ERROR "tune --decode took ${took} s for a ${BUDGET} s budget (exit ${rc}):\n${out}\n${err}")
endif()
set(ENV{FLASHCL_TUNING} ${DFILE})
execute_process(COMMAND ${TOOL} bench --seqlen 1 --seqlen-k 512 --heads 8 --kv-heads 2 --head-dim 64 --path flash
  --iters 1 --read-bw off --json RESULT_VARIABLE rc OUTPUT_VARIABLE bench ERROR_VARIABLE err)
unset(ENV{FLASHCL_TUNING})
if(NOT rc EQUAL 0 OR NOT bench MATCHES "\"origin\":\"tuned\"")
  message(FATAL_ERROR "a decode call does not plan from the tuning file (exit ${rc}):\n${bench}\n${err}")
endif()

file(APPEND ${FILE} "junk\n")
execute_process(COMMAND ${TOOL} tune --list ${SHAPE} --output ${FILE} ERROR_VARIABLE err)
if(NOT err MATCHES "ignored: truncated.*starting afresh")
  message(FATAL_ERROR "a damaged file is not reported:\n${err}")
endif()
file(REMOVE_RECURSE ${DIR})
