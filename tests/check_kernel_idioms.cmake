# Fails if a portable kernel (one POCL compiles) starts a loop at the local
# id, `for (int e = lid; e < n; e += wg)`: POCL 3.1 miscompiled that form
# inside kernels with barriers (cl/common.cl, FLASHCL_SHARED_FOR, says how),
# and the damage depends on the host ISA, so no single machine's run shows it.
# The tensor-core sources (inline PTX) are built by NVIDIA's compiler alone.
#   cmake -DCL_DIR=<cl> -P check_kernel_idioms.cmake
file(GLOB sources ${CL_DIR}/*.cl)
set(found "")
foreach(source ${sources})
  get_filename_component(name ${source} NAME)
  if(name MATCHES "_mma\\.cl$")
    continue()
  endif()
  file(STRINGS ${source} lines)
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    if(line MATCHES "for *\\( *(int|long|uint|ulong|size_t) +[A-Za-z_0-9]+ *= *(lid|\\(int\\) *get_local_id|get_local_id)")
      string(STRIP "${line}" shown)
      string(REPLACE ";" "," shown "${shown}") # keep the CMake list intact
      list(APPEND found "${name}:${line_no}: ${shown}")
    endif()
  endforeach()
endforeach()
if(found)
  string(REPLACE ";" "\n" found "${found}")
  message(FATAL_ERROR "loops that start at the local id (use FLASHCL_SHARED_FOR, cl/common.cl):\n${found}")
endif()
list(LENGTH sources count)
message("kernel idioms: ${count} sources checked, no loop starts at the local id")
