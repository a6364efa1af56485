# `flashcl bench --sweep` (cmake -P, TOOL=<flashcl>, DIR=<scratch dir>): a two-point sweep writes
# PREFIX.json (every point's --json lines: rows for both paths and a summary each) and PREFIX.csv
# (a header and a row per path and pass), with --json stdout is a JSON array of those rows, and bad
# ranges, an empty or unwritable --sweep-out and a --sweep-* option without --sweep are usage
# errors.
cmake_minimum_required(VERSION 3.16)
file(REMOVE_RECURSE ${DIR})
file(MAKE_DIRECTORY ${DIR})
execute_process(COMMAND ${TOOL} bench --sweep --sweep-min 64 --sweep-max 128 --heads 2 --kv-heads 1 --head-dim 32 --iters 1
  --roof 1 --sweep-out ${DIR}/s RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "bench --sweep failed (${rc}):\n${err}")
endif()
file(STRINGS ${DIR}/s.json json)
file(STRINGS ${DIR}/s.csv csv)
list(LENGTH json nj)
list(LENGTH csv nc)
# Two points x (flash, standard, summary); one header + two points x two paths.
if(NOT nj EQUAL 6 OR NOT nc EQUAL 5)
  message(FATAL_ERROR "expected 6 JSON lines and 5 CSV lines, got ${nj} and ${nc}:\n${json}\n${csv}")
endif()
if(NOT json MATCHES "\"seqlen\":128" OR NOT csv MATCHES "128,128,32,0,standard,fwd,ran")
  message(FATAL_ERROR "the second point is missing:\n${json}\n${csv}")
endif()
# The CSV names the storage, the KV heads and V's head dim (last, after the columns of the first sweeps).
list(GET csv 0 header)
if(NOT header MATCHES ",kernel,origin,dtype,kv_heads,head_dim_v$" OR NOT csv MATCHES ",float32,1,32;")
  message(FATAL_ERROR "the CSV lacks dtype, kv_heads and head_dim_v:\n${csv}")
endif()
# --json: stdout is a JSON array of the CSV's rows (no tables), the files as without it.
execute_process(COMMAND ${TOOL} bench --sweep --json --sweep-min 64 --sweep-max 128 --heads 2 --kv-heads 1 --head-dim 32
  --iters 1 --roof 1 --sweep-out ${DIR}/j RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(REGEX MATCHALL "{\"batch\":1,\"heads\":2,\"kv_heads\":1,\"seqlen\":(64|128),[^}]*\"dtype\":\"float32\",\"path\":\"(flash|standard)\",\"pass\":\"fwd\",\"status\":\"ran\"" objects "${out}")
list(LENGTH objects no)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^\\[\n{.*}\n\\]\n$" OR NOT no EQUAL 4 OR out MATCHES "device " OR NOT EXISTS ${DIR}/j.csv)
  message(FATAL_ERROR "bench --sweep --json printed no JSON array of 4 rows (exit ${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${TOOL} bench --sweep --sweep-min 100 --sweep-out ${DIR}/t RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR EXISTS ${DIR}/t.json)
  message(FATAL_ERROR "--sweep-min 100 was not refused (${rc}): ${err}")
endif()
# --sweep-out: an empty prefix (it wrote the hidden files .json and .csv) and a missing directory
# (exit 1 when the files were opened) are usage errors (exit 2) before the first point.
foreach(bad "" "${DIR}/missing/s")
  execute_process(COMMAND ${TOOL} bench --sweep --sweep-min 64 --sweep-max 64 --heads 2 --iters 1 --roof 1
    --sweep-out "${bad}" WORKING_DIRECTORY ${DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 2 OR NOT err MATCHES "--sweep-out: " OR EXISTS ${DIR}/.json OR EXISTS ${DIR}/.csv OR out MATCHES "ms")
    message(FATAL_ERROR "--sweep-out '${bad}' was not refused up front (exit ${rc}):\n${out}\n${err}")
  endif()
endforeach()
# A --sweep-* option without --sweep ran the plain bench at --seqlen instead: refused, naming it.
execute_process(COMMAND ${TOOL} bench --sweep-max 128 --heads 2 --iters 1 --roof 1
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "--sweep-max: only applies with --sweep" OR out MATCHES "ms")
  message(FATAL_ERROR "--sweep-max without --sweep was not refused (exit ${rc}):\n${out}\n${err}")
endif()
file(REMOVE_RECURSE ${DIR})
