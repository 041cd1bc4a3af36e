# depengine_clang_openmp_executable(NAME <name> SOURCES ... [DEFINITIONS ...] [OUTPUT_DIRECTORY dir])
#
# Builds one executable with clang++ and LLVM's OpenMP runtime (libomp), inside this GCC-configured project. CMake
# allows one C++ compiler per project, so the objects are produced by custom commands (with depfiles, so that header
# edits rebuild them) rather than by a second project: the same sources a GCC target builds, compiled again, with the
# project's warning flags. Sources are paths relative to the calling folder or absolute; headers are included from
# the repository root, as everywhere. The target, part of `all`, is called <name>_clang: Ninja would take a target
# named like the file it produces in the same folder for a second rule producing that file.
#
# Requires DEPENGINE_CLANGXX (clang++ with libomp: Debian clang + libomp-dev, see scripts/setup.sh).

function(depengine_clang_openmp_executable)
  cmake_parse_arguments(ARG "" "NAME;OUTPUT_DIRECTORY" "SOURCES;DEFINITIONS" ${ARGN})
  # The flags of the release preset and of depengine_warnings (cmake/depengine.cmake), for clang.
  set(flags -std=c++20 -O3 -DNDEBUG -fopenmp=libomp -pthread -Wall -Wextra -Wpedantic -Wshadow -Wconversion
            -Wno-sign-conversion -Wno-missing-field-initializers)
  if(DEPENGINE_WERROR)
    list(APPEND flags -Werror)
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  endif()
  set(object_dir ${CMAKE_CURRENT_BINARY_DIR}/${ARG_NAME}.clang)
  set(defines)
  foreach(definition IN LISTS ARG_DEFINITIONS)
    list(APPEND defines -D${definition})
  endforeach()
  set(objects)
  foreach(source IN LISTS ARG_SOURCES)
    cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} NORMALIZE OUTPUT_VARIABLE absolute)
    cmake_path(RELATIVE_PATH absolute BASE_DIRECTORY ${DEPENGINE_SOURCE_DIR} OUTPUT_VARIABLE relative)
    string(REPLACE "/" "_" flat ${relative})
    set(object ${object_dir}/${flat}.o)
    add_custom_command(
      OUTPUT ${object}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${object_dir}
      COMMAND ${DEPENGINE_CLANGXX} ${flags} ${defines} -I${DEPENGINE_SOURCE_DIR} -MD -MF
              ${object}.d -c ${absolute} -o ${object}
      DEPENDS ${absolute}
      DEPFILE ${object}.d
      COMMENT "clang++ (libomp) ${relative}"
      VERBATIM)
    list(APPEND objects ${object})
  endforeach()
  set(executable ${ARG_OUTPUT_DIRECTORY}/${ARG_NAME})
  add_custom_command(
    OUTPUT ${executable}
    COMMAND ${DEPENGINE_CLANGXX} -fopenmp=libomp -pthread ${objects} -o ${executable}
    DEPENDS ${objects}
    COMMENT "Linking ${ARG_NAME} with clang++ and libomp"
    VERBATIM)
  add_custom_target(${ARG_NAME}_clang ALL DEPENDS ${executable})
  depengine_help_test(${ARG_NAME} ${executable})
endfunction()
