# flashcl_ring's options (cmake -P, TOOL=<flashcl_ring>): a bad value, trailing junk included, is a
# usage error (exit 2) whose one line names the option and what it takes, before any run; run here
# as a ring of one (no mpirun: nothing runs past the parse).
cmake_minimum_required(VERSION 3.16)
foreach(bad "--window;3,4x" "--window;3" "--window;3,-2" "--window; 3,4" "--window" "--dim;64x" "--iters;0"
            "--layout;ring" "--dtype;f64")
  list(GET bad 0 option)
  string(REPLACE ";" " " shown "${bad}")
  execute_process(COMMAND ${TOOL} ${bad} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "^flashcl_ring: ${option}: (expected|missing value)" OR out MATCHES "per call")
    message(FATAL_ERROR "flashcl_ring ${shown}: not refused naming ${option} (exit ${rc}):\n${out}\n${err}")
  endif()
endforeach()
