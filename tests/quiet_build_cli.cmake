# The library prints nothing, also while an OpenCL compiler builds its programs
# (cmake -P, TOOL=<flashcl>, DIR=<scratch dir>). POCL's clang, on a host without AVX-512, printed
# "15 warnings generated." to stderr for every program built from source without -w (the standard
# path, the row kernels, the merge, the KV append, the dropout mask). Fresh program caches (FlashCL's
# and POCL's, POCL_CACHE_DIR), so the programs are compiled, not loaded; elsewhere it passes as well.
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR}/flashcl ${DIR}/pocl)
set(ENV{FLASHCL_CACHE_DIR} ${DIR}/flashcl)
set(ENV{POCL_CACHE_DIR} ${DIR}/pocl)
execute_process(COMMAND ${TOOL} bench --path standard --seqlen 16 --heads 1 --head-dim 8 --iters 1 --warmup 0
  --read-bw off RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT err STREQUAL "")
  message(FATAL_ERROR "bench --path standard (exit ${rc}) wrote to stderr:\n${err}")
endif()
file(REMOVE_RECURSE ${DIR})
