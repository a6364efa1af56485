# Compiles every portable kernel program, as the library assembles it, offline
# with clang for one target: nothing but POCL and NVIDIA's compiler ever built
# them otherwise, and the project promises AMD and Intel GPUs too.
#   cmake -DCLANG=<clang 15+> -DKERNEL_TEXT=<tests/kernel_text> -DWORK_DIR=<dir> -DOFFLINE_TARGET=<t> -P compile_offline.cmake
# OFFLINE_TARGET: spir64 (what Intel's and other SPIR-consuming drivers take), or an
# amdgcn processor (gfx90a: MI200; gfx1100: RDNA3, needs LLVM 15+).
# Warnings are errors, with the conversions a device without doubles or with
# a stricter compiler would refuse (double promotion, implicit narrowing of
# floating literals) and missing prototypes turned on.
if(NOT CLANG)
  message("clang 15 or later is not installed: skipping")
  return()
endif()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
execute_process(COMMAND ${KERNEL_TEXT} ${WORK_DIR} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "kernel_text failed (${status}): ${out}${err}")
endif()

if(OFFLINE_TARGET STREQUAL "spir64")
  # No spir64 code generator in Debian's LLVM: the check stops at SPIR LLVM IR, after every front-end check.
  set(target_flags -target spir64-unknown-unknown -emit-llvm)
else()
  # -nogpulib: no ROCm device library here; math builtins stay external calls in the object.
  set(target_flags -target amdgcn-amd-amdhsa -nogpulib -mcpu=${OFFLINE_TARGET})
endif()

file(GLOB programs ${WORK_DIR}/*.cl)
list(LENGTH programs count)
if(count EQUAL 0)
  message(FATAL_ERROR "kernel_text wrote no programs")
endif()
set(failed "")
foreach(program ${programs})
  string(REGEX REPLACE "\\.cl$" ".options" options_file ${program})
  file(READ ${options_file} options)
  string(STRIP "${options}" options)
  separate_arguments(options UNIX_COMMAND "${options}")
  get_filename_component(name ${program} NAME_WE)
  execute_process(
    COMMAND ${CLANG} -cl-std=CL1.2 -Xclang -finclude-default-header ${target_flags} ${options}
            -Werror -Wmissing-prototypes -Wimplicit-float-conversion -Wdouble-promotion
            -c -o ${WORK_DIR}/${name}.out ${program}
    RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT status EQUAL 0)
    list(APPEND failed ${name})
    message("FAIL ${name} (${OFFLINE_TARGET}): ${out}${err}")
  else()
    message("ok   ${name} (${OFFLINE_TARGET})")
  endif()
endforeach()
if(failed)
  message(FATAL_ERROR "${OFFLINE_TARGET}: these programs do not compile: ${failed}")
endif()
message("${OFFLINE_TARGET}: all ${count} programs compile")
