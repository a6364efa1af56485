# Fails if a portable kernel (one POCL compiles) starts a loop at the local
# id, `for (int e = lid; e < n; e += wg)`: POCL 3.1 miscompiled that form
# inside kernels with barriers (cl/common.cl, FLASHCL_SHARED_FOR, says how),
# and the damage depends on the host ISA, so no single machine's run shows it.
# The tensor-core sources (*_mma.cl) and their PTX prelude (ptx.cl) are built
# by NVIDIA's compiler alone and are exempt; in return, inline asm may appear
# in cl/ptx.cl only, so no portable kernel can carry PTX (or hide behind the
# exemption) without failing here.
#   cmake -DCL_DIR=<cl> -P check_kernel_idioms.cmake
file(GLOB sources ${CL_DIR}/*.cl)
set(found "")
set(checked 0)
set(exempt 0)
foreach(source ${sources})
  get_filename_component(name ${source} NAME)
  file(STRINGS ${source} lines)
  set(nvidia_only FALSE)
  if(name MATCHES "_mma\\.cl$" OR name STREQUAL "ptx.cl")
    set(nvidia_only TRUE)
    math(EXPR exempt "${exempt} + 1")
  else()
    math(EXPR checked "${checked} + 1")
  endif()
  set(line_no 0)
  foreach(line IN LISTS lines)
    math(EXPR line_no "${line_no} + 1")
    string(STRIP "${line}" shown)
    string(REPLACE ";" "," shown "${shown}") # keep the CMake list intact
    if(NOT nvidia_only AND line MATCHES "for *\\( *(int|long|uint|ulong|size_t) +[A-Za-z_0-9]+ *= *(lid|\\(int\\) *get_local_id|get_local_id)")
      list(APPEND found "${name}:${line_no}: loop starts at the local id (use FLASHCL_SHARED_FOR, cl/common.cl): ${shown}")
    endif()
    if(NOT name STREQUAL "ptx.cl" AND line MATCHES "(^|[^A-Za-z_0-9])(asm|__asm__|__asm)([ \t]+(volatile|__volatile__))?[ \t]*\\(")
      list(APPEND found "${name}:${line_no}: inline asm outside cl/ptx.cl: ${shown}")
    endif()
  endforeach()
endforeach()
if(found)
  string(REPLACE ";" "\n" found "${found}")
  message(FATAL_ERROR "kernel idioms:\n${found}")
endif()
message("kernel idioms: ${checked} portable sources checked, no loop starts at the local id; "
        "inline asm only in ptx.cl (${exempt} NVIDIA-only sources exempt from the loop check)")
