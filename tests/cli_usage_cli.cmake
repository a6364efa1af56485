# Small CLI usage checks (cmake -P, TOOL=<flashcl>): each of these is a usage error (exit 2) with one
# line on stderr naming what is wrong:
#  - `flashcl --version` with an argument after it;
#  - `tune --head-dims 64,` (a trailing comma);
#  - `tune --decode --causal` (decode shapes have no causal form; it used to be a note);
#  - `tune --list` with FLASHCL_CACHE_DIR=off (no tuning file location, the user's setting);
#  - `--scale 1e-50` / `--softcap 1e-45`: they underflow float32, which is said as such (not "expected
#    a finite number");
# and `attention --help`'s synopsis lists --allow-tf32, as its body does.
cmake_minimum_required(VERSION 3.16)

function(expect_usage label want)
  execute_process(COMMAND ${TOOL} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX MATCHALL "\n" newlines "${err}")
  list(LENGTH newlines lines)
  if(NOT rc EQUAL 2 OR NOT lines EQUAL 1 OR NOT err MATCHES "${want}")
    message(FATAL_ERROR "${label}: expected exit 2 and one line naming '${want}', got exit ${rc}:\n${err}")
  endif()
  message(STATUS "${label}: exit 2, ${err}")
endfunction()

expect_usage("--version extra" "--version takes no arguments" --version extra)
expect_usage("tune --head-dims 64," "--head-dims: .*trailing comma" tune --list --head-dims 64,)
expect_usage("tune --decode --causal" "--causal: does not apply with --decode" tune --list --decode --causal)
set(ENV{FLASHCL_CACHE_DIR} off)
unset(ENV{FLASHCL_TUNING})
expect_usage("tune --list, FLASHCL_CACHE_DIR=off" "no tuning file location: FLASHCL_CACHE_DIR=off" tune --list)
foreach(option --scale --softcap)
  foreach(value 1e-50 1e-45)
    expect_usage("attention ${option} ${value}" "${option}: '${value}' is too small for float32 \\(it underflows\\)"
      attention --q Q.npy --k K.npy --v V.npy --out O.npy ${option} ${value})
  endforeach()
endforeach()

execute_process(COMMAND ${TOOL} attention --help RESULT_VARIABLE rc OUTPUT_VARIABLE out)
string(FIND "${out}" "\n\n" synopsis_end)
string(SUBSTRING "${out}" 0 ${synopsis_end} synopsis)
if(NOT rc EQUAL 0 OR NOT synopsis MATCHES "\\[--allow-tf32\\]")
  message(FATAL_ERROR "attention --help: the usage synopsis does not list [--allow-tf32] (exit ${rc}):\n${synopsis}")
endif()
