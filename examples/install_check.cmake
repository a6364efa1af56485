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
  # The paths it gives must be where the header and the library were installed (they are relative
  # to the .pc file, which sits deeper under a multiarch libdir).
  foreach(var includedir libdir)
    execute_process(COMMAND ${PKG_CONFIG_EXE} --variable=${var} flashcl OUTPUT_VARIABLE dir
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    set(${var}_path "${dir}")
  endforeach()
  file(GLOB libs "${libdir_path}/libflashcl.*")
  if(NOT EXISTS "${includedir_path}/flashcl.h" OR NOT libs)
    message(FATAL_ERROR "pkg-config's includedir (${includedir_path}) or libdir (${libdir_path}) misses FlashCL")
  endif()
endif()
message(STATUS "find_package(FlashCL) consumer built")
