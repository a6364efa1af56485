# Installs the build tree into a scratch prefix, then configures and builds
# examples/consumer against it with find_package(FlashCL).
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}/consumer" -B "${WORK_DIR}/build"
                        "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the consumer failed:\n${out}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the consumer failed:\n${out}")
endif()
if(NOT EXISTS "${WORK_DIR}/prefix/include/flashcl.h")
  message(FATAL_ERROR "flashcl.h was not installed")
endif()
# The pkg-config file, for builds without CMake; asked through pkg-config where it is installed.
file(GLOB pc_files "${WORK_DIR}/prefix/lib*/pkgconfig/flashcl.pc")
if(NOT pc_files)
  message(FATAL_ERROR "flashcl.pc was not installed")
endif()
find_program(PKG_CONFIG_EXE pkg-config)
if(PKG_CONFIG_EXE)
  list(GET pc_files 0 pc_file)
  get_filename_component(pc_dir "${pc_file}" DIRECTORY)
  set(ENV{PKG_CONFIG_PATH} "${pc_dir}")
  execute_process(COMMAND ${PKG_CONFIG_EXE} --cflags --libs flashcl RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                  ERROR_VARIABLE flags)
  if(NOT rc EQUAL 0 OR NOT flags MATCHES "-lflashcl" OR NOT flags MATCHES "/include")
    message(FATAL_ERROR "pkg-config --cflags --libs flashcl: ${flags}")
  endif()
endif()
message(STATUS "find_package(FlashCL) consumer built")
